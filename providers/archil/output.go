package archil

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/boxfs/boxfs/providers"
)

// output copies the command's stdout and stderr to the request's writers:
// from the answer where it carried them, else from their objects, which
// are then deleted.
func (b *Box) output(ctx context.Context, cid string, req providers.ExecRequest, a answer) error {
	const op = "archil.Exec"
	merge := req.Stdout != nil && req.Stdout == req.Stderr
	if a.inline {
		if err := write(req.Stdout, a.out); err != nil {
			return providers.E(providers.Unknown, op, err).WithBox(b.id)
		}
		if !merge {
			if err := write(req.Stderr, a.err); err != nil {
				return providers.E(providers.Unknown, op, err).WithBox(b.id)
			}
		}
		return nil
	}
	streams := []struct {
		ext string
		w   io.Writer
	}{{"out", req.Stdout}}
	if !merge {
		streams = append(streams, struct {
			ext string
			w   io.Writer
		}{"err", req.Stderr})
	}
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.fetch(ctx, b.cmdKey(cid, s.ext), s.w)
		}()
	}
	wg.Wait()
	for _, s := range streams {
		if err := b.p.c.deleteObject(context.WithoutCancel(ctx), b.disk, b.cmdKey(cid, s.ext)); err != nil {
			b.p.log.Debug("archil: deleting a command's output", "box", b.id, "err", err)
		}
	}
	for _, err := range errs {
		if err != nil {
			return wrap(op, b.id, err)
		}
	}
	return nil
}

// fetch copies one output object to w (nil: discard). A missing one (the
// box was removed meanwhile) is no output.
func (b *Box) fetch(ctx context.Context, key string, w io.Writer) error {
	resp, err := b.p.c.getObject(context.WithoutCancel(ctx), b.disk, key, nil)
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if w == nil {
		w = io.Discard
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

func write(w io.Writer, b []byte) error {
	if w == nil || len(b) == 0 {
		return nil
	}
	_, err := io.Copy(w, bytes.NewReader(b))
	return err
}
