package local

import (
	"context"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.RenameStater = (*Box)(nil)

// RenameStat is Rename answered with the attributes it left: newname's
// (fstatat in its directory, not following a symlink) and those of the
// directories holding newname (dirs[0]) and oldname (dirs[1], when
// another), read through the descriptors the rename itself used, so no
// path is resolved again and none leads out of the workspace. rename(2)
// moves the file's change time and both directories' times: a caller
// that records these has the state the watch reports of the rename, and
// drops that report as its echo (docs/design.md, F-echo).
func (b *Box) RenameStat(ctx context.Context, oldname, newname string) (providers.FileInfo, []providers.FileInfo, error) {
	const op = "local.Rename"
	r, oldRel, err := b.open(ctx, op, oldname)
	if err != nil {
		return providers.FileInfo{}, nil, err
	}
	newRel, err := b.rel(op, newname)
	if err != nil {
		return providers.FileInfo{}, nil, err
	}
	// renameat(2) on the two parent directories, as Rename does.
	od, err := b.openDir(r, path.Dir(oldRel), os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return providers.FileInfo{}, nil, b.pathErr(op, oldname, err)
	}
	defer od.Close()
	nd, err := b.openDir(r, path.Dir(newRel), os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return providers.FileInfo{}, nil, b.pathErr(op, newname, err)
	}
	defer nd.Close()
	base := path.Base(newRel)
	if err := unix.Renameat(int(od.Fd()), path.Base(oldRel), int(nd.Fd()), base); err != nil {
		return providers.FileInfo{}, nil, b.pathErr(op, oldname, err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(nd.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		// Renamed, then removed or renamed again by the box at once.
		return providers.FileInfo{}, nil, b.pathErr(op, newname, err)
	}
	fi := fileInfo(baseName(newname), &st)
	if fi.IsSymlink() {
		fi.Target = readlinkat(int(nd.Fd()), base)
	}
	dirs := make([]providers.FileInfo, 0, 2)
	for i, d := range []*os.File{nd, od} {
		if i == 1 && path.Dir(oldRel) == path.Dir(newRel) {
			break
		}
		if err := unix.Fstat(int(d.Fd()), &st); err != nil {
			// The box could not say: the caller asks for it.
			break
		}
		dirs = append(dirs, fileInfo(path.Base(d.Name()), &st))
	}
	return fi, dirs, nil
}
