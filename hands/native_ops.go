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

// Stat returns name's attributes, following symlinks.
func (n *nativeOps) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	p, err := checkPath("hands.Stat", n.box.ID(), name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	if o, ok := n.box.(statOp); ok {
		if fi, err := o.Stat(ctx, p); !unsettled(err) {
			return fi, err
		}
	}
	return n.scripts.Stat(ctx, p)
}

// Lstat returns name's attributes, not following a final symlink.
func (n *nativeOps) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	p, err := checkPath("hands.Lstat", n.box.ID(), name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	if o, ok := n.box.(lstatOp); ok {
		if fi, err := o.Lstat(ctx, p); !unsettled(err) {
			return fi, err
		}
	}
	return n.scripts.Lstat(ctx, p)
}

// ReadDir lists a directory.
func (n *nativeOps) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	p, err := checkPath("hands.ReadDir", n.box.ID(), name)
	if err != nil {
		return nil, err
	}
	if o, ok := n.box.(readDirOp); ok {
		if fis, err := o.ReadDir(ctx, p); !unsettled(err) {
			return fis, err
		}
	}
	return n.scripts.ReadDir(ctx, p)
}

// ReadFile streams a whole file.
func (n *nativeOps) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	p, err := checkPath("hands.ReadFile", n.box.ID(), name)
	if err != nil {
		return nil, err
	}
	if o, ok := n.box.(readFileOp); ok {
		if rc, err := o.ReadFile(ctx, p); !unsettled(err) {
			return rc, err
		}
	}
	return n.scripts.ReadFile(ctx, p)
}

// ReadAt reads up to len(p) bytes of name at off.
func (n *nativeOps) ReadAt(ctx context.Context, name string, b []byte, off int64) (int, error) {
	p, err := checkPath("hands.ReadAt", n.box.ID(), name)
	if err != nil {
		return 0, err
	}
	if o, ok := n.box.(readAtOp); ok {
		if k, err := o.ReadAt(ctx, p, b, off); !unsettled(err) {
			return k, err
		}
	}
	return n.scripts.ReadAt(ctx, p, b, off)
}

// WriteFile replaces name atomically with r's bytes. A box method answers
// Unsupported only before it reads r.
func (n *nativeOps) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	p, err := checkPath("hands.WriteFile", n.box.ID(), name)
	if err != nil {
		return err
	}
	if o, ok := n.box.(writeFileOp); ok {
		if err := o.WriteFile(ctx, p, r, perm); !unsettled(err) {
			return err
		}
	}
	return n.scripts.WriteFile(ctx, p, r, perm)
}

// WriteAt writes b at off into the existing file name.
func (n *nativeOps) WriteAt(ctx context.Context, name string, b []byte, off int64) (int, error) {
	p, err := checkPath("hands.WriteAt", n.box.ID(), name)
	if err != nil {
		return 0, err
	}
	if o, ok := n.box.(writeAtOp); ok {
		if k, err := o.WriteAt(ctx, p, b, off); !unsettled(err) {
			return k, err
		}
	}
	return n.scripts.WriteAt(ctx, p, b, off)
}

// Create makes an empty regular file.
func (n *nativeOps) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	return n.one("hands.Create", name, func(p string) (bool, error) {
		o, ok := n.box.(createOp)
		if !ok {
			return false, nil
		}
		return true, o.Create(ctx, p, perm, exclusive)
	}, func(p string) error { return n.scripts.Create(ctx, p, perm, exclusive) })
}

// Mkdir makes a directory.
func (n *nativeOps) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return n.one("hands.Mkdir", name, func(p string) (bool, error) {
		o, ok := n.box.(mkdirOp)
		if !ok {
			return false, nil
		}
		return true, o.Mkdir(ctx, p, perm)
	}, func(p string) error { return n.scripts.Mkdir(ctx, p, perm) })
}

// Remove unlinks a non-directory.
func (n *nativeOps) Remove(ctx context.Context, name string) error {
	return n.one("hands.Remove", name, func(p string) (bool, error) {
		o, ok := n.box.(removeOp)
		if !ok {
			return false, nil
		}
		return true, o.Remove(ctx, p)
	}, func(p string) error { return n.scripts.Remove(ctx, p) })
}

// Rmdir removes an empty directory.
func (n *nativeOps) Rmdir(ctx context.Context, name string) error {
	return n.one("hands.Rmdir", name, func(p string) (bool, error) {
		o, ok := n.box.(rmdirOp)
		if !ok {
			return false, nil
		}
		return true, o.Rmdir(ctx, p)
	}, func(p string) error { return n.scripts.Rmdir(ctx, p) })
}

// Chmod sets name's mode.
func (n *nativeOps) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return n.one("hands.Chmod", name, func(p string) (bool, error) {
		o, ok := n.box.(chmodOp)
		if !ok {
			return false, nil
		}
		return true, o.Chmod(ctx, p, mode)
	}, func(p string) error { return n.scripts.Chmod(ctx, p, mode) })
}

// Chown sets name's owner; -1 leaves one unchanged.
func (n *nativeOps) Chown(ctx context.Context, name string, uid, gid int) error {
	return n.one("hands.Chown", name, func(p string) (bool, error) {
		o, ok := n.box.(chownOp)
		if !ok {
			return false, nil
		}
		return true, o.Chown(ctx, p, uid, gid)
	}, func(p string) error { return n.scripts.Chown(ctx, p, uid, gid) })
}

// Utimes sets name's times.
func (n *nativeOps) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return n.one("hands.Utimes", name, func(p string) (bool, error) {
		o, ok := n.box.(utimesOp)
		if !ok {
			return false, nil
		}
		return true, o.Utimes(ctx, p, atime, mtime)
	}, func(p string) error { return n.scripts.Utimes(ctx, p, atime, mtime) })
}

// Truncate sets name's size.
func (n *nativeOps) Truncate(ctx context.Context, name string, size int64) error {
	return n.one("hands.Truncate", name, func(p string) (bool, error) {
		o, ok := n.box.(truncateOp)
		if !ok {
			return false, nil
		}
		return true, o.Truncate(ctx, p, size)
	}, func(p string) error { return n.scripts.Truncate(ctx, p, size) })
}

// Symlink makes name a symbolic link to target.
func (n *nativeOps) Symlink(ctx context.Context, target, name string) error {
	return n.one("hands.Symlink", name, func(p string) (bool, error) {
		o, ok := n.box.(symlinkOp)
		if !ok {
			return false, nil
		}
		return true, o.Symlink(ctx, target, p)
	}, func(p string) error { return n.scripts.Symlink(ctx, target, p) })
}

// Fsync flushes name to the box's disk.
func (n *nativeOps) Fsync(ctx context.Context, name string) error {
	return n.one("hands.Fsync", name, func(p string) (bool, error) {
		o, ok := n.box.(fsyncOp)
		if !ok {
			return false, nil
		}
		return true, o.Fsync(ctx, p)
	}, func(p string) error { return n.scripts.Fsync(ctx, p) })
}

// Readlink returns a symlink's target.
func (n *nativeOps) Readlink(ctx context.Context, name string) (string, error) {
	p, err := checkPath("hands.Readlink", n.box.ID(), name)
	if err != nil {
		return "", err
	}
	if o, ok := n.box.(readlinkOp); ok {
		if t, err := o.Readlink(ctx, p); !unsettled(err) {
			return t, err
		}
	}
	return n.scripts.Readlink(ctx, p)
}

// Statfs reports the capacity of the file system holding name.
func (n *nativeOps) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	p, err := checkPath("hands.Statfs", n.box.ID(), name)
	if err != nil {
		return providers.StatFS{}, err
	}
	if o, ok := n.box.(statfsOp); ok {
		if st, err := o.Statfs(ctx, p); !unsettled(err) {
			return st, err
		}
	}
	return n.scripts.Statfs(ctx, p)
}

// Rename moves oldname to newname, replacing newname.
func (n *nativeOps) Rename(ctx context.Context, oldname, newname string) error {
	op, id := "hands.Rename", n.box.ID()
	a, err := checkPath(op, id, oldname)
	if err != nil {
		return err
	}
	b, err := checkPath(op, id, newname)
	if err != nil {
		return err
	}
	if o, ok := n.box.(renameOp); ok {
		if err := o.Rename(ctx, a, b); !unsettled(err) {
			return err
		}
	}
	return n.scripts.Rename(ctx, a, b)
}

// Link makes newname a hard link to oldname.
func (n *nativeOps) Link(ctx context.Context, oldname, newname string) error {
	op, id := "hands.Link", n.box.ID()
	a, err := checkPath(op, id, oldname)
	if err != nil {
		return err
	}
	b, err := checkPath(op, id, newname)
	if err != nil {
		return err
	}
	if o, ok := n.box.(linkOp); ok {
		if err := o.Link(ctx, a, b); !unsettled(err) {
			return err
		}
	}
	return n.scripts.Link(ctx, a, b)
}

// Walk lists the tree under root: the box's own Walker, else (or when it
// answers Unsupported) the script.
func (n *nativeOps) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	p, err := checkPath("hands.Walk", n.box.ID(), root)
	if err != nil {
		return nil, err
	}
	if w, ok := n.box.(providers.Walker); ok {
		if fis, err := w.Walk(ctx, p); !unsettled(err) {
			return fis, err
		}
	}
	return n.scripts.Walk(ctx, p)
}

// one runs a one-path operation: the box's method when it has one and
// settles the call, else the script.
func (n *nativeOps) one(op, name string, native func(p string) (bool, error), script func(p string) error) error {
	p, err := checkPath(op, n.box.ID(), name)
	if err != nil {
		return err
	}
	if has, err := native(p); has && !unsettled(err) {
		return err
	}
	return script(p)
}
