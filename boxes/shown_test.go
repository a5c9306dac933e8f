package boxes_test

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// The times a file showed on the host while its writes were queued
// (write=behind) are what it shows after a remount whose content cache was
// removed first, as a cold start removes it: they are not content. The
// box's change time is the push's, a second later; git, whose index holds
// the times shown, would read every file pushed again at the next git
// status. Destroying the box drops them.
func TestShownTimesOutliveTheContentCache(t *testing.T) {
	ctx := tctx(t)
	start := time.Date(2026, 12, 3, 0, 0, 0, 999_000_000, time.UTC)
	boxClock := fake.NewClock(start)
	fp := fake.New(fake.WithClock(boxClock))
	state := t.TempDir()
	var hostNow atomic.Int64
	hostNow.Store(start.UnixNano())
	open := func() *boxes.Manager {
		m, err := boxes.New(boxes.Options{
			StateDir:        state,
			DefaultProvider: "fake",
			OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
			WriteBehind:     true,
			OpTimeout:       5 * time.Second,
			Now:             func() time.Time { return time.Unix(0, hostNow.Load()).UTC() },
			Logger:          quiet(),
		})
		require.NoError(t, err)
		return m
	}

	m := open()
	require.NoError(t, m.Create(ctx, "b", "", providers.Spec{}))
	b, err := m.Box("b")
	require.NoError(t, err)
	_, c, err := b.Parts(ctx)
	require.NoError(t, err)
	h, _, err := c.Create(ctx, "f", syscall.O_WRONLY|syscall.O_CREAT, 0o644)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("checked out\n"), 0)
	require.NoError(t, err)
	before, ok := h.Attr()
	require.True(t, ok, "a dirty file's attributes are the host's")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	boxClock.Advance(5 * time.Millisecond) // the push lands in the box's next second
	require.NoError(t, b.Flush(ctx))
	require.NoError(t, m.Shutdown(ctx))

	boxFi, err := fp.Boxes()[0].Files().Lstat(ctx, "/work/f")
	require.NoError(t, err)
	require.False(t, boxFi.Ctime.Equal(before.Ctime), "the box's change time is the push's")
	require.NoError(t, os.RemoveAll(filepath.Join(state, "cache")))

	hostNow.Add(int64(2 * time.Second))
	m = open()
	b, err = m.Box("b")
	require.NoError(t, err)
	_, c, err = b.Parts(ctx)
	require.NoError(t, err)
	after, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.True(t, after.Ctime.Equal(before.Ctime), "ctime %v, before the close %v", after.Ctime, before.Ctime)
	assert.True(t, after.Mtime.Equal(before.Mtime), "mtime %v, before the close %v", after.Mtime, before.Mtime)
	assert.Equal(t, before.Size, after.Size)

	require.NoError(t, b.Destroy(ctx))
	left, err := os.ReadDir(filepath.Join(state, "shown"))
	require.NoError(t, err)
	assert.Empty(t, left, "the times shown of a destroyed box's files")
	require.NoError(t, m.Shutdown(ctx))
}
