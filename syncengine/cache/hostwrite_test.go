package cache_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// localWriteCache opens a write-through cache over a new local box, whose files
// are the host's own; it returns the box's workspace on the host too.
func localWriteCache(t *testing.T) (*cache.Cache, cache.Remote, string) {
	t.Helper()
	lp := local.New(t.TempDir())
	box, err := lp.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { box.Destroy(t.Context()) })
	facts, err := box.Facts(t.Context())
	require.NoError(t, err)
	r := box.(cache.Remote)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: facts.Workspace, Box: "test", AttrTimeout: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, r, facts.Workspace
}

// A local box's file written through the mount is written in the box as
// each write returns, as go-fuse's loopback writes (F-through at once):
// the box has the bytes before the close, stat through the mount follows
// the writes, and the watch's report of the result is the host's echo.
func TestLocalWritesLandAtOnce(t *testing.T) {
	c, r, ws := localWriteCache(t)
	ctx := t.Context()
	h, _, err := c.Create(ctx, "f", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o640)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("hello"), 0)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(ws, "f"))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(b), "the box's file before the close")
	fi, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.EqualValues(t, 5, fi.Size, "stat while open")
	assert.Equal(t, os.FileMode(0o640), fi.Mode.Perm())

	// tar sets times and mode after the writes.
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	_, err = c.Utimes(ctx, "f", time.Time{}, mtime)
	require.NoError(t, err)
	_, err = c.Chmod(ctx, "f", 0o600)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)

	before := c.Reports()
	bfi, err := r.Lstat(ctx, filepath.Join(ws, "f"))
	require.NoError(t, err)
	c.Reported([]providers.Change{{Path: "f", Info: &bfi}}, false)
	after := c.Reports()
	assert.Equal(t, before.Echoes+1, after.Echoes, "the report of the host's write is its echo")
	assert.Equal(t, before.Taken, after.Taken)
	fi, err = c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.True(t, fi.Mtime.Equal(mtime), "mtime %v", fi.Mtime)
	assert.Equal(t, os.FileMode(0o600), fi.Mode.Perm())
	st, err := os.Stat(filepath.Join(ws, "f"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// The kernel writes a local box's own file with no word to the host (FUSE
// passthrough): a report of the file while an open writes it is held
// until the close records what the writes left, and is then their echo.
func TestLocalReportWhileWritingIsHeld(t *testing.T) {
	c, r, ws := localWriteCache(t)
	ctx := t.Context()
	h, _, err := c.Create(ctx, "f", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
	require.NoError(t, err)
	// As the kernel writes it: not through the handle.
	require.NoError(t, os.WriteFile(filepath.Join(ws, "f"), []byte("by the kernel"), 0o644))
	bfi, err := r.Lstat(ctx, filepath.Join(ws, "f"))
	require.NoError(t, err)
	before := c.Reports()
	c.Reported([]providers.Change{{Path: "f", Info: &bfi}}, false)
	assert.Equal(t, before, c.Reports(), "judged before the close")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	after := c.Reports()
	assert.Equal(t, before.Echoes+1, after.Echoes, "the report is the writes' echo")
	assert.Equal(t, before.Taken, after.Taken)
	fi, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.EqualValues(t, len("by the kernel"), fi.Size)
}

// A report of the kernel's writes that comes between the close (FLUSH,
// which records what they left) and the release (RELEASE, which ends the
// open writing the box's file) is held as any report while the file is
// written; the release judges it, and it is the writes' echo. So is the
// report of the backing file's close that the release brings.
func TestLocalReportBetweenCloseAndReleaseIsEcho(t *testing.T) {
	c, r, ws := localWriteCache(t)
	ctx := t.Context()
	h, _, err := c.Create(ctx, "f", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "f"), []byte("by the kernel"), 0o644))
	require.NoError(t, h.Flush(ctx))
	bfi, err := r.Lstat(ctx, filepath.Join(ws, "f"))
	require.NoError(t, err)
	before := c.Reports()
	c.Reported([]providers.Change{{Path: "f", Info: &bfi}}, false)
	h.Release(ctx)
	after := c.Reports()
	assert.Equal(t, before.Echoes+1, after.Echoes, "the report before the release is the writes' echo")
	assert.Equal(t, before.Taken, after.Taken, "reports taken")
	c.Reported([]providers.Change{{Path: "f", Info: &bfi}}, false)
	last := c.Reports()
	assert.Equal(t, after.Echoes+1, last.Echoes, "the report after the release is their echo")
	assert.Equal(t, before.Taken, last.Taken, "reports taken")
}

// Two opens of one file, one writing: both use the box's file, so each
// sees the other's writes at once, and a truncating open cuts the box's
// file when it opens.
func TestLocalOpensShareTheBoxFile(t *testing.T) {
	c, _, ws := localWriteCache(t)
	ctx := t.Context()
	require.NoError(t, os.WriteFile(filepath.Join(ws, "f"), []byte("0123456789"), 0o644))
	w, _, err := c.OpenFile(ctx, "f", syscall.O_RDWR)
	require.NoError(t, err)
	rd, _, err := c.OpenFile(ctx, "f", syscall.O_RDONLY)
	require.NoError(t, err)
	_, err = w.WriteAt([]byte("ab"), 2)
	require.NoError(t, err)
	buf := make([]byte, 10)
	n, err := rd.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "01ab456789", string(buf[:n]), "the reader after the writer's write")
	require.NoError(t, w.Truncate(4))
	n, err = rd.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "01ab", string(buf[:n]), "after ftruncate")
	rd.Release(ctx)
	w.Release(ctx)

	tr, _, err := c.OpenFile(ctx, "f", syscall.O_WRONLY|syscall.O_TRUNC)
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(ws, "f"))
	require.NoError(t, err)
	assert.EqualValues(t, 0, st.Size(), "the box's file after a truncating open")
	fi, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.EqualValues(t, 0, fi.Size)
	tr.Release(ctx)
}

// A file removed while open is written on with no name, as on a disk:
// its writes do not bring the name back.
func TestLocalWriteAfterUnlink(t *testing.T) {
	c, _, ws := localWriteCache(t)
	ctx := t.Context()
	h, _, err := c.Create(ctx, "f", syscall.O_CREAT|syscall.O_RDWR|syscall.O_EXCL, 0o644)
	require.NoError(t, err)
	require.NoError(t, c.Remove(ctx, "f"))
	_, err = h.WriteAt([]byte("after"), 0)
	require.NoError(t, err)
	buf := make([]byte, 8)
	n, err := h.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "after", string(buf[:n]))
	_, err = c.Getattr(ctx, "f")
	assert.True(t, providers.IsCode(err, providers.NotFound), "stat of the removed name: %v", err)
	_, err = os.Stat(filepath.Join(ws, "f"))
	assert.True(t, os.IsNotExist(err), "the box's name: %v", err)
	h.Release(ctx)
}

// In write-behind the host's copy takes the writes and the box has them
// only at a barrier: a local box's own file is not written before.
func TestLocalWriteBehindKeepsTheCopy(t *testing.T) {
	lp := local.New(t.TempDir())
	box, err := lp.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { box.Destroy(t.Context()) })
	facts, err := box.Facts(t.Context())
	require.NoError(t, err)
	c, err := cache.Open(box.(cache.Remote), cache.Options{Dir: t.TempDir(), Root: facts.Workspace, Box: "test", WriteBehind: true})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	h, _, err := c.Create(ctx, "f", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("later"), 0)
	require.NoError(t, err)
	b, _ := os.ReadFile(filepath.Join(facts.Workspace, "f"))
	assert.Empty(t, b, "the box before a barrier")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	require.NoError(t, c.FlushAll(ctx))
	b, err = os.ReadFile(filepath.Join(facts.Workspace, "f"))
	require.NoError(t, err)
	assert.Equal(t, "later", string(b))
}
