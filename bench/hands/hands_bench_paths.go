package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// rawExec does each measured operation as one plain exec in the box, the
// way a file system without hands would: stat, cat, cat > tmp && mv, ls -l.
// Only the measured methods are implemented.
type rawExec struct {
	box providers.Box
}

var _ providers.Files = rawExec{}

func (r rawExec) run(ctx context.Context, stdin io.Reader, stdout io.Writer, argv ...string) error {
	p, err := r.box.Exec(ctx, providers.ExecRequest{Argv: argv, Stdin: stdin, Stdout: stdout})
	if err != nil {
		return err
	}
	code, err := p.Wait()
	if err == nil && code != 0 {
		err = fmt.Errorf("%v exited %d", argv, code)
	}
	return err
}

func (r rawExec) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	return providers.FileInfo{}, r.run(ctx, nil, io.Discard, "stat", "-L", "-c", "%f %s %.9Y %i %h %u %g", "--", name)
}

func (r rawExec) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	var b bytes.Buffer
	if err := r.run(ctx, nil, &b, "cat", "--", name); err != nil {
		return nil, err
	}
	return io.NopCloser(&b), nil
}

func (r rawExec) WriteFile(ctx context.Context, name string, rd io.Reader, perm providers.FileMode) error {
	return r.run(ctx, rd, io.Discard, "sh", "-c", `cat > "$1.tmp" && mv -f -- "$1.tmp" "$1"`, "sh", name)
}

func (r rawExec) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	var b bytes.Buffer
	if err := r.run(ctx, nil, &b, "ls", "-la", "--", name); err != nil {
		return nil, err
	}
	return make([]providers.FileInfo, bytes.Count(b.Bytes(), []byte("\n"))-3), nil // minus total, . and ..
}

func (rawExec) Lstat(context.Context, string) (providers.FileInfo, error) { panic("not measured") }
func (rawExec) ReadAt(context.Context, string, []byte, int64) (int, error) {
	panic("not measured")
}
func (rawExec) WriteAt(context.Context, string, []byte, int64) (int, error) {
	panic("not measured")
}
func (rawExec) Create(context.Context, string, providers.FileMode, bool) error {
	panic("not measured")
}
func (rawExec) Mkdir(context.Context, string, providers.FileMode) error { panic("not measured") }
func (rawExec) Remove(context.Context, string) error                    { panic("not measured") }
func (rawExec) Rmdir(context.Context, string) error                     { panic("not measured") }
func (rawExec) Rename(context.Context, string, string) error            { panic("not measured") }
func (rawExec) Chmod(context.Context, string, providers.FileMode) error { panic("not measured") }
func (rawExec) Chown(context.Context, string, int, int) error           { panic("not measured") }
func (rawExec) Utimes(context.Context, string, time.Time, time.Time) error {
	panic("not measured")
}
func (rawExec) Truncate(context.Context, string, int64) error    { panic("not measured") }
func (rawExec) Symlink(context.Context, string, string) error    { panic("not measured") }
func (rawExec) Readlink(context.Context, string) (string, error) { panic("not measured") }
func (rawExec) Link(context.Context, string, string) error       { panic("not measured") }
func (rawExec) Statfs(context.Context, string) (providers.StatFS, error) {
	panic("not measured")
}
func (rawExec) Fsync(context.Context, string) error { panic("not measured") }

// hostFiles does the measured operations on a host directory with the os
// package: the floor.
type hostFiles struct{ rawExec }

func (hostFiles) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	return providers.FileInfo{Name: fi.Name(), Mode: fi.Mode(), Size: fi.Size(), Mtime: fi.ModTime()}, nil
}

func (hostFiles) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	return os.Open(name)
}

func (hostFiles) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".w-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

func (h hostFiles) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	ents, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	out := make([]providers.FileInfo, 0, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, providers.FileInfo{Name: fi.Name(), Mode: fi.Mode(), Size: fi.Size(), Mtime: fi.ModTime()})
	}
	return out, nil
}
