package local

import (
	"context"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.RemoveStater = (*Box)(nil)

// RemoveStat is Remove answered with the attributes the file keeps: the
// name is opened (O_PATH, not following a symlink) in its directory,
// opened beneath the workspace, before the unlink, and the descriptor is
// fstat'ed after it, so the answer is the file's link count and change
// time as the unlink left them.
func (b *Box) RemoveStat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "local.Remove"
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	if rel == "." {
		return providers.FileInfo{}, providers.PathError(op, b.id, name, syscall.EBUSY)
	}
	d, err := b.openDir(r, path.Dir(rel), os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	defer d.Close()
	base := path.Base(rel)
	fd, err := unix.Openat(int(d.Fd()), base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	defer unix.Close(fd)
	if err := unix.Unlinkat(int(d.Fd()), base, 0); err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return providers.FileInfo{}, b.pathErr(op, name, err)
	}
	return fileInfo(baseName(name), &st), nil
}
