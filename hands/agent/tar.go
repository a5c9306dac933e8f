package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Exit codes of "boxfs agent -tar": 64+errno when the root cannot be
// archived (nothing written), tarPartial when some names could not be.
const (
	tarErrnoBase = 64
	tarPartial   = 2
)

// WriteTar writes one tar of the names read from in (NUL-separated, each
// relative to root, slash-separated) to out, after a single 'K' byte that
// says the root was found. It is what GNU tar's
//
//	tar -C ROOT --no-recursion --hard-dereference --null -T - -cf -
//
// does, with no tar in the box: a directory comes as itself without its
// contents, a symbolic link as a link, every name of a hard-linked file as
// its own regular file, a fifo or device as its header; sockets are left
// out. Times keep their nanoseconds (PAX). Names never leave root: a name
// with a ".." element, or one that goes through a symbolic link out of
// root, is refused. A name that cannot be archived (gone since it was
// listed, a socket, refused) is told on warn and left out; WriteTar then
// returns an error wrapping errPartial once the archive is whole.
func WriteTar(in io.Reader, out io.Writer, root string, warn io.Writer) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "tar", Path: root, Err: syscall.ENOTDIR}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	bw := bufio.NewWriterSize(out, 256<<10)
	bw.WriteByte('K')
	tw := tar.NewWriter(bw)
	names := bufio.NewReader(in)
	failed := 0
	for {
		name, rerr := names.ReadString(0)
		name = strings.TrimSuffix(name, "\x00")
		if name != "" {
			if err := addToTar(tw, r, name); err != nil {
				var werr writeError
				if errors.As(err, &werr) {
					return werr.err
				}
				failed++
				fmt.Fprintf(warn, "boxfs agent: tar: %s: %v\n", name, err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d names left out", errPartial, failed)
	}
	return nil
}

var errPartial = errors.New("some names could not be archived")

// writeError is a failure to write the archive itself: the end of it.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }

// addToTar writes name's member. Errors other than writeError concern the
// name alone and leave the archive as it was.
func addToTar(tw *tar.Writer, r *os.Root, name string) error {
	if !localName(name) {
		return errors.New("not a local name under the root")
	}
	fi, err := r.Lstat(name)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = r.Readlink(name); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err // a socket
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Format = tar.FormatPAX
	hdr.Uname, hdr.Gname = "", ""
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	if !fi.Mode().IsRegular() {
		if err := tw.WriteHeader(hdr); err != nil {
			return writeError{err}
		}
		return nil
	}
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// The size is the one the header gives: a file that shrank meanwhile is
	// padded with zeros, one that grew is cut there, as GNU tar does.
	if err := tw.WriteHeader(hdr); err != nil {
		return writeError{err}
	}
	n, err := io.CopyN(tw, f, hdr.Size)
	if err != nil && !errors.Is(err, io.EOF) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			// A read error: pad so the archive stays whole, and say so.
			if perr := pad(tw, hdr.Size-n); perr != nil {
				return writeError{perr}
			}
			return err
		}
		return writeError{err}
	}
	if n < hdr.Size {
		if err := pad(tw, hdr.Size-n); err != nil {
			return writeError{err}
		}
		return fmt.Errorf("file shrank by %d bytes while it was read; padded with zeros", hdr.Size-n)
	}
	return nil
}

func pad(w io.Writer, n int64) error {
	_, err := io.CopyN(w, zeros{}, n)
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// localName reports whether name is relative, clean, and free of ".."
// elements and NUL bytes.
func localName(name string) bool {
	if name == "" || name[0] == '/' || strings.IndexByte(name, 0) >= 0 || path.Clean(name) != name {
		return false
	}
	return name != ".." && !strings.HasPrefix(name, "../")
}

// GetFiles returns one tar of paths under root (each relative to root,
// slash-separated; a directory comes as itself, without its contents),
// made by the agent in the box ("boxfs agent -tar ROOT" over the command
// stream), so the box needs no tar of its own. It returns Unavailable when
// the command stream is not up, so the caller can get the tar another way.
// Close returns an error naming what was left out when some paths could not
// be archived; the archive is whole regardless.
func (ch *Channel) GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	const op = "agent.GetFiles"
	var names strings.Builder
	for _, p := range paths {
		if !localName(p) {
			return nil, providers.Errorf(providers.Unsafe, op, "path %q is not a local path under the root", p).WithBox(ch.box.ID()).WithPath(root)
		}
		names.WriteString(p)
		names.WriteByte(0)
	}
	dest, err := ch.binaryPath(ctx, op)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	stderr := &tailBuffer{max: 4096}
	p, err := ch.Exec(ctx, providers.ExecRequest{
		Argv:   []string{dest, "agent", "-tar", root},
		Dir:    "/",
		Stdin:  strings.NewReader(names.String()),
		Stdout: pw,
		Stderr: stderr,
	}, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	x := &tarReader{pr: pr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(x.done)
		code, err := p.Wait()
		switch {
		case err != nil:
			x.err = providers.E(0, op, err).WithBox(ch.box.ID()).WithPath(root)
		case code > tarErrnoBase && code < tarErrnoBase+128:
			x.err = providers.PathError(op, ch.box.ID(), root, syscall.Errno(code-tarErrnoBase))
		case code != 0:
			x.err = providers.Errorf(providers.Unknown, op, "the agent's tar exited %d: %s", code, strings.TrimSpace(stderr.String())).WithBox(ch.box.ID()).WithPath(root)
		}
		pw.CloseWithError(x.err)
	}()
	var k [1]byte
	if _, err := io.ReadFull(pr, k[:]); err != nil || k[0] != 'K' {
		x.Close()
		if x.err != nil {
			return nil, x.err
		}
		return nil, providers.Errorf(providers.Unknown, op, "the agent's tar gave no archive: %s", strings.TrimSpace(stderr.String())).WithBox(ch.box.ID()).WithPath(root)
	}
	return x, nil
}

// tarReader is the archive GetFiles returns.
type tarReader struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
	closed bool
}

func (x *tarReader) Read(p []byte) (int, error) { return x.pr.Read(p) }

// Close stops the archive (the agent's tar is ended when it still runs)
// and returns why the archive left something out, if it did.
func (x *tarReader) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	// A caller that read the archive to its end sees the agent's status;
	// one that stopped before it knows why, and the agent is ended.
	rest := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := x.pr.Read(b[:])
		rest <- err
	}()
	select {
	case err := <-rest:
		if err != nil {
			<-x.done
			x.cancel()
			return x.err
		}
	case <-time.After(tarEndWait):
	}
	x.pr.Close()
	x.cancel()
	<-x.done
	return nil
}

// tarEndWait is how long Close waits for the agent's status after the
// archive's last byte.
const tarEndWait = 5 * time.Second
