package cache_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// countingRemote counts the listings and stats the cache asks of the box;
// hold, when set, is called inside ReadDir after the box answered and
// before the answer is returned (a fetch in flight).
type countingRemote struct {
	cache.Remote
	mu    sync.Mutex
	asked int
	hold  func()
}

func (r *countingRemote) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.asked
	r.asked = 0
	return n
}

func (r *countingRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	r.mu.Lock()
	r.asked++
	hold := r.hold
	r.hold = nil
	r.mu.Unlock()
	list, err := r.Remote.ReadDir(ctx, name)
	if hold != nil {
		hold()
	}
	return list, err
}

func (r *countingRemote) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	r.mu.Lock()
	r.asked++
	r.mu.Unlock()
	return r.Remote.Lstat(ctx, name)
}

// While the watch is healthy (Trust), what the cache fetched stays fresh
// past the attribute timeout with no round trip, until a report says
// otherwise; a listing in flight while a change is reported (its answer
// older than the change) is not trusted past the timeout; what was
// fetched before the watch was healthy, or once it is not, is asked again
// after the timeout.
func TestTrustWhileWatched(t *testing.T) {
	_, _, box := fakeBox(t)
	r := &countingRemote{Remote: box}
	var mu sync.Mutex
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Second, WalkMax: -1, Now: clock})
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()
	names := func() map[string]bool { t.Helper(); return rootNames(t, c) }
	boxWrite(t, r, "f", "1")

	// Fetched before the watch is healthy: the timeout holds.
	names()
	c.Trust(true)
	advance(2 * time.Second)
	r.count()
	names()
	assert.Equal(t, 1, r.count(), "a listing from before the watch was set is asked again")

	// Fetched while it is: trusted for an hour, the names and their
	// attributes, a missing name too.
	advance(time.Hour)
	assert.True(t, names()["f"])
	_, err = c.Getattr(ctx, "f")
	require.NoError(t, err)
	_, err = c.Lookup(ctx, "nothing")
	assert.Error(t, err)
	assert.Equal(t, 0, r.count(), "round trips while the watch is healthy")

	// A reported change is asked again at once.
	boxWrite(t, r, "g", "g")
	c.BoxChanged([]string{"g"}, false)
	assert.True(t, names()["g"])
	assert.Equal(t, 1, r.count())
	advance(time.Hour)
	names()
	assert.Equal(t, 0, r.count(), "the new listing is trusted again")

	// A listing in flight when a change is reported: its answer, older
	// than the change, is shown for the timeout only.
	boxWrite(t, r, "h", "h")
	c.BoxChanged([]string{"h"}, false)
	r.mu.Lock()
	r.hold = func() {
		boxWrite(t, r, "i", "i")
		c.BoxChanged([]string{"i"}, false)
	}
	r.mu.Unlock()
	got := names()
	assert.True(t, got["h"])
	assert.False(t, got["i"], "the listing was taken before i was made")
	r.count()
	advance(2 * time.Second)
	assert.True(t, names()["i"], "the listing from before the report is asked again after the timeout")
	assert.Equal(t, 1, r.count())

	// A change reported late (the listing was fetched after the change,
	// or before it, and trusted): the listing is asked again at the
	// report, not before.
	boxWrite(t, r, "j", "j")
	advance(time.Hour)
	r.count()
	assert.False(t, names()["j"], "a trusted listing is not asked again before the report")
	c.BoxChanged([]string{"j"}, false)
	assert.True(t, names()["j"])
	assert.Equal(t, 1, r.count())

	// The watch lost changes: the timeout holds again.
	c.Trust(false)
	advance(2 * time.Second)
	names()
	assert.Equal(t, 1, r.count())
}

// rootNames lists the workspace's root through the cache.
func rootNames(t *testing.T, c *cache.Cache) map[string]bool {
	t.Helper()
	list, err := c.ReadDir(t.Context(), "")
	require.NoError(t, err)
	m := map[string]bool{}
	for _, fi := range list {
		m[fi.Name] = true
	}
	return m
}

// A listing asked before a command ended and answered after the refresh
// that follows the command was installed is older than that refresh: it
// does not bring back a file the command removed, nor hide one it made,
// whether or not a watch runs.
func TestOlderListingAfterRefresh(t *testing.T) {
	for _, watched := range []bool{false, true} {
		_, _, box := fakeBox(t)
		r := &countingRemote{Remote: box}
		c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Minute, WalkMax: -1})
		require.NoError(t, err)
		if watched {
			c.Trust(true)
		}
		ctx := t.Context()
		boxWrite(t, r, "gone", "1")
		assert.Equal(t, map[string]bool{"gone": true}, rootNames(t, c))
		c.Invalidate()
		r.mu.Lock()
		r.hold = func() {
			// The box answered the listing; now the command runs and
			// ends, and its refresh is installed before the listing.
			require.NoError(t, r.Remove(ctx, root+"/gone"))
			boxWrite(t, r, "made", "2")
			ch, err := c.Refresh(ctx)
			require.NoError(t, err)
			assert.Equal(t, []string{"made"}, ch.Added)
			assert.Equal(t, []string{"gone"}, ch.Removed)
		}
		r.mu.Unlock()

		list, err := c.ReadDir(ctx, "")
		require.NoError(t, err)
		var got []string
		for _, fi := range list {
			got = append(got, fi.Name)
		}
		assert.Equal(t, []string{"made"}, got, "watched=%v: the listing answered is the refresh's", watched)
		assert.Equal(t, map[string]bool{"made": true}, rootNames(t, c), "watched=%v", watched)
		_, err = c.Lookup(ctx, "gone")
		assert.True(t, providers.IsCode(err, providers.NotFound), "watched=%v: %v", watched, err)
		fi, err := c.Lookup(ctx, "made")
		require.NoError(t, err)
		assert.EqualValues(t, 1, fi.Size)
		require.NoError(t, c.Close())
	}
}
