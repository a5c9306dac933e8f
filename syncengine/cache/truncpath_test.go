package cache_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// A truncate by name of a file another open holds (here one whose close
// already pushed it, its release on the way, as the kernel sends it after
// close returns) reaches the box before it returns, in write-through; and
// a later truncate by name, once nothing holds the file open, is not
// undone by the first one's copy.
func TestTruncateByNameOfAnOpenFile(t *testing.T) {
	_, _, r := fakeBox(t)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour})
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()

	h := write(t, c, "f", "0123456789")
	require.NoError(t, h.Flush(ctx)) // close(2): in the box
	_, err = c.Truncate(ctx, "f", 3)
	require.NoError(t, err)
	assert.Equal(t, "012", boxRead(t, r, "f"), "the box after truncate f 3")
	h.Release(ctx)

	_, err = c.Truncate(ctx, "f", 0)
	require.NoError(t, err)
	fi, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.Equal(t, int64(0), fi.Size, "size after truncate f 0")
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, "", boxRead(t, r, "f"), "the box after truncate f 0 and a flush")
}

// In write-behind, a truncate by name of a closed file whose bytes wait
// for their batch truncates those bytes: the batch does not bring the
// old length back.
func TestTruncateByNameOfAWaitingFile(t *testing.T) {
	_, _, r := fakeBox(t)
	boxWrite(t, r, "f", "old content")
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour,
		WriteBehind: true, BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()

	h, _, err := c.OpenFile(ctx, "f", os.O_WRONLY|syscall.O_TRUNC)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("the host's new bytes"), 0)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)

	_, err = c.Truncate(ctx, "f", 8)
	require.NoError(t, err)
	fi, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.Equal(t, int64(8), fi.Size)
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, "the host", boxRead(t, r, "f"), "the box after the batch")
}

// open(O_TRUNC)'s truncate comes by name after the open: the box keeps
// the file as it was until that open's close pushes it (a daemon killed
// before then leaves the box's file whole).
func TestTruncateByNameOfAFileOpenForWriting(t *testing.T) {
	_, _, r := fakeBox(t)
	boxWrite(t, r, "f", "the box's")
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour})
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()

	h, _, err := c.OpenFile(ctx, "f", os.O_WRONLY)
	require.NoError(t, err)
	_, err = c.Truncate(ctx, "f", 0)
	require.NoError(t, err)
	assert.Equal(t, "the box's", boxRead(t, r, "f"), "the box before the close")
	_, err = h.WriteAt([]byte("the host's"), 0)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	assert.Equal(t, "the host's", boxRead(t, r, "f"), "the box after the close")
}
