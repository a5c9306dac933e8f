package cache_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// dirBytes is the size of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// Reading many files through a cache with a budget keeps the copies on
// the host within it (one file being read more, at most): the least
// recently used clean copies go, and are fetched again when opened. A
// copy holding writes the box lacks is never removed.
func TestBudgetBoundsTheCopies(t *testing.T) {
	_, _, r := fakeBox(t)
	const size, n, max = 4096, 40, 5 * 4096
	for i := range n {
		boxWrite(t, r, fmt.Sprintf("f%02d", i), strings.Repeat(string(rune('a'+i%26)), size))
	}
	dir := t.TempDir()
	budget := cache.NewBudget(max)
	c, err := cache.Open(r, cache.Options{Dir: dir, Root: root, Box: "test", Budget: budget})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	dirty, _, err := c.OpenFile(t.Context(), "f00", syscall.O_RDWR)
	require.NoError(t, err)
	_, err = dirty.WriteAt([]byte("host"), 0)
	require.NoError(t, err)
	for round := range 2 {
		for i := 1; i < n; i++ {
			got, _ := read(t, c, fmt.Sprintf("f%02d", i))
			require.Equal(t, strings.Repeat(string(rune('a'+i%26)), size), got, "round %d, file %d", round, i)
			assert.LessOrEqual(t, dirBytes(t, filepath.Join(dir, "data")), int64(max+2*size), "host disk after file %d", i)
			assert.LessOrEqual(t, budget.Used(), int64(max+size))
		}
	}
	require.NoError(t, dirty.Flush(t.Context()))
	dirty.Release(t.Context())
	assert.Equal(t, "host"+strings.Repeat("a", size-4), boxRead(t, r, "f00"), "the dirty copy survived")
}
