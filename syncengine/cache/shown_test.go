package cache_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// What the host reported of a file it wrote, from an fstat before the
// close (git does so for each file a checkout writes, and records it in
// the index), stays what it reports once the push landed and the box is
// asked again: the access, modification and change times and the size, though
// the box's clock had moved past a second boundary by the push. A change
// the box makes to the file afterwards shows.
func TestTimesReportedBeforeCloseStay(t *testing.T) {
	start := time.Date(2026, 12, 3, 0, 0, 0, 999_000_000, time.UTC)
	boxClock := fake.NewClock(start)
	p := fake.New(fake.WithClock(boxClock))
	box, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	r := &readCounter{Remote: box.(cache.Remote)}
	if err := r.Mkdir(t.Context(), root, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
		t.Fatal(err)
	}
	hostNow := start
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Second, Now: func() time.Time { return hostNow }})
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()

	h := write(t, c, "f", "checked out\n")
	before, ok := h.Attr()
	require.True(t, ok, "a dirty file's attributes are the host's")
	boxClock.Advance(5 * time.Millisecond) // the push lands in the next second
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)

	hostNow = hostNow.Add(2 * time.Second) // past the attribute timeout: the box is asked
	after, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.True(t, after.Mtime.Equal(before.Mtime), "mtime %v, before the close %v", after.Mtime, before.Mtime)
	assert.True(t, after.Ctime.Equal(before.Ctime), "ctime %v, before the close %v", after.Ctime, before.Ctime)
	assert.True(t, after.Atime.Equal(before.Atime), "atime %v, before the close %v", after.Atime, before.Atime)
	assert.Equal(t, before.Size, after.Size)
	list, err := c.ReadDir(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 1)
	got, _ := read(t, c, "f")
	assert.Equal(t, "checked out\n", got)
	assert.Zero(t, r.reads.Load(), "the content pushed is still the box's: no fetch")
	assert.True(t, list[0].Ctime.Equal(before.Ctime), "listed ctime %v, before the close %v", list[0].Ctime, before.Ctime)

	// The box changes the file's mode: its own change time shows.
	boxClock.Advance(time.Second)
	require.NoError(t, r.Chmod(ctx, root+"/f", 0o755))
	hostNow = hostNow.Add(2 * time.Second)
	changed, err := c.Getattr(ctx, "f")
	require.NoError(t, err)
	assert.True(t, changed.Ctime.After(before.Ctime.Add(time.Second)), "ctime after the box's chmod %v", changed.Ctime)
}

// readCounter counts the file contents the cache fetches.
type readCounter struct {
	cache.Remote
	reads atomic.Int32
}

func (r *readCounter) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	r.reads.Add(1)
	return r.Remote.ReadFile(ctx, name)
}

// A chmod, chown or utimes of a file the host wrote answers with the times
// the host reports of it, as Getattr does: the kernel keeps that answer as
// the file's attributes, and a chmod that seemed to move the modification
// time to the push's (the box's clock) would show tar, make or rsync a
// changed file (issue 37: TestPOSIXCompare on a Docker box). Only the
// change time moves.
func TestSetattrAnswersTheTimesShown(t *testing.T) {
	start := time.Date(2026, 12, 3, 0, 0, 0, 999_000_000, time.UTC)
	boxClock := fake.NewClock(start)
	p := fake.New(fake.WithClock(boxClock))
	box, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	r := box.(cache.Remote)
	if err := r.Mkdir(t.Context(), root, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
		t.Fatal(err)
	}
	hostNow := start
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Second, Now: func() time.Time { return hostNow }})
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()

	for _, op := range []struct {
		name string
		set  func(rel string) (providers.FileInfo, error)
	}{
		{"chmod", func(rel string) (providers.FileInfo, error) { return c.Chmod(ctx, rel, 0o600) }},
		{"chmod-same", func(rel string) (providers.FileInfo, error) { return c.Chmod(ctx, rel, 0o644) }},
		{"chown", func(rel string) (providers.FileInfo, error) { return c.Chown(ctx, rel, 0, 0) }},
		{"utimes-omit", func(rel string) (providers.FileInfo, error) { return c.Utimes(ctx, rel, time.Time{}, time.Time{}) }},
	} {
		t.Run("op="+op.name, func(t *testing.T) {
			h := write(t, c, op.name, "written here\n")
			boxClock.Advance(5 * time.Millisecond) // the push lands in the box's next second
			require.NoError(t, h.Flush(ctx))
			h.Release(ctx)
			before, err := c.Getattr(ctx, op.name)
			require.NoError(t, err)
			boxClock.Advance(time.Second)
			hostNow = hostNow.Add(time.Second)

			fi, err := op.set(op.name)
			require.NoError(t, err)
			assert.True(t, fi.Mtime.Equal(before.Mtime), "the answer's mtime %v, shown before %v", fi.Mtime, before.Mtime)
			after, err := c.Getattr(ctx, op.name)
			require.NoError(t, err)
			assert.True(t, after.Mtime.Equal(fi.Mtime), "getattr's mtime %v, the answer's %v", after.Mtime, fi.Mtime)
		})
	}
}

// The times the host reported of a file it wrote stay what it reports in
// the next process that opens the cache (a remount): git's index holds
// them, and a change time moved to the push's makes git read every file
// again at the next git status. A change the box makes since shows, and
// the record of the file then goes.
func TestTimesShownStayAcrossReopen(t *testing.T) {
	start := time.Date(2026, 12, 3, 0, 0, 0, 999_000_000, time.UTC)
	boxClock := fake.NewClock(start)
	p := fake.New(fake.WithClock(boxClock))
	box, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	r := &readCounter{Remote: box.(cache.Remote)}
	if err := r.Mkdir(t.Context(), root, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
		t.Fatal(err)
	}
	hostNow := start
	opts := cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Second, WriteBehind: true,
		BehindDelay: time.Hour, BehindMaxWait: time.Hour, // batches go at FlushAll alone
		Now: func() time.Time { return hostNow }}
	c, err := cache.Open(r, opts)
	require.NoError(t, err)
	ctx := t.Context()

	var before []providers.FileInfo
	for _, name := range []string{"a", "b"} {
		h := write(t, c, name, "checked out "+name+"\n")
		fi, ok := h.Attr()
		require.True(t, ok, "a dirty file's attributes are the host's")
		require.NoError(t, h.Flush(ctx))
		h.Release(ctx)
		before = append(before, fi)
	}
	boxClock.Advance(1500 * time.Millisecond) // the batch lands in a later second
	require.NoError(t, c.FlushAll(ctx))
	require.NoError(t, c.Close())

	same := func(c *cache.Cache, name string, want providers.FileInfo) {
		t.Helper()
		got, err := c.Getattr(ctx, name)
		require.NoError(t, err)
		assert.True(t, got.Mtime.Equal(want.Mtime), "%s: mtime %v, before the close %v", name, got.Mtime, want.Mtime)
		assert.True(t, got.Ctime.Equal(want.Ctime), "%s: ctime %v, before the close %v", name, got.Ctime, want.Ctime)
		assert.Equal(t, want.Size, got.Size)
	}
	hostNow = hostNow.Add(time.Minute)
	c, err = cache.Open(r, opts)
	require.NoError(t, err)
	same(c, "a", before[0])
	list, err := c.ReadDir(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 2)
	for i, fi := range list {
		assert.True(t, fi.Ctime.Equal(before[i].Ctime), "listed %s: ctime %v, before the close %v", fi.Name, fi.Ctime, before[i].Ctime)
	}
	got, _ := read(t, c, "b")
	assert.Equal(t, "checked out b\n", got)
	same(c, "b", before[1])

	// The box rewrites a: its own times show, in this process and the next.
	boxClock.Advance(time.Second)
	require.NoError(t, r.WriteFile(ctx, root+"/a", strings.NewReader("box's\n"), 0o644))
	hostNow = hostNow.Add(2 * time.Second)
	changed, err := c.Getattr(ctx, "a")
	require.NoError(t, err)
	assert.True(t, changed.Ctime.After(before[0].Ctime.Add(time.Second)), "ctime after the box's write %v", changed.Ctime)
	require.NoError(t, c.Close())
	c, err = cache.Open(r, opts)
	require.NoError(t, err)
	again, err := c.Getattr(ctx, "a")
	require.NoError(t, err)
	assert.True(t, again.Ctime.Equal(changed.Ctime), "ctime in the next process %v, the box's %v", again.Ctime, changed.Ctime)
	same(c, "b", before[1])

	// The host renames b: the file keeps the modification time shown, in
	// the next process too (the rename moved its change time in the box).
	require.NoError(t, c.Rename(ctx, "b", "c"))
	require.NoError(t, c.Close())
	c, err = cache.Open(r, opts)
	require.NoError(t, err)
	defer c.Close()
	moved, err := c.Getattr(ctx, "c")
	require.NoError(t, err)
	assert.True(t, moved.Mtime.Equal(before[1].Mtime), "c: mtime %v, b's before the close %v", moved.Mtime, before[1].Mtime)
}
