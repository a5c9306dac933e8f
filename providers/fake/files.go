package fake

import (
	"bytes"
	"context"
	"io"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// view is a box's files as one caller sees them: the host (each call
// recorded and scripted) or a program in the box (neither).
type view struct {
	b    *Box
	host bool
}

// do runs one file operation: record it, apply the script, check the box
// still runs, then run fn on the tree under the box's lock. fn returns a
// size to record (0: keep the one in c) and an errno.
func (v view) do(ctx context.Context, c Call, content []byte, fn func(t *tree) (int64, syscall.Errno)) error {
	return v.doErr(ctx, c, content, func(t *tree) (int64, error) {
		size, errno := fn(t)
		if errno != 0 {
			return size, providers.PathError("fake."+c.Op, v.b.id, c.Path, errno)
		}
		return size, nil
	})
}

// doErr is do for an operation that fails with more than an errno.
func (v view) doErr(ctx context.Context, c Call, content []byte, fn func(t *tree) (int64, error)) error {
	b := v.b
	op := "fake." + c.Op
	c.Box = b.id
	var rec *record
	if v.host {
		rec = b.p.record(c, nil, content)
		if err := b.p.script(rec).before(ctx, b.p.clock, op, &rec.Call); err != nil {
			b.p.done(rec, err)
			return err
		}
	}
	err := func() error {
		if ctx.Err() != nil {
			return ctxError(ctx, op)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.usableLocked(op); err != nil {
			return err
		}
		size, err := fn(b.tree)
		if rec != nil && size > 0 {
			b.p.mu.Lock()
			rec.Size = size
			b.p.mu.Unlock()
		}
		return err
	}()
	b.p.done(rec, err)
	return err
}

func (v view) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	var fi providers.FileInfo
	err := v.do(ctx, Call{Op: "Stat", Path: name}, nil, func(t *tree) (e int64, errno syscall.Errno) {
		fi, errno = t.stat(name, follow)
		return
	})
	return fi, err
}

func (v view) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	var fi providers.FileInfo
	err := v.do(ctx, Call{Op: "Lstat", Path: name}, nil, func(t *tree) (e int64, errno syscall.Errno) {
		fi, errno = t.stat(name, noFollow)
		return
	})
	return fi, err
}

// StatPath stats path without following a symlink at it, as Docker's
// archive stat does.
func (v view) StatPath(ctx context.Context, name string) (providers.FileInfo, error) {
	var fi providers.FileInfo
	err := v.do(ctx, Call{Op: "StatPath", Path: name}, nil, func(t *tree) (e int64, errno syscall.Errno) {
		fi, errno = t.stat(name, noFollow)
		return
	})
	return fi, err
}

func (v view) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	var fis []providers.FileInfo
	err := v.do(ctx, Call{Op: "ReadDir", Path: name}, nil, func(t *tree) (e int64, errno syscall.Errno) {
		fis, errno = t.readDir(name)
		return
	})
	return fis, err
}

func (v view) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	var fis []providers.FileInfo
	err := v.do(ctx, Call{Op: "Walk", Path: root}, nil, func(t *tree) (e int64, errno syscall.Errno) {
		fis, errno = t.walkTree(root)
		return
	})
	return fis, err
}

// ReadFile returns the file's bytes as they were when it was called.
func (v view) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	var data []byte
	err := v.do(ctx, Call{Op: "ReadFile", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		var errno syscall.Errno
		data, errno = t.readFile(name)
		return int64(len(data)), errno
	})
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (v view) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	var n int
	err := v.do(ctx, Call{Op: "ReadAt", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		var errno syscall.Errno
		n, errno = t.readAt(name, p, off)
		return int64(n), errno
	})
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// WriteFile reads r to its end, then replaces name at once. If r fails,
// name is left as it was.
func (v view) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	data, rerr := io.ReadAll(r)
	if rerr != nil {
		err := providers.E(0, "fake.WriteFile", rerr).WithBox(v.b.id).WithPath(name)
		if v.host {
			v.b.p.done(v.b.p.record(Call{Op: "WriteFile", Box: v.b.id, Path: name, Size: int64(len(data))}, nil, data), err)
		}
		return err
	}
	return v.do(ctx, Call{Op: "WriteFile", Path: name, Size: int64(len(data))}, data, func(t *tree) (int64, syscall.Errno) {
		return 0, t.writeFile(name, data, perm)
	})
}

func (v view) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	var n int
	err := v.do(ctx, Call{Op: "WriteAt", Path: name, Size: int64(len(p))}, p, func(t *tree) (int64, syscall.Errno) {
		var errno syscall.Errno
		n, errno = t.writeAt(name, p, off)
		return 0, errno
	})
	return n, err
}

func (v view) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	return v.do(ctx, Call{Op: "CreateFile", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.create(name, perm, exclusive)
	})
}

func (v view) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return v.do(ctx, Call{Op: "Mkdir", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.mkdir(name, perm)
	})
}

func (v view) Remove(ctx context.Context, name string) error {
	return v.do(ctx, Call{Op: "Remove", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.remove(name)
	})
}

func (v view) Rmdir(ctx context.Context, name string) error {
	return v.do(ctx, Call{Op: "Rmdir", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.rmdir(name)
	})
}

func (v view) Rename(ctx context.Context, oldname, newname string) error {
	return v.do(ctx, Call{Op: "Rename", Path: oldname, Target: newname}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.rename(oldname, newname)
	})
}

func (v view) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return v.do(ctx, Call{Op: "Chmod", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.chmod(name, mode)
	})
}

func (v view) Chown(ctx context.Context, name string, uid, gid int) error {
	return v.do(ctx, Call{Op: "Chown", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.chown(name, uid, gid)
	})
}

func (v view) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return v.do(ctx, Call{Op: "Utimes", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.utimes(name, atime, mtime)
	})
}

func (v view) Truncate(ctx context.Context, name string, size int64) error {
	return v.do(ctx, Call{Op: "Truncate", Path: name, Size: size}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.truncate(name, size)
	})
}

func (v view) Symlink(ctx context.Context, target, name string) error {
	return v.do(ctx, Call{Op: "Symlink", Path: name, Target: target}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.symlink(target, name)
	})
}

func (v view) Readlink(ctx context.Context, name string) (string, error) {
	var target string
	err := v.do(ctx, Call{Op: "Readlink", Path: name}, nil, func(t *tree) (e int64, errno syscall.Errno) {
		target, errno = t.readlink(name)
		return
	})
	return target, err
}

func (v view) Link(ctx context.Context, oldname, newname string) error {
	return v.do(ctx, Call{Op: "Link", Path: oldname, Target: newname}, nil, func(t *tree) (int64, syscall.Errno) {
		return 0, t.link(oldname, newname)
	})
}

func (v view) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	var st providers.StatFS
	err := v.do(ctx, Call{Op: "Statfs", Path: name}, nil, func(t *tree) (e int64, errno syscall.Errno) {
		st, errno = t.statfs(name)
		return
	})
	return st, err
}

// Fsync checks that name exists: the fake's memory is as durable as it
// gets.
func (v view) Fsync(ctx context.Context, name string) error {
	return v.do(ctx, Call{Op: "Fsync", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		_, errno := t.existing(name, follow)
		return 0, errno
	})
}
