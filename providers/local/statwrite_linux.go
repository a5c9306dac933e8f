package local

import (
	"context"
	"errors"
	"io"
	"os"
	"path"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.StatWriter = (*Box)(nil)

// CreateStat is Create, then Lstat of name.
func (b *Box) CreateStat(ctx context.Context, name string, perm providers.FileMode, exclusive bool) (providers.FileInfo, error) {
	if err := b.Create(ctx, name, perm, exclusive); err != nil {
		return providers.FileInfo{}, err
	}
	return b.Lstat(ctx, name)
}

// MkdirStat is Mkdir, then Lstat of name.
func (b *Box) MkdirStat(ctx context.Context, name string, perm providers.FileMode) (providers.FileInfo, error) {
	if err := b.Mkdir(ctx, name, perm); err != nil {
		return providers.FileInfo{}, err
	}
	return b.Lstat(ctx, name)
}

// WriteFileStat is WriteFile with o's attributes given to the new content
// before it takes the name, answered with its attributes. The directory is
// resolved once (within the box directory, as every operation is), and
// the rest are single names relative to it: a file written through the
// mount costs a few system calls, not a resolution of its path per step.
func (b *Box) WriteFileStat(ctx context.Context, name string, r io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	const op = "local.WriteFile"
	root, rel, err := b.open(ctx, op, name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	dir, base := path.Split(rel)
	if rel == "." || base == "." || base == ".." {
		return providers.FileInfo{}, providers.PathError(op, b.id, name, syscall.EISDIR)
	}
	if dir == "" {
		dir = "."
	}
	d, err := b.openDir(root, dir, os.O_RDONLY)
	if err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	defer d.Close()
	fi, err := writeAt(ctx, int(d.Fd()), base, r, o)
	if err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	return fi, nil
}

// writeAt replaces base in the directory dirfd with r's bytes and o's
// attributes: a temporary name, then a rename (with o.Exclusive, only
// onto a free name). An existing regular file keeps its mode and owner
// unless o sets them; a new file gets o.Perm exactly (no umask).
func writeAt(ctx context.Context, dirfd int, base string, r io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	mode := providers.UnixMode(o.Perm&specialBits) & 0o7777
	uid, gid := -1, -1
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && o.Exclusive:
		return providers.FileInfo{}, syscall.EEXIST
	case err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		return providers.FileInfo{}, syscall.EISDIR
	case err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG:
		if !o.ForceMode {
			mode = st.Mode & 0o7777
		}
		if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	case err != nil && !errors.Is(err, syscall.ENOENT):
		return providers.FileInfo{}, err
	}
	tmp := ".boxfs-tmp-" + providers.NewID(8)
	// An unnamed file where the file system has them: a daemon killed
	// while it writes leaves nothing behind; it takes a name at the end.
	named := false
	fd, err := unix.Openat(dirfd, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		named = true
		fd, err = unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return providers.FileInfo{}, err
	}
	f := os.NewFile(uintptr(fd), tmp)
	if src, ok := r.(*os.File); ok && ctx.Err() == nil {
		_, err = io.Copy(f, src) // file to file: copy_file_range, in the kernel
	} else {
		_, err = io.Copy(f, ctxReader{ctx, r})
	}
	if err == nil && o.Chown {
		err = f.Chown(o.UID, o.GID)
	} else if err == nil && uid >= 0 {
		f.Chown(uid, gid) // best effort: only root may give a file away
	}
	if err == nil {
		// After the owner: chown clears the setuid and setgid bits.
		err = unix.Fchmod(fd, mode)
	}
	if err == nil && (!o.Atime.IsZero() || !o.Mtime.IsZero()) {
		err = unix.UtimesNanoAt(fd, "", []unix.Timespec{timespec(o.Atime), timespec(o.Mtime)}, unix.AT_EMPTY_PATH)
	}
	if err == nil && !named {
		// Named beside its destination at the last moment (directly, for
		// an exclusive write: link(2) does not replace).
		target := tmp
		if o.Exclusive {
			target = base
		}
		err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, target, unix.AT_SYMLINK_FOLLOW)
		named = err == nil && !o.Exclusive
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && named {
		err = renameInto(dirfd, tmp, base, o.Exclusive)
	}
	if err != nil {
		if named {
			unix.Unlinkat(dirfd, tmp, 0)
		}
		return providers.FileInfo{}, err
	}
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return providers.FileInfo{}, err
	}
	return fileInfo(base, &st), nil
}

// timespec is t for utimensat, or "leave it" for a zero t.
func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(t.UnixNano())
}

// renameInto gives tmp the name base in dirfd: over what is there, or
// with exclusive only if the name is free (EEXIST otherwise).
func renameInto(dirfd int, tmp, base string, exclusive bool) error {
	if !exclusive {
		return unix.Renameat(dirfd, tmp, dirfd, base)
	}
	err := unix.Renameat2(dirfd, tmp, dirfd, base, unix.RENAME_NOREPLACE)
	if err != unix.EINVAL && err != unix.ENOSYS {
		return err
	}
	// A file system without RENAME_NOREPLACE: link(2) does not replace.
	if err := unix.Linkat(dirfd, tmp, dirfd, base, 0); err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, tmp, 0)
}

// noFollowErr is pathErr for an open with O_NOFOLLOW: a name that is a
// symbolic link now (one the box made there meanwhile) is ELOOP, as
// open(2) answers, whatever os.Root says of where the link points.
func (b *Box) noFollowErr(r *os.Root, op, name, rel string, err error) error {
	if fi, lerr := r.Lstat(rel); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
		return providers.PathError(op, b.id, name, syscall.ELOOP)
	}
	return b.pathErr(op, name, err)
}

var (
	_ providers.HostReader = (*Box)(nil)
	_ providers.HostWriter = (*Box)(nil)
)

// HostFiles reports that the box's files are the host's own.
func (b *Box) HostFiles() bool { return true }

// OpenHostWrite opens name, a regular file of the box, for writing (and
// reading, with O_RDWR): the box's files are the host's own, so a write
// through the mount is a write to the box's file, as on a disk. With
// O_CREAT it is made as Create makes it.
func (b *Box) OpenHostWrite(ctx context.Context, name string, flags int, perm providers.FileMode) (*os.File, providers.FileInfo, error) {
	const op = "local.OpenHostWrite"
	acc := flags & syscall.O_ACCMODE
	var f *os.File
	made := false
	if flags&syscall.O_CREAT != 0 {
		var err error
		if f, made, err = b.createOpen(ctx, op, name, acc, perm, flags&syscall.O_EXCL != 0); err != nil {
			return nil, providers.FileInfo{}, err
		}
	} else {
		r, rel, err := b.open(ctx, op, name)
		if err != nil {
			return nil, providers.FileInfo{}, err
		}
		if err := b.notLinkedOutside(r, op, name, rel); err != nil {
			return nil, providers.FileInfo{}, err
		}
		f, err = b.openFile(r, rel, acc|flags&syscall.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, providers.FileInfo{}, b.noFollowErr(r, op, name, rel, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, providers.FileInfo{}, b.pathErr(op, name, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		f.Close()
		return nil, providers.FileInfo{}, providers.PathError(op, b.id, name, syscall.EINVAL)
	}
	// A file made here has perm exactly, as create gives it: a chmod only
	// when the umask took bits or perm has special ones.
	if want := providers.UnixMode(perm&specialBits) & 0o7777; made && st.Mode&0o7777 != want {
		if err := unix.Fchmod(int(f.Fd()), want); err != nil {
			f.Close()
			return nil, providers.FileInfo{}, b.pathErr(op, name, err)
		}
		st.Mode = st.Mode&^0o7777 | want
	}
	return f, fileInfo(path.Base(name), &st), nil
}

// OpenHost opens name, a regular file of the box, for reading: the box's
// files are the host's own.
func (b *Box) OpenHost(ctx context.Context, name string) (*os.File, error) {
	const op = "local.OpenHost"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return nil, err
	}
	f, err := b.openFile(r, rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, b.noFollowErr(r, op, name, rel, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, providers.PathError(op, b.id, name, syscall.EINVAL)
	}
	return f, nil
}
