package local

import (
	"context"
	"errors"
	"strings"

	"github.com/boxfs/boxfs/internal/treewatch"
	"github.com/boxfs/boxfs/providers"
)

var _ providers.Watcher = (*Box)(nil)

// Watch reports the changes made under root, a directory of the
// workspace, by anyone (the box's processes, the user's editor, another
// program on the host): the workspace is a host directory, watched with
// inotify in this process. The provider's own temporary names are left
// out. A tree larger than treewatch.DefaultLimit directories is reported
// as an overflow.
func (b *Box) Watch(ctx context.Context, root string, ready func(), changed func(changes []providers.Change, all bool)) error {
	const op = "local.Watch"
	if _, err := b.rel(op, root); err != nil {
		return err
	}
	if _, err := b.fsRoot(op); err != nil {
		return err
	}
	err := treewatch.Watch(ctx, root, treewatch.Options{
		Ready: ready,
		// Each path goes with its attributes after the change: the host
		// drops the echo of its own change by them (docs/design.md §6,
		// F-echo).
		Changed: func(paths []string, all bool) {
			changes := make([]providers.Change, len(paths))
			for i, p := range paths {
				changes[i] = lstatChange(root, p)
			}
			changed(changes, all)
		},
		Skip: func(name string) bool { return strings.HasPrefix(name, ".boxfs-tmp-") },
	})
	switch {
	case errors.Is(err, treewatch.ErrNotLinux):
		return providers.E(providers.Unsupported, op, err).WithBox(b.id)
	case err != nil:
		return b.pathErr(op, root, err)
	case ctx.Err() == nil:
		// The root went away: the box was destroyed, or its workspace
		// removed under it.
		return providers.Errorf(providers.NotFound, op, "the watched directory went away").WithBox(b.id).WithPath(root)
	}
	return nil
}
