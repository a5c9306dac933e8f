//go:build linux

package agent

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// osFiles is the reference the agent is compared with: the Files contract
// done directly with the os package and system calls on this host.
type osFiles struct{}

var _ providers.Files = osFiles{}

func osInfo(name string, st *unix.Stat_t) providers.FileInfo {
	return statNSOf(st).info(name)
}

func (osFiles) Stat(_ context.Context, name string) (providers.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		return providers.FileInfo{}, err
	}
	return osInfo(filepath.Base(name), &st), nil
}

func (osFiles) Lstat(_ context.Context, name string) (providers.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil {
		return providers.FileInfo{}, err
	}
	fi := osInfo(filepath.Base(name), &st)
	if fi.IsSymlink() {
		fi.Target, _ = os.Readlink(name)
	}
	return fi, nil
}

func (o osFiles) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	des, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	var out []providers.FileInfo
	for _, de := range des {
		fi, err := o.Lstat(ctx, filepath.Join(name, de.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	return out, nil
}

func (o osFiles) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, syscall.ENOTDIR
	}
	var out []providers.FileInfo
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		fi, err := o.Lstat(ctx, p)
		if err != nil {
			return err
		}
		fi.Name, _ = filepath.Rel(root, p)
		out = append(out, fi)
		return nil
	})
	return out, err
}

func (osFiles) ReadFile(_ context.Context, name string) (io.ReadCloser, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (osFiles) ReadAt(_ context.Context, name string, p []byte, off int64) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.ReadAt(p, off)
}

func (osFiles) WriteFile(_ context.Context, name string, r io.Reader, perm providers.FileMode) error {
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return syscall.EISDIR
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			perm = providers.FileModeFromUnix(st.Mode).Perm() | providers.FileModeFromUnix(st.Mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
			defer os.Chmod(name, perm)
		}
	}
	tmp := filepath.Join(filepath.Dir(name), ".ref-tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	f.Close()
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (osFiles) WriteAt(_ context.Context, name string, p []byte, off int64) (int, error) {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.WriteAt(p, off)
}

func (osFiles) Create(_ context.Context, name string, perm providers.FileMode, exclusive bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if exclusive {
		flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(name, flags, perm)
	if err != nil {
		return err
	}
	return f.Close()
}

func (osFiles) Mkdir(_ context.Context, name string, perm providers.FileMode) error {
	return os.Mkdir(name, perm)
}
func (osFiles) Remove(_ context.Context, name string) error { return unix.Unlink(name) }
func (osFiles) Rmdir(_ context.Context, name string) error  { return unix.Rmdir(name) }
func (osFiles) Rename(_ context.Context, o, n string) error { return unix.Rename(o, n) } // os.Rename says EEXIST for a directory
func (osFiles) Chmod(_ context.Context, name string, m providers.FileMode) error {
	return os.Chmod(name, m)
}
func (osFiles) Chown(_ context.Context, name string, uid, gid int) error {
	return os.Chown(name, uid, gid)
}
func (osFiles) Utimes(_ context.Context, name string, atime, mtime time.Time) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if !atime.IsZero() {
		ts[0] = unix.NsecToTimespec(atime.UnixNano())
	}
	if !mtime.IsZero() {
		ts[1] = unix.NsecToTimespec(mtime.UnixNano())
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, name, ts, 0)
}
func (osFiles) Truncate(_ context.Context, name string, size int64) error {
	return os.Truncate(name, size)
}
func (osFiles) Symlink(_ context.Context, target, name string) error { return os.Symlink(target, name) }
func (osFiles) Readlink(_ context.Context, name string) (string, error) {
	return os.Readlink(name)
}
func (osFiles) Link(_ context.Context, o, n string) error { return os.Link(o, n) }
func (osFiles) Statfs(_ context.Context, name string) (providers.StatFS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(name, &st); err != nil {
		return providers.StatFS{}, err
	}
	return providers.StatFS{Bsize: uint32(st.Bsize), Blocks: st.Blocks, Bfree: st.Bfree, Bavail: st.Bavail,
		Files: st.Files, Ffree: st.Ffree, NameLen: uint32(st.Namelen)}, nil
}
func (osFiles) Fsync(_ context.Context, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// snapshot is a tree as a user sees it: every entry's kind, mode, size,
// content, target and mtime, by relative path.
func snapshot(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := providers.FileModeFromUnix(st.Mode).String()
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case unix.S_IFLNK:
			t, _ := os.Readlink(p)
			desc += " -> " + t
		}
		out[rel] = desc
		return nil
	})
	return out, err
}

// snapshotFiles is snapshot made through f, for a tree the test cannot
// reach on the host (in a container).
func snapshotFiles(ctx context.Context, f interface {
	providers.Files
	providers.Walker
}, root string) (map[string]string, error) {
	fis, err := f.Walk(ctx, root)
	if err != nil {
		return nil, err
	}
	root0, err := f.Stat(ctx, root)
	if err != nil {
		return nil, err
	}
	out := map[string]string{".": root0.Mode.String()}
	for _, fi := range fis {
		desc := fi.Mode.String()
		switch {
		case fi.IsRegular():
			rc, err := f.ReadFile(ctx, filepath.Join(root, fi.Name))
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
			desc += " " + string(b)
		case fi.IsSymlink():
			desc += " -> " + fi.Target
		}
		out[fi.Name] = desc
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
