package cache_test

import (
	"io/fs"
	"path"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A file's set-group-ID bit stays in the host's view of it once it is
// written: fs drops the bit when another group's write or truncate does
// (as a disk does), which it can only do if it sees the bit. A chmod
// through the cache, then an open(O_TRUNC) of the file, had the bit gone
// from the copy's mode but not from the box, and the push (which keeps
// the box's mode) left it there (TestPOSIXCompare, docker:
// setid-write).
func TestSetgidStaysInTheHostsView(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	h := write(t, c, "v", "")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	_, err := c.Chmod(ctx, "v", 0o767|fs.ModeSetgid)
	require.NoError(t, err)

	h, _, err = c.OpenFile(ctx, "v", syscall.O_WRONLY)
	require.NoError(t, err)
	require.NoError(t, h.Truncate(0))
	fi, ok := h.Attr()
	require.True(t, ok)
	assert.Equal(t, 0o767|fs.ModeSetgid, fi.Mode&specialBits, "the dirty copy's mode")

	// What fs does for a truncate by another group: the bit is dropped,
	// and the box has it dropped after the close.
	_, err = c.Chmod(ctx, "v", fi.Mode&specialBits&^fs.ModeSetgid)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	bfi, err := r.Lstat(ctx, path.Join(root, "v"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o767), bfi.Mode&specialBits, "the box's mode after the push")
}

const specialBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
