package hands

import (
	"archive/tar"
	"context"
	"io"
	"path"
	"syscall"

	"github.com/boxfs/boxfs/providers"
)

// bulkSize is the file size from which native ReadFile moves a file through
// the provider's archive API instead of a cat exec: an archive call costs
// more than an exec to start, and moves bulk data faster than an exec's
// stdout.
const bulkSize = 1 << 20

// native serves stat through the provider's stat-path API, big whole-file
// reads through its archive API, and everything else through scripts.
type native struct {
	*scripts
	stater   providers.PathStater
	archiver providers.Archiver
}

var _ providers.Files = (*native)(nil)

// Lstat stats name without a command. The stat-path API knows mode, size
// and mtime; uid, gid, inode, link count, atime and ctime are left zero. A
// symlink (whose raw target the API does not give) and any answer other
// than found or not found go to the script, which is exact.
func (n *native) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "hands.Lstat"
	p, err := checkPath(op, n.box.ID(), name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	fi, err, ok := n.statPath(ctx, op, p)
	if !ok || fi.IsSymlink() {
		return n.scripts.Lstat(ctx, p)
	}
	return fi, err
}

// statPath asks the stat-path API; ok is false when its answer does not
// settle the question.
func (n *native) statPath(ctx context.Context, op, p string) (fi providers.FileInfo, err error, ok bool) {
	fi, err = n.stater.StatPath(ctx, p)
	switch {
	case err == nil:
		fi.Name = path.Base(p)
		return fi, nil, true
	case providers.IsCode(err, providers.NotFound):
		return providers.FileInfo{}, providers.PathError(op, n.box.ID(), p, syscall.ENOENT), true
	case providers.IsCode(err, providers.Timeout), providers.IsCode(err, providers.Aborted), providers.IsCode(err, providers.Gone):
		return providers.FileInfo{}, providers.E(0, op, err).WithBox(n.box.ID()).WithPath(p), true
	}
	return providers.FileInfo{}, err, false
}

// Stat follows a final symlink by stating its resolved target, which the
// stat-path API reports as an absolute path in the box; else it falls back
// to the script.
func (n *native) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "hands.Stat"
	p, err := checkPath(op, n.box.ID(), name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	fi, err, ok := n.statPath(ctx, op, p)
	if !ok {
		return n.scripts.Stat(ctx, p)
	}
	if err != nil || !fi.IsSymlink() {
		return fi, err
	}
	if path.IsAbs(fi.Target) {
		tfi, err, ok := n.statPath(ctx, op, fi.Target)
		if ok && err == nil && !tfi.IsSymlink() {
			tfi.Name = path.Base(p)
			return tfi, nil
		}
		if ok && providers.IsCode(err, providers.NotFound) {
			return providers.FileInfo{}, providers.PathError(op, n.box.ID(), p, syscall.ENOENT)
		}
	}
	return n.scripts.Stat(ctx, p)
}

// ReadFile moves a big regular file through the archive API, anything else
// through a cat exec.
func (n *native) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	const op = "hands.ReadFile"
	p, err := checkPath(op, n.box.ID(), name)
	if err != nil {
		return nil, err
	}
	fi, err := n.stater.StatPath(ctx, p)
	if err != nil || !fi.IsRegular() || fi.Size < bulkSize {
		return n.scripts.ReadFile(ctx, p)
	}
	rc, err := n.archiver.GetArchive(ctx, p)
	if err != nil {
		return n.scripts.ReadFile(ctx, p)
	}
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil || hdr.Typeflag != tar.TypeReg {
		rc.Close()
		return n.scripts.ReadFile(ctx, p)
	}
	return struct {
		io.Reader
		io.Closer
	}{tr, rc}, nil
}
