package boxes_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// localManager is a manager over the local provider on a fresh state
// directory; opts sets the rest.
func localManager(t *testing.T, opts boxes.Options) (*boxes.Manager, string) {
	t.Helper()
	lp := local.New(t.TempDir())
	opts.StateDir = t.TempDir()
	opts.DefaultProvider = "local"
	opts.OpenProvider = func(string) (providers.Provider, error) { return lp, nil }
	opts.Logger = quiet()
	m, err := boxes.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		m.Shutdown(context.Background())
		bs, _ := lp.List(context.Background(), nil)
		for _, b := range bs {
			b.Destroy(context.Background())
		}
	})
	return m, opts.StateDir
}

// output runs line in b to its end and returns what it printed.
func output(t *testing.T, b *boxes.Box, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := b.Commands().Start(ctx, line)
	require.NoError(t, err)
	var out []byte
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := c.ReadAt(ctx, buf, off)
		require.NoError(t, err)
		if n == 0 {
			break
		}
		out = append(out, buf[:n]...)
		off += int64(n)
	}
	for c.Running() {
		time.Sleep(10 * time.Millisecond)
	}
	return string(out)
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// A new box of a forgotten box's name starts with no commands, and a box's
// command records and cache go when it is forgotten or destroyed.
func TestCommandsBelongToTheBox(t *testing.T) {
	ctx := context.Background()
	m, state := localManager(t, boxes.Options{})
	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	assert.Equal(t, "first\n", output(t, m.Lookup("a"), "echo first"))
	require.Len(t, entries(t, filepath.Join(state, "cmds")), 1)
	require.NoError(t, m.Forget(ctx, "a"))
	assert.Empty(t, entries(t, filepath.Join(state, "cmds")), "forget removes the command records")
	assert.Empty(t, entries(t, filepath.Join(state, "cache")), "forget removes a clean cache")

	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	b := m.Lookup("a")
	assert.Empty(t, b.Commands().List(), "a new box of the same name has no history")
	assert.Equal(t, "second\n", output(t, b, "echo second"))
	assert.Equal(t, []int{1}, b.Commands().List())
	require.NoError(t, b.Destroy(ctx))
	assert.Empty(t, entries(t, filepath.Join(state, "cmds")), "destroy removes the command records")
	assert.Empty(t, entries(t, filepath.Join(state, "cache")), "destroy removes the cache")
}
