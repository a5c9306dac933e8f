package e2b

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"syscall"

	"github.com/boxfs/boxfs/providers"
)

// The file operations envd's /files endpoint settles exactly, which hands
// uses as the box's own (its "native-ops" path) where the agent does not
// run. Any answer other than the file or "no such file" is Unsupported,
// and hands's script answers instead; but a box that is gone, or paused
// (Refused, as its commands are), is said so.

// ReadFile streams the whole file name (following symlinks) from envd's
// GET /files.
func (b *Box) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	resp, err := b.download(ctx, "e2b.ReadFile", name, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ReadAt reads up to len(p) bytes of name at off with a Range request;
// io.EOF at the end, as io.ReaderAt.
func (b *Box) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "e2b.ReadAt"
	if off < 0 {
		return 0, providers.Errorf(providers.Invalid, op, "negative offset %d", off).WithBox(b.id).WithPath(name)
	}
	if len(p) == 0 {
		return 0, nil
	}
	resp, err := b.download(ctx, op, name, fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	if err != nil {
		if providers.IsCode(err, providers.Invalid) {
			return 0, io.EOF // 416: off is at or past the end
		}
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, providers.Errorf(providers.Unsupported, op, "envd answered %d to a range request", resp.StatusCode).WithBox(b.id).WithPath(name)
	}
	n, err := io.ReadFull(resp.Body, p)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return n, io.EOF
	}
	if err != nil {
		return n, b.envdError(ctx, op, err).WithPath(name)
	}
	return n, nil
}

// download sends GET /files for name; a Range of "" asks for all of it.
// A 416 answer (a range past the end) is Invalid.
func (b *Box) download(ctx context.Context, op, name, rng string) (*http.Response, error) {
	if err := b.gone(op); err != nil {
		return nil, err
	}
	if !path.IsAbs(name) {
		return nil, providers.Errorf(providers.Invalid, op, "path %q is not absolute", name).WithBox(b.id)
	}
	q := url.Values{"path": {name}, "username": {b.p.user}}
	for n := 0; ; n++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.envd.base+"/files?"+q.Encode(), nil)
		if err != nil {
			return nil, providers.E(providers.Invalid, op, err).WithBox(b.id)
		}
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := b.envd.hc.Do(req)
		if err == nil && resp.StatusCode/100 == 2 {
			return resp, nil
		}
		if err == nil {
			status := resp.StatusCode
			err = readAPIError(resp, b.secrets()...)
			resp.Body.Close()
			switch status {
			case http.StatusNotFound:
				return nil, providers.PathError(op, b.id, name, syscall.ENOENT)
			case http.StatusRequestedRangeNotSatisfiable:
				return nil, providers.E(providers.Invalid, op, err).WithBox(b.id).WithPath(name)
			}
		}
		if !retryable(err) || n+1 >= maxAttempts || b.away(ctx) {
			e := b.envdError(ctx, op, err).WithPath(name)
			switch e.Code {
			case providers.Gone, providers.Refused, providers.Aborted, providers.Timeout, providers.Auth:
			default:
				e.Code = providers.Unsupported // the script settles it
			}
			return nil, e
		}
		if berr := backoff(ctx, n, err); berr != nil {
			return nil, providers.E(0, op, berr).WithBox(b.id)
		}
	}
}
