package cache_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

// A file made here with O_EXCL whose name the box took before the push
// does not replace the box's file: the close fails with EEXIST, the box's
// file stays, nothing stays dirty.
func TestCreateExclLosesToTheBox(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	_, err := c.Mkdir(ctx, "d", 0o755)
	require.NoError(t, err)
	h, _, err := c.Create(ctx, "d/lock", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("host"), 0)
	require.NoError(t, err)
	boxWrite(t, r, "d/lock", "box")
	err = h.Flush(ctx)
	assert.True(t, providers.IsCode(err, providers.Exists), "close: %v, want exists", err)
	h.Release(ctx)
	assert.Equal(t, "box", boxRead(t, r, "d/lock"))
	assert.Empty(t, c.Dirty())
	fi, err := c.Lookup(ctx, "d/lock")
	require.NoError(t, err)
	assert.EqualValues(t, 3, fi.Size, "the box's file, as the box has it")
}

// A file the box does not have yet (made here, not closed) is unlinked,
// renamed and truncated on the host alone: no call reaches the box until
// the push of what is left.
func TestHostOnlyFileCostsNoCalls(t *testing.T) {
	p, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	_, err := c.Mkdir(ctx, "d", 0o755)
	require.NoError(t, err)
	p.ResetCalls()

	a := write(t, c, "d/a", "kept")
	require.NoError(t, c.Rename(ctx, "d/a", "d/b"))
	tmp := write(t, c, "d/tmp", "dropped")
	require.NoError(t, c.Remove(ctx, "d/tmp"))
	_, err = c.Truncate(ctx, "d/b", 2)
	require.NoError(t, err)
	assert.Empty(t, p.Calls(), "calls before any close")
	assert.Equal(t, []string{"d/b"}, c.Dirty())

	require.NoError(t, a.Flush(ctx))
	require.NoError(t, tmp.Flush(ctx), "the close of an unlinked file")
	a.Release(ctx)
	tmp.Release(ctx)
	for _, call := range p.Calls() {
		assert.NotContains(t, []string{"Rename", "Remove", "Truncate"}, call.Op, "%s %s reached the box", call.Op, call.Path)
	}
	assert.Equal(t, "ke", boxRead(t, r, "d/b"))
	for _, gone := range []string{"d/a", "d/tmp"} {
		_, err := r.Lstat(ctx, root+"/"+gone)
		assert.True(t, providers.IsCode(err, providers.NotFound), "%s in the box: %v", gone, err)
	}
	assert.Empty(t, c.Dirty())
}

// A create in a directory whose listing the cache does not hold asks the
// box at once, as O_EXCL there must.
func TestCreateInUnlistedDirAsksTheBox(t *testing.T) {
	_, _, r := fakeBox(t)
	require.NoError(t, r.Mkdir(t.Context(), root+"/d", 0o755))
	boxWrite(t, r, "d/x", "box")
	c := open(t, r, t.TempDir())
	_, _, err := c.Create(t.Context(), "d/x", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
	assert.True(t, providers.IsCode(err, providers.Exists), "create of a name the box has: %v", err)
}
