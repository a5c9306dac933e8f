package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/pkg/sftp"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// A batch of whole files (the write-behind mode's push) travels as one tar
// stream: a member per file, named by its index, its path and write
// options in the PAX record batchQuery as the query an opWrite takes; a
// directory member ("make=1" to make it) sets a directory's attributes. Up to
// inlineMax of tar rides in one SETSTAT of opBatch; a larger one is an
// OPEN, WRITEs and a CLOSE of opBatch. Either is answered by
// batchStatusCode with, as the message, the hex of one record per member:
// errno u32 (0 for written) and the statNS of the file after the write.
const (
	opBatch    = "batch"
	batchQuery = "BOXFS.q"
	// batchMax is the most files one batch carries: the answer (152 bytes
	// of hex a file) stays within pkg/sftp's 256 KiB packet.
	batchMax = 1000
	// batchRecord is one member's answer, before hex: an errno and a stat.
	batchRecord = 4 + statNSLen
)

// batchStatusCode marks a batch's answer.
const batchStatusCode uint32 = 0x627a0000 // "bz\0\0"

// writeQuery is the query of a write of p with o's options.
func writeQuery(p string, o providers.WriteOptions) url.Values {
	q := url.Values{"path": {p}, "perm": {shell.Octal(o.Perm)}, "stat": {"1"}}
	if o.ForceMode {
		q.Set("force", "1")
	}
	if o.Exclusive {
		q.Set("excl", "1")
	}
	if o.Chown {
		q.Set("uid", strconv.Itoa(o.UID))
		q.Set("gid", strconv.Itoa(o.GID))
	}
	if !o.Atime.IsZero() {
		q.Set("atime", strconv.FormatInt(o.Atime.UnixNano(), 10))
	}
	if !o.Mtime.IsZero() {
		q.Set("mtime", strconv.FormatInt(o.Mtime.UnixNano(), 10))
	}
	return q
}

// WriteFiles writes files in one round trip (a few for more than inlineMax
// of data): each replaced atomically with its options, as WriteFileStat
// does, and answered with its attributes or its errno. More than batchMax
// files go as several batches.
func (c *Client) WriteFiles(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	out := make([]providers.FileWritten, 0, len(files))
	for len(files) > 0 {
		n := min(len(files), batchMax)
		res, err := c.writeBatch(ctx, files[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
		files = files[n:]
	}
	return out, nil
}

func (c *Client) writeBatch(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	const op = "agent.WriteFiles"
	ps := make([]string, len(files))
	var total int64
	for i, f := range files {
		p, err := clean(op, f.Name)
		if err != nil {
			return nil, c.withBox(op, f.Name, err)
		}
		ps[i] = p
		total += f.Size + 1024
	}
	first := ps[0]
	q := url.Values{"id": {providers.NewID(8)}}
	// The tar of a small batch is built first, as its size is known only
	// then (each member's headers take 1.5 KiB or more): a tar within
	// inlineMax is sent inline, a larger one streamed from the buffer.
	tarOf := func() io.ReadCloser {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeBatchTar(pw, files, ps)) }()
		return pr
	}
	if total <= inlineMax {
		var buf bytes.Buffer
		if err := writeBatchTar(&buf, files, ps); err != nil {
			return nil, providers.E(0, op, err).WithBox(c.box).WithPath(first)
		}
		if buf.Len() <= inlineMax {
			return call(ctx, c, op, first, true, func() ([]providers.FileWritten, error) {
				return c.batchResults(op, c.setExt(opBatch, q, sftp.StatExtended{ExtType: extData, ExtData: buf.String()}), ps)
			})
		}
		tarOf = func() io.ReadCloser { return io.NopCloser(bytes.NewReader(buf.Bytes())) }
	}
	return call(ctx, c, op, first, true, func() ([]providers.FileWritten, error) {
		r := tarOf()
		defer r.Close()
		src := &srcReader{r: r, ctxErr: ctx.Err}
		f, err := c.sc.OpenFile(syntheticPath(opBatch, q), os.O_WRONLY|os.O_CREATE)
		if err != nil {
			return nil, err
		}
		if _, err := f.ReadFromWithConcurrency(src, writeConcurrency); err != nil || src.err != nil {
			// Nothing of the batch is applied: the agent drops it at CLOSE.
			c.sc.SetExtendedData(syntheticPath(opBatch, url.Values{"id": q["id"]}),
				[]sftp.StatExtended{{ExtType: extAbort}})
			f.Close()
			if src.err != nil {
				return nil, providers.E(0, op, src.err).WithBox(c.box).WithPath(first)
			}
			return nil, err
		}
		return c.batchResults(op, f.Close(), ps)
	})
}

// writeBatchTar writes files as the batch's tar stream.
func writeBatchTar(w io.Writer, files []providers.FileWrite, ps []string) error {
	tw := tar.NewWriter(w)
	for i, f := range files {
		q := writeQuery(ps[i], f.Options)
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strconv.Itoa(i), Size: f.Size, Mode: 0o600, Format: tar.FormatPAX}
		if f.Dir {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
			if f.Make {
				q.Set("make", "1")
			}
		}
		hdr.PAXRecords = map[string]string{batchQuery: q.Encode()}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if f.Dir {
			continue
		}
		if n, err := io.Copy(tw, f.Data); err != nil {
			return err
		} else if n != f.Size {
			return io.ErrUnexpectedEOF
		}
	}
	return tw.Close()
}

// batchResults decodes a batch's answer, a batchStatusCode status with
// one record per file sent; any other answer is the error it is.
func (c *Client) batchResults(op string, answer error, ps []string) ([]providers.FileWritten, error) {
	raw, err := batchAnswerRecords(answer, batchRecord, len(ps))
	if err != nil {
		return nil, err
	}
	out := make([]providers.FileWritten, len(ps))
	for i, p := range ps {
		rec := raw[i*batchRecord : (i+1)*batchRecord]
		if errno := binary.BigEndian.Uint32(rec); errno != 0 {
			out[i].Err = providers.PathError(op, c.box, p, hostErrno(errno))
			continue
		}
		s, err := unmarshalStatNS(string(rec[4:]))
		if err != nil {
			return nil, errBadAnswer
		}
		out[i].Info = s.info(baseOf(p))
	}
	return out, nil
}

// statusMessage reads back the message pkg/sftp keeps inside a
// StatusError's text.
func statusMessage(se *sftp.StatusError) (string, bool) {
	rest, found := strings.CutPrefix(se.Error(), "sftp: ")
	if !found {
		return "", false
	}
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", false
	}
	msg, err := strconv.Unquote(quoted)
	return msg, err == nil
}

func baseOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// batchAnswerRecords returns the n records of size bytes each that answer,
// a batchStatusCode status, carries in hex; any other answer is the error
// it is.
func batchAnswerRecords(answer error, size, n int) ([]byte, error) {
	var se *sftp.StatusError
	if !errors.As(answer, &se) || se.Code != batchStatusCode {
		if answer == nil {
			return nil, errBadAnswer
		}
		return nil, answer
	}
	msg, ok := statusMessage(se)
	if !ok {
		return nil, errBadAnswer
	}
	raw, err := hex.DecodeString(msg)
	if err != nil || len(raw) != size*n {
		return nil, errBadAnswer
	}
	return raw, nil
}
