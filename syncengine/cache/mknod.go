package cache

import (
	"context"
	"io/fs"

	"github.com/boxfs/boxfs/providers"
)

// Mknod makes rel a named pipe, socket or device in the box (mode's kind
// and permission bits, dev for a device) and records what the box made.
// A remote that cannot make special files is Unsupported.
func (c *Cache) Mknod(ctx context.Context, rel string, mode fs.FileMode, dev uint64) (providers.FileInfo, error) {
	const op = "cache.Mknod"
	mk, ok := c.remote.(providers.Mknoder)
	if !ok {
		return providers.FileInfo{}, providers.Errorf(providers.Unsupported, op, "the box's files cannot make special files").
			WithBox(c.opts.Box).WithPath(c.abs(rel))
	}
	if err := c.settleRms(ctx, rel); err != nil {
		return providers.FileInfo{}, err
	}
	defer c.intend(rel)()
	if err := mk.Mknod(ctx, c.abs(rel), mode, dev); err != nil {
		return providers.FileInfo{}, err
	}
	fi, err := c.afterMutation(ctx, rel)
	c.mu.Lock()
	c.dirChangedLocked(rel)
	c.mu.Unlock()
	return fi, err
}
