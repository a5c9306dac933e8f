package providers

import "context"

// BatchRemover is an optional part of Files: many unlinks and rmdirs in one
// round trip, done in order, each answered with its own result. The
// write-behind mode sends the names the host removed through it, before the
// files and directories of the same batch.
type BatchRemover interface {
	// RemoveFiles removes each of rms in order (a directory with rmdir, so
	// only when empty by then; a file or symlink with unlink) and returns
	// one error per entry, nil where it was removed. A name already gone
	// is answered NotFound. An error of its own means the batch as a whole
	// failed: which of its entries were done is not known. A remote that
	// cannot answer so returns Unsupported, having removed nothing.
	RemoveFiles(ctx context.Context, rms []FileRemove) ([]error, error)
}

// FileRemove is one entry of a BatchRemover's batch.
type FileRemove struct {
	Name string // box-side absolute path
	Dir  bool   // rmdir; else unlink
}
