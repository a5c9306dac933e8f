package modal

import (
	"context"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.Archiver = (*Box)(nil)

// untarScript extracts a tar from stdin into the directory $1, every entry
// owned by the box's user whatever the tar says. Exit 3: no such directory.
const untarScript = `[ -d "$1" ] || exit 3
cd "$1" && exec tar -x -f - --no-same-owner`

// tarScript writes a tar of $2 (a name in the directory $1) to stdout, after
// one byte "+" that says the name exists. Exit 3: it does not.
const tarScript = `cd "$1" 2>/dev/null && { [ -e "$2" ] || [ -L "$2" ]; } || exit 3
printf +
exec tar -c -f - -- "$2"`

// PutArchive extracts the tar stream into the box directory dir (which must
// exist) with tar in the box, the stream going over the command's stdin.
// Every entry becomes owned by the box's user. A missing dir is NotFound; a
// tar the box's tar refuses is Invalid.
func (b *Box) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	const op = "modal.PutArchive"
	if !path.IsAbs(dir) {
		return providers.Errorf(providers.Invalid, op, "dir %q is not absolute", dir).WithBox(b.id)
	}
	stderr := &cappedBuffer{max: 4 << 10}
	p, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", untarScript, "boxfs-untar", dir}, Dir: "/", Stdin: r, Stderr: stderr})
	if err != nil {
		return providers.E(0, op, err).WithBox(b.id).WithPath(dir)
	}
	code, err := p.Wait()
	switch {
	case err != nil:
		return providers.E(0, op, err).WithBox(b.id).WithPath(dir)
	case code == 3:
		return providers.PathError(op, b.id, dir, 2) // ENOENT
	case code != 0:
		return providers.Errorf(providers.Invalid, op, "tar in the box exited %d: %s", code, strings.TrimSpace(stderr.String())).WithBox(b.id).WithPath(dir)
	}
	return nil
}

// GetArchive returns a tar of p (a file or a directory) made by tar in the
// box; member names start with p's base name. A missing p is NotFound. The
// stream is the box's: treat it as untrusted. Closing it early kills the
// tar.
func (b *Box) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	const op = "modal.GetArchive"
	if !path.IsAbs(p) {
		return nil, providers.Errorf(providers.Invalid, op, "path %q is not absolute", p).WithBox(b.id)
	}
	parent, name := path.Split(path.Clean(p))
	if name == "" {
		parent, name = "/", "."
	}
	pr, pw := io.Pipe()
	ar := &archiveReader{pr: pr, stderr: &lockedBuffer{}, ctx: ctx, op: op, b: b, path: p}
	proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", tarScript, "boxfs-tar", parent, name}, Dir: "/", Stdout: pw, Stderr: ar.stderr})
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id).WithPath(p)
	}
	ar.proc = proc
	go func() {
		code, err := proc.Wait()
		ar.code, ar.err = code, err
		pw.Close()
	}()
	var first [1]byte
	if _, err := io.ReadFull(pr, first[:]); err != nil {
		pr.Close()
		return nil, ar.failure()
	}
	return ar, nil
}

// archiveReader is GetArchive's stream: at its end the tar's exit status
// decides whether the stream was whole.
type archiveReader struct {
	pr     *io.PipeReader
	stderr *lockedBuffer
	proc   providers.Process
	ctx    context.Context
	op     string
	b      *Box
	path   string
	code   int   // set before the pipe's writer closes
	err    error // likewise
}

func (a *archiveReader) Read(p []byte) (int, error) {
	n, err := a.pr.Read(p)
	if err == io.EOF {
		if ferr := a.failure(); ferr != nil {
			return n, ferr
		}
	}
	return n, err
}

// failure is the error of an ended tar, nil if it succeeded.
func (a *archiveReader) failure() error {
	switch {
	case a.err != nil:
		return providers.E(0, a.op, a.err).WithBox(a.b.id).WithPath(a.path)
	case a.code == 3:
		return providers.PathError(a.op, a.b.id, a.path, 2) // ENOENT
	case a.code != 0:
		return providers.Errorf(providers.Unknown, a.op, "tar in the box exited %d: %s", a.code, strings.TrimSpace(a.stderr.String())).WithBox(a.b.id).WithPath(a.path)
	}
	return nil
}

// Close stops reading; a tar still running is killed.
func (a *archiveReader) Close() error {
	a.pr.Close()
	if a.proc != nil {
		_ = a.proc.Kill(context.WithoutCancel(a.ctx))
	}
	return nil
}

// lockedBuffer keeps the first 4 KiB written to it, safe for one writer
// and one reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  cappedBuffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.max = 4 << 10
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
