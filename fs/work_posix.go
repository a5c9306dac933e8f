package fs

import (
	"context"
	iofs "io/fs"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// This file is what a new name in work/ gets besides being made: the
// kind asked for (mknod of a named pipe, socket or device), and the owner
// and mode the same call would leave on a local disk. The kernel checks
// permissions before a request reaches boxfs (default_permissions) and
// applies the caller's umask; the box makes the name as its own user
// under its own umask, and settle makes up the difference.

// mknodSpecial makes name a named pipe, socket or device in the box (a
// host process's bind(2) of a unix socket arrives as mknod of S_IFSOCK).
// A path that cannot make special files answers EPERM, as a file system
// without them does; the box's own refusal (EPERM without CAP_MKNOD) is
// answered as it is.
func (n *workNode) mknodSpecial(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	dir, errno := n.rel()
	if errno != 0 {
		return nil, errno
	}
	rel := joinRel(dir, name)
	fm := providers.FileModeFromUnix(mode)
	var fi providers.FileInfo
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		if fi, err = c.Mknod(ctx, rel, fm, boxDev(dev)); err == nil {
			fi, err = n.settle(ctx, c, rel, fi, mode&0o7777)
		}
		return err
	}); errno != 0 {
		if errno == syscall.ENOTSUP {
			return nil, syscall.EPERM
		}
		return nil, errno
	}
	n.v.inos().remove(rel)
	return n.child(ctx, rel, fi, out), 0
}

// settle gives rel, which this request just made in the box as the box's
// own user, what the same call leaves on a local disk (and answers its
// attributes after):
//
//   - the caller's uid and gid, or their uid alone in a set-group-ID
//     directory (whose group the new name took). The user who mounted is
//     the box's user: what they make stays the box user's, but for the
//     group when they act under another one than their own (sg, newgrp).
//     A box that cannot change an owner (its user is not root) is
//     answered with its error, and what was made is removed: the caller
//     would otherwise own nothing of what they made;
//   - mode, the permission bits the caller asked for (after their
//     umask), exactly: the box's umask may take more, and a chown by the
//     box's root takes the set-user-ID bit. A directory keeps the
//     set-group-ID bit a set-group-ID parent passes on. A symbolic link
//     has no mode to set (mode ^0).
func (n *workNode) settle(ctx context.Context, c *cache.Cache, rel string, fi providers.FileInfo, mode uint32) (providers.FileInfo, error) {
	made := fi
	uid, gid := n.v.newOwner(ctx)
	if uid >= 0 && uint32(uid) == fi.UID {
		uid = -1
	}
	if gid >= 0 && uint32(gid) == fi.GID {
		gid = -1
	}
	if gid >= 0 {
		// The parent is asked only now: most names need no chown.
		dir, _ := splitRel(rel)
		if pfi, err := c.Getattr(ctx, dir); err == nil && pfi.Mode&iofs.ModeSetgid != 0 {
			gid = -1
		}
	}
	var err error
	if uid >= 0 || gid >= 0 {
		if fi.IsSymlink() {
			fi, err = c.Lchown(ctx, rel, uid, gid)
		} else {
			fi, err = c.Chown(ctx, rel, uid, gid)
		}
	}
	if err == nil && mode != ^uint32(0) && !fi.IsSymlink() {
		want := providers.FileModeFromUnix(mode) & modeBits
		if fi.IsDir() {
			// Never asked for (mkdir(2) takes no set-group-ID bit): a
			// set-group-ID parent's, passed on.
			want |= fi.Mode & iofs.ModeSetgid
		}
		if fi.Mode&modeBits != want {
			fi, err = c.Chmod(ctx, rel, want)
		}
	}
	if err == nil {
		return fi, nil
	}
	if made.IsDir() {
		c.Rmdir(ctx, rel)
	} else {
		c.Remove(ctx, rel)
	}
	return providers.FileInfo{}, providers.E(0, "fs.create", err).WithPath(rel)
}

// nameMax is NAME_MAX, the longest name a Linux file system holds.
const nameMax = 255

// missing is the answer to a lookup of name the box answered errno: a
// name too long for any file system is ENAMETOOLONG, as the box's own
// file system answers a call that names it (unlink, chmod, stat), not
// ENOENT. A name that long the box does hold is found as any other.
func missing(name string, errno syscall.Errno) syscall.Errno {
	if errno == syscall.ENOENT && len(name) > nameMax {
		return syscall.ENAMETOOLONG
	}
	return errno
}

// sameKind reports whether fi, the box's answer for n's name, is of n's
// kind. A name renamed over (rename(2) of another file onto it) names the
// other file in the box before the rename is recorded in the tree, and an
// answer of another kind would make the kernel take the inode for corrupt
// (EIO on every later call) or show one file's attributes as another's.
func (n *workNode) sameKind(fi providers.FileInfo) bool {
	return providers.UnixMode(fi.Mode)&syscall.S_IFMT == n.StableAttr().Mode&syscall.S_IFMT
}

// replacedAttr answers a stat of a node whose name now holds another
// file: what an open of it last knew, with no names left, as for a file
// unlinked while open; without one, the name no longer names it.
func (n *workNode) replacedAttr(wh *workHandle, a *fuse.Attr) syscall.Errno {
	if wh != nil && wh.unlinkedAttr(a, n.StableAttr().Ino) {
		return 0
	}
	return syscall.ENOENT
}

// modeBits are the bits chmod sets.
const modeBits = iofs.ModePerm | iofs.ModeSetuid | iofs.ModeSetgid | iofs.ModeSticky

// newOwner is the box's uid and gid for a name the request ctx carries
// makes, each -1 where the box's own choice stands (see settle).
func (v *boxView) newOwner(ctx context.Context) (uid, gid int) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return -1, -1
	}
	o := v.fs.own
	if c.Uid == o.uid {
		uid, gid = -1, -1
		if c.Gid != o.self {
			_, gid = v.ids().toBox(-1, int(c.Gid))
		}
	} else {
		uid, gid = v.ids().toBox(int(c.Uid), int(c.Gid))
	}
	return uid, gid
}

// fuseDev is the device number dev (Linux's 64-bit dev_t) as FUSE
// carries it: the kernel's 32-bit encoding (new_encode_dev).
func fuseDev(dev uint64) uint32 {
	major, minor := providers.DevMajor(dev), providers.DevMinor(dev)
	return minor&0xff | major<<8 | (minor&^0xff)<<12
}

// boxDev is the device number a mknod request carries (new_encode_dev) as
// Linux's 64-bit dev_t.
func boxDev(d uint32) uint64 {
	return providers.Mkdev((d&0xfff00)>>8, d&0xff|(d>>12)&0xfff00)
}

var _ gofs.FileAllocater = (*workHandle)(nil)

// Allocate is fallocate(2) on an open file: mode 0 grows the file to
// off+size with zeros, in the copy this open writes (pushed at close as
// every write is); FALLOC_FL_KEEP_SIZE reserves blocks a reader never
// sees, which a copy pushed whole has no use for. Punching or zeroing a
// range is EOPNOTSUPP.
func (wh *workHandle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	switch mode {
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0
	case 0:
	default:
		return syscall.EOPNOTSUPP
	}
	end := int64(off + size)
	if end < 0 {
		return syscall.EFBIG
	}
	cur, ok := wh.h.Attr()
	if !ok {
		cur, _ = wh.lastSeen()
	}
	if end <= cur.Size {
		return 0
	}
	if err := wh.h.Truncate(end); err != nil {
		wh.n.v.b.SetErr(err)
		return toErrno(err)
	}
	wh.resized(end)
	return 0
}
