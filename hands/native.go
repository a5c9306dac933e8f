package hands

import (
	"archive/tar"
	"context"
	"io"

	"github.com/boxfs/boxfs/providers"
)

// bulkSize is the file size from which native ReadFile moves a file through
// the provider's archive API instead of a cat exec: an archive call costs
// more than an exec to start, and moves bulk data faster than an exec's
// stdout.
const bulkSize = 1 << 20

// native serves big whole-file reads through the provider's archive API
// (sized by its stat-path API), and everything else through scripts.
type native struct {
	*scripts
	stater   providers.PathStater
	archiver providers.Archiver
}

var _ providers.Files = (*native)(nil)

// Lstat and Stat are the scripts': the stat-path API knows mode, size and
// mtime only, and a mount that checks permissions (default_permissions)
// needs the owner, the link count and the change time of every file it
// shows.

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
