package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// fixedDir is a directory of the namespace's own names: the root, a box's
// directory, cmds/ and cmds/N/. Nothing in it can be removed or renamed
// (EPERM), so `rm -rf MOUNT/*` empties the workspaces and leaves every
// control file and box in place. go-fuse answers success for a directory
// without these methods and drops the child from its tree.
type fixedDir struct {
	gofs.Inode
}

var (
	_ gofs.NodeUnlinker = (*fixedDir)(nil)
	_ gofs.NodeRmdirer  = (*fixedDir)(nil)
	_ gofs.NodeRenamer  = (*fixedDir)(nil)
)

// Unlink refuses: a control file cannot be removed.
func (d *fixedDir) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

// Rmdir refuses: a control directory cannot be removed.
func (d *fixedDir) Rmdir(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

// Rename refuses: a control file cannot be renamed, nor moved out.
func (d *fixedDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EPERM
}
