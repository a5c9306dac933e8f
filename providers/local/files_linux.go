package local

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

var (
	_ providers.Files          = (*Box)(nil)
	_ providers.Walker         = (*Box)(nil)
	_ providers.LinkAttrSetter = (*Box)(nil)
)

// fsRoot returns the box's workspace opened as an os.Root, through which
// every file operation goes so that no path or symlink leads out of it: not
// to the host, and not to the box's own record, home or tmp beside it.
func (b *Box) fsRoot(op string) (*os.Root, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil, b.goneErr(op)
	}
	if b.root == nil {
		r, err := os.OpenRoot(b.Workspace())
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, b.goneErr(op)
			}
			return nil, providers.E(0, op, err).WithBox(b.id)
		}
		b.root = r
		b.rootD = openRootDir(r)
	}
	return b.root, nil
}

// rel turns a host absolute path into a path relative to the workspace:
// "." for the workspace itself. A relative path is Invalid, a path outside
// the workspace Unsafe.
func (b *Box) rel(op, name string) (string, error) {
	if !filepath.IsAbs(name) {
		return "", providers.Errorf(providers.Invalid, op, "path is not absolute").WithBox(b.id).WithPath(name)
	}
	c, ws := filepath.Clean(name), b.Workspace()
	if c == ws {
		return ".", nil
	}
	if !strings.HasPrefix(c, ws+"/") {
		return "", providers.Errorf(providers.Unsafe, op, "path is outside the workspace %s", ws).WithBox(b.id).WithPath(name)
	}
	return c[len(ws)+1:], nil
}

// maxLinkScan bounds the walk that looks for a file's other names.
const maxLinkScan = 200_000

// linkedOutside returns Unsafe when the regular file fi (at name) has
// names outside the workspace: a hard link the box made to a file of the
// host, which a change in place would change too. Its names in the
// workspace are counted by a walk, made only for a file with more than one
// name; fewer than its link count (or a workspace too large to count in)
// is outside.
func (b *Box) linkedOutside(r *os.Root, op, name string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() || uint64(st.Nlink) <= 1 {
		return nil
	}
	var found uint64
	seen := 0
	fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if seen++; seen > maxLinkScan {
			return fs.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if s, ok := info.Sys().(*syscall.Stat_t); ok && s.Ino == st.Ino && s.Dev == st.Dev {
			if found++; found >= uint64(st.Nlink) {
				return fs.SkipAll
			}
		}
		return nil
	})
	if found >= uint64(st.Nlink) {
		return nil
	}
	return providers.Errorf(providers.Unsafe, op, "the file has names outside the workspace (a hard link to a file of the host): not changed in place").WithBox(b.id).WithPath(name)
}

// openLinkedOutside is linkedOutside for the open file f.
func (b *Box) openLinkedOutside(r *os.Root, op, name string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return b.pathErr(op, name, err)
	}
	return b.linkedOutside(r, op, name, fi)
}

// notLinkedOutside is linkedOutside for the file rel names (following a
// symlink within the workspace); a missing file is for the caller to find.
func (b *Box) notLinkedOutside(r *os.Root, op, name, rel string) error {
	if st, ok, err := b.statBeneath(rel); ok && (err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink <= 1) {
		return nil
	}
	fi, err := r.Stat(rel)
	if err != nil {
		return nil
	}
	return b.linkedOutside(r, op, name, fi)
}

// open resolves name for op: the root and the relative path.
func (b *Box) open(ctx context.Context, op, name string) (*os.Root, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", providers.E(0, op, err).WithBox(b.id).WithPath(name)
	}
	rel, err := b.rel(op, name)
	if err != nil {
		return nil, "", err
	}
	r, err := b.fsRoot(op)
	if err != nil {
		return nil, "", err
	}
	return r, rel, nil
}

// pathErr turns a file operation's failure into an *Error that keeps the
// errno. An error without an errno from os.Root is its refusal of a path
// that would leave the box (errPathEscapes): Unsafe. An ENOENT on a box
// that was destroyed meanwhile is Gone.
func (b *Box) pathErr(op, name string, err error) error {
	if errno, ok := providers.ErrnoOf(err); ok {
		if errno == syscall.ENOENT && !b.exists() {
			return b.goneErr(op)
		}
		return providers.PathError(op, b.id, name, errno)
	}
	var pe *providers.Error
	switch {
	case errors.As(err, &pe):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return providers.E(0, op, err).WithBox(b.id).WithPath(name)
	case errors.Is(err, fs.ErrClosed):
		return b.goneErr(op)
	case errors.Is(err, fs.ErrInvalid):
		return providers.E(providers.Invalid, op, err).WithBox(b.id).WithPath(name)
	}
	return providers.E(providers.Unsafe, op, err).WithBox(b.id).WithPath(name)
}

func fileInfo(name string, st *unix.Stat_t) providers.FileInfo {
	return providers.FileInfo{
		Name:  name,
		Mode:  providers.FileModeFromUnix(st.Mode),
		Size:  st.Size,
		Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Atime: time.Unix(st.Atim.Sec, st.Atim.Nsec),
		Ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec),
		Ino:   st.Ino,
		Nlink: uint32(st.Nlink),
		UID:   st.Uid,
		GID:   st.Gid,
		Dev:   st.Dev,
		Rdev:  st.Rdev,
	}
}

func fromFileInfo(name string, fi fs.FileInfo) providers.FileInfo {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return providers.FileInfo{Name: name, Mode: fi.Mode(), Size: fi.Size(), Mtime: fi.ModTime()}
	}
	return fileInfo(name, &unix.Stat_t{
		Mode: st.Mode, Size: st.Size, Ino: st.Ino, Nlink: st.Nlink, Uid: st.Uid, Gid: st.Gid, Dev: st.Dev, Rdev: st.Rdev,
		Mtim: unix.Timespec(st.Mtim), Atim: unix.Timespec(st.Atim), Ctim: unix.Timespec(st.Ctim),
	})
}

func baseName(name string) string { return filepath.Base(filepath.Clean(name)) }

// Stat returns name's attributes, following symlinks (within the box).
func (b *Box) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "local.Stat"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	if st, ok, err := b.statBeneath(rel); ok {
		if err != nil {
			return providers.FileInfo{}, b.pathErr(op, name, err)
		}
		return fileInfo(baseName(name), &st), nil
	}
	fi, err := r.Stat(rel)
	if err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	return fromFileInfo(baseName(name), fi), nil
}

// Lstat returns name's attributes, not following a final symlink; Target
// is set for a symlink.
func (b *Box) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "local.Lstat"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	if dfd, base, ok := b.parent(rel); ok {
		// The last component in its parent, as os.Root's Lstat does.
		defer unix.Close(dfd)
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return providers.FileInfo{}, b.pathErr(op, name, err)
		}
		info := fileInfo(baseName(name), &st)
		if info.IsSymlink() {
			info.Target = readlinkat(dfd, base)
		}
		return info, nil
	}
	fi, err := r.Lstat(rel)
	if err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	info := fromFileInfo(baseName(name), fi)
	if info.IsSymlink() {
		if t, err := r.Readlink(rel); err == nil {
			info.Target = t
		}
	}
	return info, nil
}

// readDir lists the open directory d: entries sorted by name, each
// lstat'ed relative to d, symlinks with their targets.
func readDir(d *os.File) ([]providers.FileInfo, error) {
	return readDirMax(d, 0)
}

// readDirMax is readDir for a directory of at most max entries (0: no
// cap); a larger one is EFBIG, found while reading its names, before any
// is stat'ed.
func readDirMax(d *os.File, max int) ([]providers.FileInfo, error) {
	var names []string
	for {
		batch, err := d.Readdirnames(4096)
		names = append(names, batch...)
		if max > 0 && len(names) > max {
			return nil, syscall.EFBIG
		}
		if errors.Is(err, io.EOF) || err == nil && len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	fd := int(d.Fd())
	out := make([]providers.FileInfo, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue // removed while we listed
			}
			return nil, err
		}
		fi := fileInfo(n, &st)
		if fi.IsSymlink() {
			buf := make([]byte, 4096)
			if k, err := unix.Readlinkat(fd, n, buf); err == nil {
				fi.Target = string(buf[:k])
			}
		}
		out = append(out, fi)
	}
	return out, nil
}

// ReadDir lists a directory, sorted by name, without following symlinks.
func (b *Box) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	return b.listDir(ctx, name, 0)
}

// ReadDirMax is ReadDir for a directory of at most max entries; a larger
// one is TooLarge, and no entry of it is stat'ed.
func (b *Box) ReadDirMax(ctx context.Context, name string, max int) ([]providers.FileInfo, error) {
	if max <= 0 {
		return nil, providers.Errorf(providers.Invalid, "local.ReadDir", "a listing's cap must be positive, not %d", max)
	}
	return b.listDir(ctx, name, max)
}

// listDir lists name with at most max entries (0: no cap).
func (b *Box) listDir(ctx context.Context, name string, max int) ([]providers.FileInfo, error) {
	const op = "local.ReadDir"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return nil, err
	}
	d, err := b.openFile(r, rel, os.O_RDONLY, 0)
	if err != nil {
		return nil, b.pathErr(op, name, err)
	}
	defer d.Close()
	out, err := readDirMax(d, max)
	if err != nil {
		return nil, b.pathErr(op, name, err)
	}
	return out, nil
}

// Walk lists the tree under root: parents before children, siblings by
// name, Names relative with slashes, symlinks not followed.
func (b *Box) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	const op = "local.Walk"
	r, rel, err := b.open(ctx, op, root)
	if err != nil {
		return nil, err
	}
	var out []providers.FileInfo
	var walk func(relDir, prefix string) error
	walk = func(relDir, prefix string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := r.Open(relDir)
		if err != nil {
			return err
		}
		ents, err := readDir(d)
		d.Close()
		if err != nil {
			return err
		}
		for _, e := range ents {
			name := e.Name
			e.Name = prefix + name
			out = append(out, e)
			if e.IsDir() {
				if err := walk(path.Join(relDir, name), e.Name+"/"); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(rel, ""); err != nil {
		return nil, b.pathErr(op, root, err)
	}
	return out, nil
}

// ReadFile opens name for streaming. A directory is EISDIR.
func (b *Box) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	const op = "local.ReadFile"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return nil, err
	}
	f, err := b.openFile(r, rel, os.O_RDONLY, 0)
	if err != nil {
		return nil, b.pathErr(op, name, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, providers.PathError(op, b.id, name, syscall.EISDIR)
	}
	return f, nil
}

// ReadAt reads up to len(p) bytes at off; io.EOF at the end.
func (b *Box) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "local.ReadAt"
	if off < 0 {
		return 0, providers.PathError(op, b.id, name, syscall.EINVAL)
	}
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return 0, err
	}
	f, err := b.openFile(r, rel, os.O_RDONLY, 0)
	if err != nil {
		return 0, b.pathErr(op, name, err)
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		return n, b.pathErr(op, name, err)
	}
	return n, err
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

const specialBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// WriteFile replaces name with r's bytes: written to a temporary name in
// the same directory, then renamed over name. An existing regular file
// keeps its mode (and, where we may, its owner); perm applies to a new one,
// exactly (no umask). A symlink at name is replaced, not written through.
func (b *Box) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	const op = "local.WriteFile"
	root, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	if rel == "." {
		return providers.PathError(op, b.id, name, syscall.EISDIR)
	}
	mode := perm & specialBits
	uid, gid := -1, -1
	if fi, err := root.Lstat(rel); err == nil {
		if fi.IsDir() {
			return providers.PathError(op, b.id, name, syscall.EISDIR)
		}
		if fi.Mode().IsRegular() {
			mode = fi.Mode() & specialBits
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
				uid, gid = int(st.Uid), int(st.Gid)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return b.pathErr(op, name, err)
	}
	tmp := path.Join(path.Dir(rel), ".boxfs-tmp-"+providers.NewID(8))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return b.pathErr(op, name, err)
	}
	_, err = io.Copy(f, ctxReader{ctx, r})
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && uid >= 0 {
		f.Chown(uid, gid) // best effort: only root may give a file away
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		root.Remove(tmp)
		return b.pathErr(op, name, err)
	}
	return nil
}

// WriteAt writes p at off into the existing file name.
func (b *Box) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "local.WriteAt"
	if off < 0 {
		return 0, providers.PathError(op, b.id, name, syscall.EINVAL)
	}
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return 0, err
	}
	f, err := b.openFile(r, rel, os.O_WRONLY, 0)
	if err != nil {
		return 0, b.pathErr(op, name, err)
	}
	if err := b.openLinkedOutside(r, op, name, f); err != nil {
		f.Close()
		return 0, err
	}
	n, err := f.WriteAt(p, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, b.pathErr(op, name, err)
	}
	return n, nil
}

// Create makes an empty regular file with mode perm, exactly; with
// exclusive an existing name is EEXIST, else an existing file is truncated.
func (b *Box) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	const op = "local.Create"
	f, err := b.create(ctx, op, name, os.O_WRONLY, perm, exclusive)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// create makes name (or truncates it, unless exclusive) and returns it
// open with the access mode acc. A file it makes has exactly perm's mode
// bits (no umask).
func (b *Box) create(ctx context.Context, op, name string, acc int, perm providers.FileMode, exclusive bool) (*os.File, error) {
	f, made, err := b.createOpen(ctx, op, name, acc, perm, exclusive)
	if err == nil && made {
		if err = f.Chmod(perm & specialBits); err != nil {
			f.Close()
			return nil, b.pathErr(op, name, err)
		}
	}
	return f, err
}

// createOpen is create without the last step: a file it makes (made) has
// perm's permission bits less the daemon's umask, and none of its
// set-user-ID, set-group-ID and sticky bits; the caller gives it its
// mode. One whose mode it then reads needs no fchmod when the umask took
// nothing (OpenHostWrite: a create through the mount).
func (b *Box) createOpen(ctx context.Context, op, name string, acc int, perm providers.FileMode, exclusive bool) (f *os.File, made bool, err error) {
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return nil, false, err
	}
	// Born with its permission bits, less the umask: never more open than
	// perm asks for, and usually what it asks for already.
	birth := uint32(perm & fs.ModePerm)
	if dfd, base, ok := b.parent(rel); ok {
		// The new name in its parent, as os.Root's OpenFile makes it.
		var fd int
		for {
			fd, err = unix.Openat(dfd, base, acc|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, birth)
			if err != unix.EINTR {
				break
			}
		}
		unix.Close(dfd)
		if err == nil {
			f = os.NewFile(uintptr(fd), name)
		} else {
			err = &fs.PathError{Op: "openat", Path: rel, Err: err}
		}
	} else {
		f, err = r.OpenFile(rel, acc|os.O_CREATE|os.O_EXCL, fs.FileMode(birth))
	}
	if errors.Is(err, fs.ErrExist) && !exclusive {
		if target, ok := b.danglingTarget(r, rel); ok {
			// open(2) without O_EXCL creates a dangling symlink's target.
			rel = target
			f, err = r.OpenFile(rel, acc|os.O_CREATE|os.O_EXCL, fs.FileMode(birth))
		}
	}
	switch {
	case err == nil:
		made = true
	case errors.Is(err, fs.ErrExist) && !exclusive:
		if err = b.notLinkedOutside(r, op, name, rel); err != nil {
			return nil, false, err
		}
		// O_NONBLOCK: a FIFO under the name answers at once.
		f, err = b.openFile(r, rel, acc|os.O_TRUNC|syscall.O_NONBLOCK, 0)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, false, b.pathErr(op, name, err)
	}
	return f, made, nil
}

// danglingTarget follows rel while it is a symlink (within the box, at
// most 40 links) and returns the missing path it ends at: what open(2) with
// O_CREAT would create. ok is false unless rel is a chain of symlinks that
// ends at a name that does not exist.
func (b *Box) danglingTarget(r *os.Root, rel string) (string, bool) {
	for range 40 {
		fi, err := r.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) {
			return rel, true
		}
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return "", false
		}
		t, err := r.Readlink(rel)
		if err != nil {
			return "", false
		}
		if path.IsAbs(t) {
			if rel, err = b.rel("local.Create", t); err != nil {
				return "", false
			}
		} else {
			rel = path.Join(path.Dir(rel), t)
		}
		if !filepath.IsLocal(rel) {
			return "", false
		}
	}
	return "", false
}

// Mkdir makes a directory with mode perm, exactly, plus the set-group-ID
// bit a set-group-ID parent passes on.
func (b *Box) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	const op = "local.Mkdir"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	if dfd, base, ok := b.parent(rel); ok {
		defer unix.Close(dfd)
		if err := unix.Mkdirat(dfd, base, uint32(perm&fs.ModePerm)); err != nil {
			return b.pathErr(op, name, err)
		}
		// mkdir(2) applied the umask and passed on a set-group-ID
		// parent's bit: the chmod below only where that is not the mode
		// wanted.
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			want := providers.UnixMode(perm&specialBits)&0o7777 | st.Mode&unix.S_ISGID
			if st.Mode&0o7777 == want {
				return nil
			}
		}
	} else if err := r.Mkdir(rel, perm&fs.ModePerm); err != nil {
		return b.pathErr(op, name, err)
	}
	mode := perm & specialBits
	if fi, err := r.Lstat(rel); err == nil && fi.Mode()&fs.ModeSetgid != 0 {
		mode |= fs.ModeSetgid // a set-group-ID parent's, which mkdir(2) passes on
	}
	if err := r.Chmod(rel, mode); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// unlinkat removes the final component of name in its parent, opened
// through the root: flags 0 unlinks (a directory is EISDIR),
// AT_REMOVEDIR removes an empty directory (a file is ENOTDIR).
func (b *Box) unlinkat(ctx context.Context, op, name string, flags int) error {
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	if rel == "." {
		return providers.PathError(op, b.id, name, syscall.EBUSY)
	}
	if dfd, base, ok := b.parent(rel); ok {
		defer unix.Close(dfd)
		if err := unix.Unlinkat(dfd, base, flags); err != nil {
			return b.pathErr(op, name, err)
		}
		return nil
	}
	parent, base := path.Split(rel)
	if parent == "" {
		parent = "."
	}
	d, err := r.Open(parent)
	if err != nil {
		return b.pathErr(op, name, err)
	}
	defer d.Close()
	if err := unix.Unlinkat(int(d.Fd()), base, flags); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Remove unlinks name; a directory is EISDIR.
func (b *Box) Remove(ctx context.Context, name string) error {
	return b.unlinkat(ctx, "local.Remove", name, 0)
}

// Rmdir removes the empty directory name.
func (b *Box) Rmdir(ctx context.Context, name string) error {
	return b.unlinkat(ctx, "local.Rmdir", name, unix.AT_REMOVEDIR)
}

// Rename moves oldname to newname as rename(2) does.
func (b *Box) Rename(ctx context.Context, oldname, newname string) error {
	const op = "local.Rename"
	r, oldRel, err := b.open(ctx, op, oldname)
	if err != nil {
		return err
	}
	newRel, err := b.rel(op, newname)
	if err != nil {
		return err
	}
	// renameat(2) on the two parent directories, each opened through the
	// root (so no path leads out): os.Root.Rename refuses any existing
	// directory as the new name, where rename(2) replaces an empty one and
	// says ENOTEMPTY or EISDIR otherwise.
	od, err := b.openDir(r, path.Dir(oldRel), os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return b.pathErr(op, oldname, err)
	}
	defer od.Close()
	nd, err := b.openDir(r, path.Dir(newRel), os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return b.pathErr(op, newname, err)
	}
	defer nd.Close()
	if err := unix.Renameat(int(od.Fd()), path.Base(oldRel), int(nd.Fd()), path.Base(newRel)); err != nil {
		return b.pathErr(op, oldname, err)
	}
	return nil
}

// changeBeneath is a change of rel's attributes (chmod, chown, utimes) in
// three system calls: rel's parent opened by openat2, an lstat of the
// name in it, and fn on the name there, which fn must not follow
// (AT_SYMLINK_NOFOLLOW). It takes only the case it can answer as the
// os.Root path would: the name is not a symlink (which the os.Root follows
// within the box), and not a regular file with more than one name (which
// linkedOutside must judge). ok is false when the caller must go through
// the os.Root: for those, when openat2 did not open the parent, and when
// fn failed other than with the name missing.
func (b *Box) changeBeneath(op, name, rel string, fn func(dirfd int, base string) error) (ok bool, err error) {
	dfd, base, ok := b.parent(rel)
	if !ok {
		return false, nil
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if final(err) {
			return true, b.pathErr(op, name, err)
		}
		return false, nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return false, nil
	case unix.S_IFREG:
		if st.Nlink > 1 {
			return false, nil
		}
	}
	for {
		err = fn(dfd, base)
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		return true, nil
	case final(err):
		return true, b.pathErr(op, name, err)
	}
	// Any other failure is the os.Root path's to answer, as openat2's
	// are: EOPNOTSUPP (chmod without fchmodat2, before Linux 6.6), EPERM
	// (a seccomp filter's refusal looks like an owner's).
	return false, nil
}

// utimeSpec is t for utimensat(2): UTIME_OMIT for the zero time, which
// leaves that time alone.
func utimeSpec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(t.UnixNano())
}

// Chmod sets name's mode bits (permissions, setuid, setgid, sticky).
func (b *Box) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	const op = "local.Chmod"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	m := providers.UnixMode(mode&specialBits) & 0o7777
	if ok, err := b.changeBeneath(op, name, rel, func(dirfd int, base string) error {
		return syscall.Fchmodat(dirfd, base, m, unix.AT_SYMLINK_NOFOLLOW)
	}); ok {
		return err
	}
	if err := b.notLinkedOutside(r, op, name, rel); err != nil {
		return err
	}
	if err := r.Chmod(rel, mode&specialBits); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Chown sets name's owner; -1 leaves one unchanged.
func (b *Box) Chown(ctx context.Context, name string, uid, gid int) error {
	const op = "local.Chown"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	if ok, err := b.changeBeneath(op, name, rel, func(dirfd int, base string) error {
		return unix.Fchownat(dirfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	}); ok {
		return err
	}
	if err := b.notLinkedOutside(r, op, name, rel); err != nil {
		return err
	}
	if err := r.Chown(rel, uid, gid); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Utimes sets name's times to the nanosecond; a zero time is left alone.
func (b *Box) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	const op = "local.Utimes"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	ts := []unix.Timespec{utimeSpec(atime), utimeSpec(mtime)}
	if ok, err := b.changeBeneath(op, name, rel, func(dirfd int, base string) error {
		return unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
	}); ok {
		return err
	}
	if err := b.notLinkedOutside(r, op, name, rel); err != nil {
		return err
	}
	if err := r.Chtimes(rel, atime, mtime); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Lchown sets the owner of name itself, never following a final symlink
// (a dangling link works); -1 leaves one unchanged.
func (b *Box) Lchown(ctx context.Context, name string, uid, gid int) error {
	const op = "local.Lchown"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	if dfd, base, ok := b.parent(rel); ok {
		defer unix.Close(dfd)
		if err := unix.Fchownat(dfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return b.pathErr(op, name, err)
		}
		return nil
	}
	if err := r.Lchown(rel, uid, gid); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Lutimes sets the times of name itself to the nanosecond, never
// following a final symlink (a dangling link works); a zero time is left
// alone. It is utimensat(2) with AT_SYMLINK_NOFOLLOW in name's parent,
// opened through the root (os.Root has no call that leaves the link's
// target alone).
func (b *Box) Lutimes(ctx context.Context, name string, atime, mtime time.Time) error {
	const op = "local.Lutimes"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	d, err := b.openDir(r, path.Dir(rel), os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return b.pathErr(op, name, err)
	}
	defer d.Close()
	if err := unix.UtimesNanoAt(int(d.Fd()), path.Base(rel), []unix.Timespec{utimeSpec(atime), utimeSpec(mtime)}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Truncate sets name's size.
func (b *Box) Truncate(ctx context.Context, name string, size int64) error {
	const op = "local.Truncate"
	if size < 0 {
		return providers.PathError(op, b.id, name, syscall.EINVAL)
	}
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	f, err := b.openFile(r, rel, os.O_WRONLY, 0)
	if err != nil {
		return b.pathErr(op, name, err)
	}
	if err := b.openLinkedOutside(r, op, name, f); err != nil {
		f.Close()
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Symlink makes name a symlink to target. The target is stored as given;
// following it later stays confined to the box.
func (b *Box) Symlink(ctx context.Context, target, name string) error {
	const op = "local.Symlink"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	if err := r.Symlink(target, rel); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// Readlink returns the target of the symlink name.
func (b *Box) Readlink(ctx context.Context, name string) (string, error) {
	const op = "local.Readlink"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return "", err
	}
	t, err := r.Readlink(rel)
	if err != nil {
		return "", b.pathErr(op, name, err)
	}
	return t, nil
}

// Link makes newname a hard link to oldname.
func (b *Box) Link(ctx context.Context, oldname, newname string) error {
	const op = "local.Link"
	r, oldRel, err := b.open(ctx, op, oldname)
	if err != nil {
		return err
	}
	newRel, err := b.rel(op, newname)
	if err != nil {
		return err
	}
	if err := r.Link(oldRel, newRel); err != nil {
		return b.pathErr(op, newname, err)
	}
	return nil
}

// Statfs reports the capacity of the file system holding name.
func (b *Box) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	const op = "local.Statfs"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return providers.StatFS{}, err
	}
	f, err := b.openFile(r, rel, os.O_RDONLY, 0)
	if err != nil {
		return providers.StatFS{}, b.pathErr(op, name, err)
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return providers.StatFS{}, b.pathErr(op, name, err)
	}
	return providers.StatFS{
		Bsize: uint32(st.Bsize), Blocks: st.Blocks, Bfree: st.Bfree, Bavail: st.Bavail,
		Files: st.Files, Ffree: st.Ffree, NameLen: uint32(st.Namelen),
	}, nil
}

// Fsync flushes name's data and metadata to disk.
func (b *Box) Fsync(ctx context.Context, name string) error {
	const op = "local.Fsync"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	f, err := b.openFile(r, rel, os.O_RDONLY, 0)
	if err != nil {
		return b.pathErr(op, name, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}

// lstatChange is a watch's report of rel under root, with rel's attributes
// as they are now.
func lstatChange(root, rel string) providers.Change {
	var st unix.Stat_t
	switch err := unix.Lstat(path.Join(root, rel), &st); {
	case err == nil:
		fi := fileInfo(path.Base("/"+rel), &st)
		return providers.Change{Path: rel, Info: &fi}
	case err == unix.ENOENT || err == unix.ENOTDIR:
		return providers.Change{Path: rel, Gone: true}
	}
	return providers.Change{Path: rel}
}
