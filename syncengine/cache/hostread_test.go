package cache_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// localCache opens a cache over a local box, whose files are the host's.
func localCache(t *testing.T) (*cache.Cache, string, string) {
	t.Helper()
	lp := local.New(t.TempDir())
	box, err := lp.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { box.Destroy(t.Context()) })
	facts, err := box.Facts(t.Context())
	require.NoError(t, err)
	dir := t.TempDir()
	c, err := cache.Open(box.(cache.Remote), cache.Options{Dir: dir, Root: facts.Workspace, Box: "test"})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, facts.Workspace, dir
}

// On a box whose files are the host's, a read takes no copy; a writer
// that opens the file meanwhile is seen by the reader at once (both use
// the box's file), and a file the box replaces is read anew.
func TestHostFilesReadWithoutACopy(t *testing.T) {
	c, ws, dir := localCache(t)
	ctx := t.Context()
	require.NoError(t, os.WriteFile(filepath.Join(ws, "f"), []byte("box one"), 0o644))
	got, _ := read(t, c, "f")
	assert.Equal(t, "box one", got)
	ents, _ := os.ReadDir(filepath.Join(dir, "data"))
	assert.Empty(t, ents, "copies in the cache after a read")

	r, _, err := c.OpenFile(ctx, "f", syscall.O_RDONLY)
	require.NoError(t, err)
	defer r.Release(ctx)
	w, _, err := c.OpenFile(ctx, "f", syscall.O_RDWR)
	require.NoError(t, err)
	_, err = w.WriteAt([]byte("HOST"), 0)
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := r.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "HOSTone", string(buf[:n]), "the reader sees the writer's bytes before the close")
	require.NoError(t, w.Flush(ctx))
	w.Release(ctx)
	b, _ := os.ReadFile(filepath.Join(ws, "f"))
	assert.Equal(t, "HOSTone", string(b))
	ents, _ = os.ReadDir(filepath.Join(dir, "data"))
	assert.Empty(t, ents, "copies in the cache after a write")

	require.NoError(t, os.WriteFile(filepath.Join(ws, "g"), []byte("old"), 0o644))
	g, _, err := c.OpenFile(ctx, "g", syscall.O_RDONLY)
	require.NoError(t, err)
	defer g.Release(ctx)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "g.new"), []byte("new, longer"), 0o644))
	require.NoError(t, os.Rename(filepath.Join(ws, "g.new"), filepath.Join(ws, "g")))
	c.Forget("g")
	renewed, err := g.Renew(ctx)
	require.NoError(t, err)
	assert.True(t, renewed, "the box replaced the file")
	n, err = g.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "new, longer", string(buf[:n]))
}
