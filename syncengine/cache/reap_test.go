package cache_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// The copies of removed files leave the host's disk: at once in the
// background, and all of them by the time the cache is closed.
func TestRemovedFilesLeaveTheHostDisk(t *testing.T) {
	_, _, r := fakeBox(t)
	dir := t.TempDir()
	c, err := cache.Open(r, cache.Options{Dir: dir, Root: root, Box: "test", AttrTimeout: time.Hour})
	require.NoError(t, err)
	ctx := t.Context()
	copies := func() int {
		ents, err := os.ReadDir(filepath.Join(dir, "data"))
		require.NoError(t, err)
		return len(ents)
	}
	const n = 200
	for i := range n {
		write(t, c, fmt.Sprintf("f%d", i), "host").Release(ctx)
	}
	require.Equal(t, n, copies(), "a copy per written file")
	for i := range n {
		require.NoError(t, c.Remove(ctx, fmt.Sprintf("f%d", i)))
	}
	assert.Eventually(t, func() bool { return copies() == 0 }, 5*time.Second, 10*time.Millisecond, "copies left after rm")
	for i := range n {
		write(t, c, fmt.Sprintf("g%d", i), "host").Release(ctx)
		require.NoError(t, c.Remove(ctx, fmt.Sprintf("g%d", i)))
	}
	require.NoError(t, c.Close())
	assert.Equal(t, 0, copies(), "copies left after Close")
}
