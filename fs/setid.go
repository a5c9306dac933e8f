package fs

import (
	"context"
	iofs "io/fs"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// The set-group-ID rule of a write or truncate that the kernel's FUSE
// client leaves to the file system: one by a caller outside the file's
// group and without CAP_FSETID drops a set-group-ID bit even without
// group execute. With group execute, and for set-user-ID, the kernel
// asks for the change itself (a setattr before the write). Only a file
// with such a bit pays for the check.

// losesSetgid reports whether the caller of the request ctx carries drops
// regular file fi's set-group-ID bit by changing its content.
func (n *workNode) losesSetgid(ctx context.Context, fi providers.FileInfo) bool {
	if !fi.Mode.IsRegular() || fi.Mode&iofs.ModeSetgid == 0 || fi.Mode&0o010 != 0 {
		return false
	}
	caller, ok := fuse.FromContext(ctx)
	if !ok || caller.Uid == 0 {
		return false
	}
	_, gid := n.v.ids().toHost(fi.UID, fi.GID)
	return caller.Gid != gid && !inGroup(int(caller.Pid), gid)
}

// dropSetgid drops rel's set-group-ID bit when the caller's change of
// its content does (losesSetgid), and answers its attributes after; have
// says fi holds them (without, they are asked of the box, but for root,
// who keeps every bit).
func (n *workNode) dropSetgid(ctx context.Context, c *cache.Cache, rel string, fi providers.FileInfo, have bool) (providers.FileInfo, bool, error) {
	if caller, ok := fuse.FromContext(ctx); !ok || caller.Uid == 0 {
		return fi, have, nil
	}
	if !have {
		var err error
		if fi, err = c.Getattr(ctx, rel); err != nil {
			return fi, false, err
		}
	}
	if !n.losesSetgid(ctx, fi) {
		return fi, true, nil
	}
	fi, err := c.Chmod(ctx, rel, fi.Mode&modeBits&^iofs.ModeSetgid)
	return fi, err == nil, err
}

// dropSetgid is the rule for a write through this open; the kernel's
// copy of the mode is dropped when the bit is.
func (wh *workHandle) dropSetgid(ctx context.Context) {
	fi, ok := wh.h.Attr()
	if !ok {
		fi, ok = wh.lastSeen()
	}
	n := wh.n
	if !ok || !n.losesSetgid(ctx, fi) {
		return
	}
	rel, errno := n.rel()
	if errno != 0 {
		return
	}
	if n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		fi, _, err = n.dropSetgid(ctx, c, rel, fi, true)
		return err
	}) != 0 {
		return
	}
	wh.remember(fi)
	if n.v.fs.mounted() {
		n.NotifyContent(-1, 0)
	}
}
