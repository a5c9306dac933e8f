package hands

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.LinkAttrSetter = (*Hands)(nil)

// Lchown sets the owner of name itself, never following a symlink; -1
// leaves one unchanged. Every path serves it: the agent and a box with its
// own LinkAttrSetter (the local provider) in one call, any other path with
// one exec of a fixed script (chown -h).
func (h *Hands) Lchown(ctx context.Context, name string, uid, gid int) error {
	return h.linkAttrs().Lchown(ctx, name, uid, gid)
}

// Lutimes sets the times of name itself to the nanosecond, never following
// a symlink; a zero time leaves that one unchanged. Served as Lchown is
// (touch -h on the script path; whole seconds where touch is busybox's).
func (h *Hands) Lutimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return h.linkAttrs().Lutimes(ctx, name, atime, mtime)
}

// linkAttrs is the path's own LinkAttrSetter, else the scripts'.
func (h *Hands) linkAttrs() providers.LinkAttrSetter {
	if ls, ok := h.files.(providers.LinkAttrSetter); ok {
		return ls
	}
	return h.sh
}
