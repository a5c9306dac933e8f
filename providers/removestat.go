package providers

import "context"

// RemoveStater is an optional part of Files: an unlink answered with the
// attributes the file keeps under its other names, if it has any, so that
// a caller holding those names records the link count and change time
// the unlink left (a hard link's other name: git links each object from a
// temporary name it then removes).
type RemoveStater interface {
	// RemoveStat is Remove, then the attributes of the file name named,
	// as an fstat of it after the unlink finds them (Nlink 0 when no
	// name is left). A remote that cannot answer so returns Unsupported,
	// having removed nothing.
	RemoveStat(ctx context.Context, name string) (FileInfo, error)
}
