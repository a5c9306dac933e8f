package local

import (
	"os"
	"path"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Path resolution in one system call. os.Root opens every directory of a
// path in turn (an openat and a close per component); openat2(2) with
// RESOLVE_BENEATH resolves the whole path in the kernel, which refuses
// any ".." or symlink that would lead above the workspace (and any
// absolute symlink) with EXDEV, and RESOLVE_NO_MAGICLINKS refuses
// /proc-style links. It is used only as a fast path: a path openat2 does
// not open, for whatever reason, is resolved again through the os.Root,
// whose answer (an escape refused as Unsafe, an errno) is the answer, so
// what a path may reach and what a failure says are the os.Root's.
// A kernel without openat2 (before 5.6) or a seccomp filter that forbids
// it (ENOSYS, EPERM) turns the fast path off.

// openat2Off is set once openat2 is found missing or forbidden.
var openat2Off atomic.Bool

const beneathResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// openRootDir opens the workspace's directory for openat2, through r:
// nil when openat2 cannot be used here.
func openRootDir(r *os.Root) *os.File {
	if openat2Off.Load() {
		return nil
	}
	d, err := r.Open(".")
	if err != nil {
		return nil
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneathResolve}
	fd, err := unix.Openat2(int(d.Fd()), ".", &how)
	if err != nil {
		// ENOSYS: before Linux 5.6; EPERM: a seccomp filter. Either way
		// os.Root resolves every path.
		openat2Off.Store(true)
		d.Close()
		return nil
	}
	unix.Close(fd)
	return d
}

// rootDir returns the workspace directory opened for openat2 (nil: none).
func (b *Box) rootDir() *os.File {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rootD
}

// openat2 opens rel (relative to the workspace, cleaned) with flags,
// confined beneath the workspace with extra resolve flags; ok is false
// when it did not (the caller then resolves through the os.Root).
func (b *Box) openat2(rel string, flags int, mode uint32, resolve uint64) (fd int, ok bool) {
	fd, err := b.openat2Err(rel, flags, mode, resolve)
	return fd, err == nil
}

// openat2Err is openat2 with its error: ENOENT or ENOTDIR say the path
// resolved, within the workspace, to a name that is not there (or
// through one that is not a directory), which os.Root would say too, so
// callers take them as the answer (final reports whether err is one);
// any other error is resolved again through the os.Root.
func (b *Box) openat2Err(rel string, flags int, mode uint32, resolve uint64) (fd int, err error) {
	d := b.rootDir()
	if d == nil {
		return -1, unix.ENOSYS
	}
	c, err := d.SyscallConn()
	if err != nil {
		return -1, err
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: beneathResolve | resolve}
	fd = -1
	// Control holds the descriptor for the call: a Destroy meanwhile
	// closes it after, never under, the resolution.
	if c.Control(func(dfd uintptr) {
		for {
			fd, err = unix.Openat2(int(dfd), rel, &how)
			if err != unix.EINTR {
				return
			}
		}
	}) != nil {
		return -1, unix.EBADF
	}
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// final reports whether an openat2 error is the answer for the path:
// a name missing, or a component that is not a directory.
func final(err error) bool {
	return err == unix.ENOENT || err == unix.ENOTDIR
}

// openFile is os.Root's OpenFile of rel, resolved by openat2 where it can.
func (b *Box) openFile(r *os.Root, rel string, flags int, perm os.FileMode) (*os.File, error) {
	fd, err := b.openat2Err(rel, flags, uint32(perm.Perm()), 0)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), path.Join(r.Name(), rel)), nil
	case final(err) && flags&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "openat", Path: rel, Err: err}
	}
	return r.OpenFile(rel, flags, perm)
}

// parent opens the directory that holds rel's last component (O_PATH,
// for the *at calls) and returns it with that component; ok is false
// when the caller must go through the os.Root (openat2 did not open it,
// or rel is the workspace itself).
func (b *Box) parent(rel string) (dirfd int, base string, ok bool) {
	if rel == "." || rel == "" {
		return -1, "", false
	}
	dir, base := path.Split(rel)
	if dir == "" {
		dir = "."
	}
	if base == "." || base == ".." {
		return -1, "", false
	}
	fd, ok := b.openat2(dir, unix.O_PATH|unix.O_DIRECTORY, 0, 0)
	return fd, base, ok
}

// statBeneath is fstat of rel opened by openat2 (following symlinks
// within the box); ok is false when openat2 did not open it, and err is
// the answer when it found the name missing (final).
func (b *Box) statBeneath(rel string) (st unix.Stat_t, ok bool, err error) {
	fd, err := b.openat2Err(rel, unix.O_PATH, 0, 0)
	if err != nil {
		if final(err) {
			return st, true, &os.PathError{Op: "statat", Path: rel, Err: err}
		}
		return st, false, nil
	}
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	return st, err == nil, nil
}

// openDir opens the directory rel for the *at calls: O_PATH by openat2,
// else through the os.Root with flags.
func (b *Box) openDir(r *os.Root, rel string, flags int) (*os.File, error) {
	if fd, ok := b.openat2(rel, unix.O_PATH|unix.O_DIRECTORY, 0, 0); ok {
		return os.NewFile(uintptr(fd), path.Join(r.Name(), rel)), nil
	}
	return r.OpenFile(rel, flags, 0)
}

// readlinkat is the target of the symlink base in dirfd ("" on failure).
// Not inlined: its buffer would make every caller's frame 4 KiB larger,
// and a request's goroutine grow its stack to hold it.
//
//go:noinline
func readlinkat(dirfd int, base string) string {
	buf := make([]byte, 4096)
	k, err := unix.Readlinkat(dirfd, base, buf)
	if err != nil {
		return ""
	}
	return string(buf[:k])
}
