package hands

import (
	"context"
	"io"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// ViaNativeOps is the path of a box that serves some file operations itself
// as methods of providers.Files's names (a Daytona sandbox's toolbox), but
// not the whole interface: each of those goes to the box, the rest to the
// scripts.
const ViaNativeOps = "native-ops"

// The operations a box may serve as methods, each found on its own. A box
// method answers with the same contract as providers.Files's; when it
// cannot settle a call exactly it changes nothing and answers Unsupported,
// and the script answers instead.
type (
	statOp interface {
		Stat(context.Context, string) (providers.FileInfo, error)
	}
	lstatOp interface {
		Lstat(context.Context, string) (providers.FileInfo, error)
	}
	readDirOp interface {
		ReadDir(context.Context, string) ([]providers.FileInfo, error)
	}
	readFileOp interface {
		ReadFile(context.Context, string) (io.ReadCloser, error)
	}
	readAtOp interface {
		ReadAt(context.Context, string, []byte, int64) (int, error)
	}
	writeFileOp interface {
		WriteFile(context.Context, string, io.Reader, providers.FileMode) error
	}
	writeAtOp interface {
		WriteAt(context.Context, string, []byte, int64) (int, error)
	}
	createOp interface {
		Create(context.Context, string, providers.FileMode, bool) error
	}
	mkdirOp interface {
		Mkdir(context.Context, string, providers.FileMode) error
	}
	removeOp interface {
		Remove(context.Context, string) error
	}
	rmdirOp interface {
		Rmdir(context.Context, string) error
	}
	renameOp interface {
		Rename(context.Context, string, string) error
	}
	chmodOp interface {
		Chmod(context.Context, string, providers.FileMode) error
	}
	chownOp interface {
		Chown(context.Context, string, int, int) error
	}
	utimesOp interface {
		Utimes(context.Context, string, time.Time, time.Time) error
	}
	truncateOp interface {
		Truncate(context.Context, string, int64) error
	}
	symlinkOp interface {
		Symlink(context.Context, string, string) error
	}
	readlinkOp interface {
		Readlink(context.Context, string) (string, error)
	}
	linkOp interface {
		Link(context.Context, string, string) error
	}
	statfsOp interface {
		Statfs(context.Context, string) (providers.StatFS, error)
	}
	fsyncOp interface {
		Fsync(context.Context, string) error
	}
)

// hasNativeOps reports whether box serves any file operation as a method.
func hasNativeOps(box providers.Box) bool {
	switch box.(type) {
	case statOp, lstatOp, readDirOp, readFileOp, readAtOp, writeFileOp, writeAtOp, createOp,
		mkdirOp, removeOp, rmdirOp, renameOp, chmodOp, chownOp, utimesOp, truncateOp,
		symlinkOp, readlinkOp, linkOp, statfsOp, fsyncOp:
		return true
	}
	return false
}

// useNativeOps takes the native-ops path when the box serves any file
// operation as a method (and is not a whole providers.Files, which New
// takes first).
func (h *Hands) useNativeOps() bool {
	if !hasNativeOps(h.box) {
		return false
	}
	n := &nativeOps{scripts: h.sh, box: h.box}
	h.via = ViaNativeOps
	h.files = n
	h.walker = n
	h.archiver = h.boxArchiver()
	return true
}

// nativeOps serves each operation the box has as a method through it, and
// the others, or a call the method answers Unsupported, through scripts.
type nativeOps struct {
	*scripts
	box providers.Box
}

var (
	_ providers.Files  = (*nativeOps)(nil)
	_ providers.Walker = (*nativeOps)(nil)
)

// unsettled reports whether a box method left the call to the script.
func unsettled(err error) bool { return providers.IsCode(err, providers.Unsupported) }

// via serves a one-path operation: through the box's own method (found as
// O) when the box has it and the method settles the call, else through
// the script.
func via[O, T any](ctx context.Context, n *nativeOps, op, name string, native func(O, context.Context, string) (T, error), script func(context.Context, string) (T, error)) (T, error) {
	p, err := checkPath(op, n.box.ID(), name)
	if err != nil {
		var zero T
		return zero, err
	}
	if o, ok := n.box.(O); ok {
		if v, err := native(o, ctx, p); !unsettled(err) {
			return v, err
		}
	}
	return script(ctx, p)
}

// viaErr is via for an operation that returns only an error.
func viaErr[O any](ctx context.Context, n *nativeOps, op, name string, native func(O, context.Context, string) error, script func(context.Context, string) error) error {
	_, err := via(ctx, n, op, name,
		func(o O, ctx context.Context, p string) (struct{}, error) { return struct{}{}, native(o, ctx, p) },
		func(ctx context.Context, p string) (struct{}, error) { return struct{}{}, script(ctx, p) })
	return err
}

// Stat returns name's attributes, following symlinks.
func (n *nativeOps) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	return via(ctx, n, "hands.Stat", name, statOp.Stat, n.scripts.Stat)
}

// Lstat returns name's attributes, not following a final symlink.
func (n *nativeOps) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	return via(ctx, n, "hands.Lstat", name, lstatOp.Lstat, n.scripts.Lstat)
}

// ReadDir lists a directory.
func (n *nativeOps) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	return via(ctx, n, "hands.ReadDir", name, readDirOp.ReadDir, n.scripts.ReadDir)
}

// ReadFile streams a whole file.
func (n *nativeOps) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	return via(ctx, n, "hands.ReadFile", name, readFileOp.ReadFile, n.scripts.ReadFile)
}

// Readlink returns a symlink's target.
func (n *nativeOps) Readlink(ctx context.Context, name string) (string, error) {
	return via(ctx, n, "hands.Readlink", name, readlinkOp.Readlink, n.scripts.Readlink)
}

// Statfs reports the capacity of the file system holding name.
func (n *nativeOps) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	return via(ctx, n, "hands.Statfs", name, statfsOp.Statfs, n.scripts.Statfs)
}

// ReadAt reads up to len(b) bytes of name at off.
func (n *nativeOps) ReadAt(ctx context.Context, name string, b []byte, off int64) (int, error) {
	return via(ctx, n, "hands.ReadAt", name,
		func(o readAtOp, ctx context.Context, p string) (int, error) { return o.ReadAt(ctx, p, b, off) },
		func(ctx context.Context, p string) (int, error) { return n.scripts.ReadAt(ctx, p, b, off) })
}

// WriteAt writes b at off into the existing file name.
func (n *nativeOps) WriteAt(ctx context.Context, name string, b []byte, off int64) (int, error) {
	return via(ctx, n, "hands.WriteAt", name,
		func(o writeAtOp, ctx context.Context, p string) (int, error) { return o.WriteAt(ctx, p, b, off) },
		func(ctx context.Context, p string) (int, error) { return n.scripts.WriteAt(ctx, p, b, off) })
}

// WriteFile replaces name atomically with r's bytes. A box method answers
// Unsupported only before it reads r.
func (n *nativeOps) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	return viaErr(ctx, n, "hands.WriteFile", name,
		func(o writeFileOp, ctx context.Context, p string) error { return o.WriteFile(ctx, p, r, perm) },
		func(ctx context.Context, p string) error { return n.scripts.WriteFile(ctx, p, r, perm) })
}

// Create makes an empty regular file.
func (n *nativeOps) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	return viaErr(ctx, n, "hands.Create", name,
		func(o createOp, ctx context.Context, p string) error { return o.Create(ctx, p, perm, exclusive) },
		func(ctx context.Context, p string) error { return n.scripts.Create(ctx, p, perm, exclusive) })
}

// Mkdir makes a directory.
func (n *nativeOps) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return viaErr(ctx, n, "hands.Mkdir", name,
		func(o mkdirOp, ctx context.Context, p string) error { return o.Mkdir(ctx, p, perm) },
		func(ctx context.Context, p string) error { return n.scripts.Mkdir(ctx, p, perm) })
}

// Remove unlinks a non-directory.
func (n *nativeOps) Remove(ctx context.Context, name string) error {
	return viaErr(ctx, n, "hands.Remove", name, removeOp.Remove, n.scripts.Remove)
}

// Rmdir removes an empty directory.
func (n *nativeOps) Rmdir(ctx context.Context, name string) error {
	return viaErr(ctx, n, "hands.Rmdir", name, rmdirOp.Rmdir, n.scripts.Rmdir)
}

// Fsync flushes name to the box's disk.
func (n *nativeOps) Fsync(ctx context.Context, name string) error {
	return viaErr(ctx, n, "hands.Fsync", name, fsyncOp.Fsync, n.scripts.Fsync)
}

// Chmod sets name's mode.
func (n *nativeOps) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return viaErr(ctx, n, "hands.Chmod", name,
		func(o chmodOp, ctx context.Context, p string) error { return o.Chmod(ctx, p, mode) },
		func(ctx context.Context, p string) error { return n.scripts.Chmod(ctx, p, mode) })
}

// Chown sets name's owner; -1 leaves one unchanged.
func (n *nativeOps) Chown(ctx context.Context, name string, uid, gid int) error {
	return viaErr(ctx, n, "hands.Chown", name,
		func(o chownOp, ctx context.Context, p string) error { return o.Chown(ctx, p, uid, gid) },
		func(ctx context.Context, p string) error { return n.scripts.Chown(ctx, p, uid, gid) })
}

// Utimes sets name's times.
func (n *nativeOps) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return viaErr(ctx, n, "hands.Utimes", name,
		func(o utimesOp, ctx context.Context, p string) error { return o.Utimes(ctx, p, atime, mtime) },
		func(ctx context.Context, p string) error { return n.scripts.Utimes(ctx, p, atime, mtime) })
}

// Truncate sets name's size.
func (n *nativeOps) Truncate(ctx context.Context, name string, size int64) error {
	return viaErr(ctx, n, "hands.Truncate", name,
		func(o truncateOp, ctx context.Context, p string) error { return o.Truncate(ctx, p, size) },
		func(ctx context.Context, p string) error { return n.scripts.Truncate(ctx, p, size) })
}

// Symlink makes name a symbolic link to target.
func (n *nativeOps) Symlink(ctx context.Context, target, name string) error {
	return viaErr(ctx, n, "hands.Symlink", name,
		func(o symlinkOp, ctx context.Context, p string) error { return o.Symlink(ctx, target, p) },
		func(ctx context.Context, p string) error { return n.scripts.Symlink(ctx, target, p) })
}

// Walk lists the tree under root: the box's own Walker, else (or when it
// answers Unsupported) the script.
func (n *nativeOps) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	return via(ctx, n, "hands.Walk", root, providers.Walker.Walk, n.scripts.Walk)
}

// viaTwo serves a two-path operation as via does.
func viaTwo[O any](ctx context.Context, n *nativeOps, op, oldname, newname string, native func(O, context.Context, string, string) error, script func(context.Context, string, string) error) error {
	a, err := checkPath(op, n.box.ID(), oldname)
	if err != nil {
		return err
	}
	b, err := checkPath(op, n.box.ID(), newname)
	if err != nil {
		return err
	}
	if o, ok := n.box.(O); ok {
		if err := native(o, ctx, a, b); !unsettled(err) {
			return err
		}
	}
	return script(ctx, a, b)
}

// Rename moves oldname to newname, replacing newname.
func (n *nativeOps) Rename(ctx context.Context, oldname, newname string) error {
	return viaTwo(ctx, n, "hands.Rename", oldname, newname, renameOp.Rename, n.scripts.Rename)
}

// Link makes newname a hard link to oldname.
func (n *nativeOps) Link(ctx context.Context, oldname, newname string) error {
	return viaTwo(ctx, n, "hands.Link", oldname, newname, linkOp.Link, n.scripts.Link)
}
