package hands

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.LinkAttrSetter = (*Hands)(nil)

// Lchown sets the owner of name itself, never following a symlink; -1
// leaves one unchanged. The agent and a box with its own LinkAttrSetter
// (the local provider) serve it; any other path says Unsupported, and the
// caller changes the link with a command (chown -h).
func (h *Hands) Lchown(ctx context.Context, name string, uid, gid int) error {
	if ls, ok := h.files.(providers.LinkAttrSetter); ok {
		return ls.Lchown(ctx, name, uid, gid)
	}
	return h.noLinkAttrs("hands.Lchown", name)
}

// Lutimes sets the times of name itself to the nanosecond, never following
// a symlink; a zero time leaves that one unchanged. Unsupported where the
// path has no such call, as Lchown.
func (h *Hands) Lutimes(ctx context.Context, name string, atime, mtime time.Time) error {
	if ls, ok := h.files.(providers.LinkAttrSetter); ok {
		return ls.Lutimes(ctx, name, atime, mtime)
	}
	return h.noLinkAttrs("hands.Lutimes", name)
}

func (h *Hands) noLinkAttrs(op, name string) error {
	return providers.Errorf(providers.Unsupported, op, "the %s path cannot set a symbolic link's own attributes", h.via).
		WithBox(h.box.ID()).WithPath(name)
}
