package providers

import (
	"context"
	"time"
)

// SetattrStater is an optional part of Files: chmod, chown and utimes
// answered with the attributes they left, the change time among them,
// so that a caller records the state the box's watch then reports (the
// echo of its own change) without asking again.
type SetattrStater interface {
	// ChmodStat is Chmod, then Lstat of name. A remote that cannot
	// answer so returns Unsupported, having changed nothing; so do
	// ChownStat and UtimesStat.
	ChmodStat(ctx context.Context, name string, mode FileMode) (FileInfo, error)
	// ChownStat is Chown, then Lstat of name.
	ChownStat(ctx context.Context, name string, uid, gid int) (FileInfo, error)
	// UtimesStat is Utimes, then Lstat of name.
	UtimesStat(ctx context.Context, name string, atime, mtime time.Time) (FileInfo, error)
}
