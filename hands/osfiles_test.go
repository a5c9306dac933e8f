package hands_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// osFiles is the reference the conformance test compares every path with:
// providers.Files done directly with the os package and syscalls on this
// machine, so the kernel decides every result and errno.
type osFiles struct{}

var _ providers.Files = osFiles{}

func oserr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return providers.PathError(op, "host", name, errno)
	}
	return providers.E(providers.Unknown, op, err).WithPath(name)
}

func infoOf(name string, fi os.FileInfo) providers.FileInfo {
	st := fi.Sys().(*syscall.Stat_t)
	return providers.FileInfo{
		Name: name, Mode: providers.FileModeFromUnix(st.Mode), Size: st.Size,
		Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec), Atime: time.Unix(st.Atim.Sec, st.Atim.Nsec),
		Ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec), Ino: st.Ino, Nlink: uint32(st.Nlink),
		UID: st.Uid, GID: st.Gid, Dev: st.Dev, Rdev: st.Rdev,
	}
}

func (osFiles) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return providers.FileInfo{}, oserr("Stat", name, err)
	}
	return infoOf(filepath.Base(name), fi), nil
}

func (osFiles) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return providers.FileInfo{}, oserr("Lstat", name, err)
	}
	info := infoOf(filepath.Base(name), fi)
	if info.IsSymlink() {
		info.Target, _ = os.Readlink(name)
	}
	return info, nil
}

func (o osFiles) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	ents, err := os.ReadDir(name)
	if err != nil {
		return nil, oserr("ReadDir", name, err)
	}
	var out []providers.FileInfo
	for _, e := range ents {
		fi, err := o.Lstat(ctx, filepath.Join(name, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	return out, nil
}

func (osFiles) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, oserr("ReadFile", name, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, providers.PathError("ReadFile", "host", name, syscall.EISDIR)
	}
	return f, nil
}

func (osFiles) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, oserr("ReadAt", name, err)
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		return n, oserr("ReadAt", name, err)
	}
	return n, err
}

func (osFiles) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	if fi, err := os.Lstat(name); err == nil && fi.IsDir() {
		return providers.PathError("WriteFile", "host", name, syscall.EISDIR)
	}
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, ".ref-w.*")
	if err != nil {
		return oserr("WriteFile", name, err)
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return oserr("WriteFile", name, err)
	}
	f.Close()
	mode := perm
	if fi, err := os.Lstat(name); err == nil && fi.Mode().IsRegular() {
		mode = providers.FileModeFromUnix(fi.Sys().(*syscall.Stat_t).Mode)
	}
	if err := syscall.Chmod(f.Name(), providers.UnixMode(mode)&0o7777); err != nil {
		return oserr("WriteFile", name, err)
	}
	return oserr("WriteFile", name, os.Rename(f.Name(), name))
}

func (osFiles) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return 0, oserr("WriteAt", name, err)
	}
	defer f.Close()
	n, err := f.WriteAt(p, off)
	return n, oserr("WriteAt", name, err)
}

func (osFiles) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	_, lerr := os.Lstat(name)
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if exclusive {
		flags |= os.O_EXCL
	}
	f, err := os.OpenFile(name, flags, perm)
	if err != nil {
		return oserr("Create", name, err)
	}
	f.Close()
	if lerr != nil {
		return oserr("Create", name, syscall.Chmod(name, providers.UnixMode(perm)&0o7777))
	}
	return nil
}

func (osFiles) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	if err := syscall.Mkdir(name, 0o700); err != nil {
		return oserr("Mkdir", name, err)
	}
	mode := providers.UnixMode(perm) & 0o7777
	var st syscall.Stat_t
	if err := syscall.Stat(name, &st); err == nil {
		mode |= st.Mode & syscall.S_ISGID // a set-group-ID parent's, passed on
	}
	return oserr("Mkdir", name, syscall.Chmod(name, mode))
}

func (osFiles) Remove(ctx context.Context, name string) error {
	return oserr("Remove", name, syscall.Unlink(name))
}

func (osFiles) Rmdir(ctx context.Context, name string) error {
	return oserr("Rmdir", name, syscall.Rmdir(name))
}

func (osFiles) Rename(ctx context.Context, oldname, newname string) error {
	return oserr("Rename", oldname, syscall.Rename(oldname, newname))
}

func (osFiles) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return oserr("Chmod", name, syscall.Chmod(name, providers.UnixMode(mode)&0o7777))
}

func (osFiles) Chown(ctx context.Context, name string, uid, gid int) error {
	return oserr("Chown", name, syscall.Chown(name, uid, gid))
}

func (osFiles) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if !atime.IsZero() {
		ts[0] = unix.NsecToTimespec(atime.UnixNano())
	}
	if !mtime.IsZero() {
		ts[1] = unix.NsecToTimespec(mtime.UnixNano())
	}
	return oserr("Utimes", name, unix.UtimesNanoAt(unix.AT_FDCWD, name, ts, 0))
}

func (osFiles) Truncate(ctx context.Context, name string, size int64) error {
	return oserr("Truncate", name, syscall.Truncate(name, size))
}

func (osFiles) Symlink(ctx context.Context, target, name string) error {
	return oserr("Symlink", name, syscall.Symlink(target, name))
}

func (osFiles) Readlink(ctx context.Context, name string) (string, error) {
	t, err := os.Readlink(name)
	return t, oserr("Readlink", name, err)
}

func (osFiles) Link(ctx context.Context, oldname, newname string) error {
	return oserr("Link", oldname, syscall.Link(oldname, newname))
}

func (osFiles) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(name, &st); err != nil {
		return providers.StatFS{}, oserr("Statfs", name, err)
	}
	return providers.StatFS{Bsize: uint32(st.Bsize), Blocks: st.Blocks, Bfree: st.Bfree, Bavail: st.Bavail,
		Files: st.Files, Ffree: st.Ffree, NameLen: uint32(st.Namelen)}, nil
}

func (osFiles) Fsync(ctx context.Context, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return oserr("Fsync", name, err)
	}
	defer f.Close()
	return oserr("Fsync", name, f.Sync())
}

// osWalk is the reference Walk.
func osWalk(root string) ([]providers.FileInfo, error) {
	var out []providers.FileInfo
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		fi, err := osFiles{}.Lstat(context.Background(), p)
		if err != nil {
			return err
		}
		fi.Name = strings.TrimPrefix(p, root+"/")
		out = append(out, fi)
		return nil
	})
	return out, err
}
