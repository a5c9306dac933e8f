package hands_test

import (
	"context"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.Mknoder = osFiles{}

func (osFiles) Mknod(ctx context.Context, name string, mode providers.FileMode, dev uint64) error {
	if err := unix.Mknod(name, providers.UnixMode(mode)&^0o7777|0o600, int(dev)); err != nil {
		return oserr("Mknod", name, err)
	}
	return oserr("Mknod", name, unix.Chmod(name, providers.UnixMode(mode)&0o7777))
}

// mknodStep makes every special kind, then the errors: a name taken, a
// missing parent, a parent that is a file.
func mknodStep(ctx context.Context, f providers.Files, r string, p bool) string {
	mk, ok := f.(providers.Mknoder)
	if !ok {
		return "no Mknod"
	}
	var out []string
	for _, c := range []struct {
		name string
		mode providers.FileMode
		dev  uint64
	}{
		{"fifo", fs.ModeNamedPipe | 0o640, 0},
		{"sock", fs.ModeSocket | 0o755, 0},
		{"chr", fs.ModeDevice | fs.ModeCharDevice | 0o600, providers.Mkdev(1, 3)},
		{"blk", fs.ModeDevice | 0o644 | fs.ModeSetgid, providers.Mkdev(7, 300)},
	} {
		err := mk.Mknod(ctx, r+"/d/"+c.name, c.mode, c.dev)
		fi, serr := f.Lstat(ctx, r+"/d/"+c.name)
		out = append(out, errs(err)+" "+statStr(fi, serr, p))
	}
	out = append(out,
		errs(mk.Mknod(ctx, r+"/d/fifo", fs.ModeNamedPipe|0o644, 0)),
		errs(mk.Mknod(ctx, r+"/no/fifo", fs.ModeNamedPipe|0o644, 0)),
		errs(mk.Mknod(ctx, r+"/d/f/fifo", fs.ModeNamedPipe|0o644, 0)),
		errs(f.Remove(ctx, r+"/d/sock")),
		errs(f.Rename(ctx, r+"/d/blk", r+"/d/blk2")),
		dirStr(ctx, f, r+"/d", p))
	return strings.Join(out, "\n")
}
