package cache

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// This file is a symbolic link's own owner and times (chown -h, touch -h,
// and cp -a, tar and rsync on every link they make): one call of the
// remote's providers.LinkAttrSetter, recorded as the other setattrs are,
// without dropping anything else the cache holds.

// linkAttrs is the remote's LinkAttrSetter, or an Unsupported error.
func (c *Cache) linkAttrs(op, rel string) (providers.LinkAttrSetter, error) {
	if ls, ok := c.remote.(providers.LinkAttrSetter); ok {
		return ls, nil
	}
	return nil, providers.Errorf(providers.Unsupported, op, "the box's files cannot set a symbolic link's own attributes").
		WithBox(c.opts.Box).WithPath(c.abs(rel))
}

// Lchown sets rel's own owner in the box, never following a symlink (a
// dangling link works); -1 leaves one unchanged. It is Unsupported when
// the remote has no LinkAttrSetter, or its path has none.
func (c *Cache) Lchown(ctx context.Context, rel string, uid, gid int) (providers.FileInfo, error) {
	const op = "cache.Lchown"
	ls, err := c.linkAttrs(op, rel)
	if err != nil {
		return providers.FileInfo{}, err
	}
	if err := ls.Lchown(ctx, c.abs(rel), uid, gid); err != nil {
		c.linkAttrFailed(rel, err)
		return providers.FileInfo{}, err
	}
	return c.afterSetattr(ctx, rel, func(fi *providers.FileInfo) {
		if uid >= 0 {
			fi.UID = uint32(uid)
		}
		if gid >= 0 {
			fi.GID = uint32(gid)
		}
	})
}

// Lutimes sets rel's own times in the box to the nanosecond, never
// following a symlink; a zero time leaves that one unchanged. Unsupported
// as Lchown.
func (c *Cache) Lutimes(ctx context.Context, rel string, atime, mtime time.Time) (providers.FileInfo, error) {
	const op = "cache.Lutimes"
	ls, err := c.linkAttrs(op, rel)
	if err != nil {
		return providers.FileInfo{}, err
	}
	if err := ls.Lutimes(ctx, c.abs(rel), atime, mtime); err != nil {
		c.linkAttrFailed(rel, err)
		return providers.FileInfo{}, err
	}
	return c.afterSetattr(ctx, rel, func(fi *providers.FileInfo) {
		if !atime.IsZero() {
			fi.Atime = atime
		}
		if !mtime.IsZero() {
			fi.Mtime = mtime
		}
	})
}

// linkAttrFailed forgets rel when the box says it is not there.
func (c *Cache) linkAttrFailed(rel string, err error) {
	if providers.IsCode(err, providers.NotFound) {
		c.forget(rel)
	}
}

// Forget drops what the cache knows of rel (and, for a directory, of what
// is below it) and makes its directory's listing stale, so the next lookup
// of rel asks the box: for a change a command made to rel behind the
// cache's back, where Invalidate would make every listing stale. The rest
// of the cache is kept.
func (c *Cache) Forget(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(rel)
	if rel == "" {
		return
	}
	// forgetLocked took rel out of its directory's listing, which would
	// now say it is not there.
	dir, _ := split(rel)
	if d := c.dir(dir); d != nil {
		d.fetched = time.Time{}
	}
}
