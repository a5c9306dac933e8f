package kubernetes

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/remotecommand"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.Archiver = (*Box)(nil)

// putScript extracts the tar on stdin into the directory $1, as kubectl cp
// does, but without taking the archive's owners (every entry belongs to the
// user tar runs as: the box's). Exit 3: the directory cannot be entered.
const putScript = `cd "$1" 2>/dev/null || exit 3
exec tar -x -o -f -`

// getScript writes a tar of $2 in the directory $1 to stdout, member names
// starting with $2, after one marker byte "T" once the path is known to be
// there. Exit 2: no such path; 3: the directory cannot be entered.
const getScript = `cd "$1" 2>/dev/null || exit 3
[ -e "$2" ] || [ -h "$2" ] || exit 2
printf T
exec tar -c -f - -- "$2"`

// PutArchive extracts a tar stream into the box directory dir (which must
// exist) with tar over exec. Every entry becomes owned by the box's user,
// whatever the tar says. Member names are checked before they reach the
// box: an absolute name or one that climbs out with ".." (a hard link's
// target too) is Unsafe, and a malformed tar is Invalid; nothing of a
// refused archive is extracted after the refused entry.
func (b *Box) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	const op = "kubernetes.PutArchive"
	if err := b.gone(op); err != nil {
		return err
	}
	if !path.IsAbs(dir) {
		return providers.Errorf(providers.Invalid, op, "dir %q is not absolute", dir).WithBox(b.id)
	}
	pr, pw := io.Pipe()
	checked := make(chan error, 1)
	go func() {
		err := checkTar(pw, r)
		pw.CloseWithError(err)
		checked <- err
	}()
	code, out, err := b.run(ctx, []string{"/bin/sh", "-c", putScript, "boxfs-put", dir}, pr)
	var cerr error
	select {
	case cerr = <-checked:
	case <-time.After(time.Second):
		// tar stopped reading before the end: unblock the checker.
		pr.CloseWithError(errors.New("extraction ended"))
		cerr = <-checked
	}
	if cerr != nil {
		var pe *providers.Error
		if errors.As(cerr, &pe) {
			return pe.WithBox(b.id).WithPath(dir)
		}
		if err == nil || code == 0 {
			return providers.E(providers.Invalid, op, cerr).WithBox(b.id).WithPath(dir)
		}
	}
	if err != nil {
		return providers.E(0, op, err).WithBox(b.id).WithPath(dir)
	}
	return tarExit(op, b.id, dir, code, out)
}

// tarExit classifies the exit of putScript or getScript.
func tarExit(op, box, p string, code int, stderr []byte) error {
	switch code {
	case 0:
		return nil
	case 2, 3:
		return providers.PathError(op, box, p, syscall.ENOENT)
	case 126, 127:
		return providers.Errorf(providers.Unsupported, op, "the box has no usable tar (exit %d): %s", code, bytes.TrimSpace(stderr)).WithBox(box)
	}
	return providers.Errorf(providers.Unknown, op, "tar exited %d: %s", code, bytes.TrimSpace(stderr)).WithBox(box).WithPath(p)
}

// checkTar copies a tar stream, refusing names that would land outside
// the directory it is extracted in.
func checkTar(w io.Writer, r io.Reader) error {
	const op = "kubernetes.PutArchive"
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		if !localName(hdr.Name) {
			return providers.Errorf(providers.Unsafe, op, "archive member %q would land outside the directory", hdr.Name)
		}
		if hdr.Typeflag == tar.TypeLink && !localName(hdr.Linkname) {
			return providers.Errorf(providers.Unsafe, op, "archive member %q links to %q, outside the directory", hdr.Name, hdr.Linkname)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// localName reports whether a member name stays under the directory:
// relative, and no ".." component.
func localName(name string) bool {
	if name == "" || strings.HasPrefix(name, "/") {
		return false
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return false
		}
	}
	return true
}

// GetArchive returns a tar of path (a file or a directory) written by tar
// in the box; member names start with path's base name. A missing path is
// NotFound. The stream is the box's: treat it as untrusted. Closing it ends
// the exec.
func (b *Box) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	const op = "kubernetes.GetArchive"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	if !path.IsAbs(p) {
		return nil, providers.Errorf(providers.Invalid, op, "path %q is not absolute", p).WithBox(b.id)
	}
	p = path.Clean(p)
	dir, base := path.Split(p)
	if base == "" {
		dir, base = "/", "."
	}
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	out := &tarOut{w: pw, started: make(chan struct{})}
	stderr := &capped{max: runOutputMax}
	ended := make(chan error, 1)
	go func() {
		err := b.stream(sctx, b.execURL([]string{"/bin/sh", "-c", getScript, "boxfs-get", dir, base}, false),
			remotecommand.StreamOptions{Stdout: out, Stderr: stderr})
		code, err := exitCode(err)
		switch {
		case err != nil && sctx.Err() == nil:
			err = b.lost(ctx, op, err)
		case err != nil:
			err = providers.E(0, op, sctx.Err()).WithBox(b.id)
		default:
			err = tarExit(op, b.id, p, code, stderr.Bytes())
		}
		pw.CloseWithError(err)
		ended <- err
	}()
	select {
	case <-out.started:
		return &archiveReader{PipeReader: pr, cancel: cancel}, nil
	case err := <-ended:
		cancel()
		if err == nil {
			err = providers.Errorf(providers.Unknown, op, "tar wrote nothing").WithBox(b.id).WithPath(p)
		}
		return nil, err
	}
}

// tarOut passes the box's tar on, after taking off getScript's marker.
type tarOut struct {
	w       *io.PipeWriter
	started chan struct{}
	seen    bool
}

func (t *tarOut) Write(p []byte) (int, error) {
	n := len(p)
	if !t.seen && n > 0 {
		if p[0] != 'T' {
			return 0, fmt.Errorf("getScript wrote %q first, not its marker", p[0])
		}
		t.seen = true
		close(t.started)
		p = p[1:]
	}
	if _, err := t.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}

// archiveReader ends the exec when the reader is closed.
type archiveReader struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (a *archiveReader) Close() error {
	a.cancel()
	return a.PipeReader.Close()
}
