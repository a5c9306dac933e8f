package agent

import (
	"context"
	"encoding/binary"
	"net/url"

	"github.com/pkg/sftp"

	"github.com/boxfs/boxfs/providers"
)

// A batch of removals (opRemoves) is one SETSTAT whose data@boxfs holds
// one record per entry, in order:
//
//	kind (byte: removeFile for unlink(2), removeDir for rmdir(2)) | path | NUL
//
// and whose query's path is the first entry's, so that an agent without
// the operation answers it as one it does not know rather than as a
// malformed query. The agent does each entry in order and answers with
// batchStatusCode and, as the message, the hex of one errno u32 per entry
// (0 for removed). Up to removeMax entries, and inlineMax of records, go
// in one request; more go as several.
const (
	removeFile = 'f'
	removeDir  = 'd'
	// removeMax is the most entries one request carries: its answer (8
	// bytes of hex an entry) stays within pkg/sftp's 256 KiB packet.
	removeMax = 16 << 10
)

// RemoveFiles removes each of rms in order, a directory with rmdir(2) and
// anything else with unlink(2) (a final symlink is removed, never
// followed), in one round trip (a few for more than removeMax entries or
// inlineMax of paths), and returns one error per entry: nil where it was
// removed, the errno's code (NotFound for a name already gone) otherwise.
// A name that is not an absolute path, or is under ReservedDir, is that
// entry's error and is not sent. An error of its own means the first
// request failed: which of its entries were done is not known. A later
// request's failure is the error of each entry it held (done or not, not
// known) and of each after it (not sent): the results of the requests
// before it stand. An agent without the operation answers Unsupported,
// having removed nothing.
func (c *Client) RemoveFiles(ctx context.Context, rms []providers.FileRemove) ([]error, error) {
	const op = "agent.RemoveFiles"
	errs := make([]error, len(rms))
	// The entries to send, by index into rms, and their cleaned paths.
	var at []int
	var ps []string
	for i, rm := range rms {
		p, err := clean(op, rm.Name)
		if err != nil {
			errs[i] = c.withBox(op, rm.Name, err)
			continue
		}
		at = append(at, i)
		ps = append(ps, p)
	}
	for sent := 0; len(at) > 0; sent++ {
		n, size := 0, 0
		for n < len(at) && n < removeMax && (n == 0 || size+len(ps[n])+2 <= inlineMax) {
			size += len(ps[n]) + 2
			n++
		}
		res, err := c.removeBatch(ctx, op, rms, at[:n], ps[:n])
		if err != nil {
			if sent == 0 {
				return nil, err
			}
			for _, i := range at {
				errs[i] = err
			}
			break
		}
		for k, i := range at[:n] {
			errs[i] = res[k]
		}
		at, ps = at[n:], ps[n:]
	}
	return errs, nil
}

// removeBatch sends one request of the entries of rms at, whose cleaned
// paths are ps, and returns each one's result.
func (c *Client) removeBatch(ctx context.Context, op string, rms []providers.FileRemove, at []int, ps []string) ([]error, error) {
	var data []byte
	for k, i := range at {
		kind := byte(removeFile)
		if rms[i].Dir {
			kind = removeDir
		}
		data = append(data, kind)
		data = append(data, ps[k]...)
		data = append(data, 0)
	}
	first := ps[0]
	q := url.Values{"path": {first}}
	return call(ctx, c, op, first, true, func() ([]error, error) {
		answer := c.laterOp(op, first, c.setExt(opRemoves, q, sftp.StatExtended{ExtType: extData, ExtData: string(data)}))
		return c.removeResults(op, answer, ps)
	})
}

// removeResults decodes the answer to a batch of removals of ps: a
// batchStatusCode status with an errno per entry; any other answer is the
// error it is.
func (c *Client) removeResults(op string, answer error, ps []string) ([]error, error) {
	raw, err := batchAnswerRecords(answer, 4, len(ps))
	if err != nil {
		return nil, err
	}
	out := make([]error, len(ps))
	for k, p := range ps {
		if errno := binary.BigEndian.Uint32(raw[4*k:]); errno != 0 {
			out[k] = providers.PathError(op, c.box, p, hostErrno(errno))
		}
	}
	return out, nil
}
