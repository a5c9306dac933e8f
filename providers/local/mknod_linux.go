package local

import (
	"context"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.Mknoder = (*Box)(nil)

// Mknod makes name a named pipe, socket or device (see providers.Mknoder)
// with mode's permission bits exactly, as Create does: mknodat(2) in
// name's parent, opened through the root. A device node needs the
// daemon's CAP_MKNOD, as on the host: without it, EPERM.
func (b *Box) Mknod(ctx context.Context, name string, mode providers.FileMode, dev uint64) error {
	const op = "local.Mknod"
	if !providers.IsSpecial(mode) {
		return providers.Errorf(providers.Invalid, op, "mode %v is not a special file's", mode).WithBox(b.id).WithPath(name)
	}
	r, rel, err := b.open(ctx, op, name)
	if err != nil {
		return err
	}
	if rel == "." {
		return providers.PathError(op, b.id, name, syscall.EEXIST)
	}
	d, err := r.OpenFile(path.Dir(rel), os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return b.pathErr(op, name, err)
	}
	defer d.Close()
	base := path.Base(rel)
	if err := unix.Mknodat(int(d.Fd()), base, providers.UnixMode(mode), int(dev)); err != nil {
		return b.pathErr(op, name, err)
	}
	// The daemon's umask took bits the caller asked for.
	if err := r.Chmod(rel, mode&specialBits); err != nil {
		return b.pathErr(op, name, err)
	}
	return nil
}
