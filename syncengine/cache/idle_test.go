package cache_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// A listing nothing used for ListingIdle is forgotten (its memory handed
// back) and the next use lists the directory again; one used within it
// stays.
func TestIdleListingsForgotten(t *testing.T) {
	p, _, r := fakeBox(t)
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Now: clock,
		AttrTimeout: time.Hour, ListingIdle: 10 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	for _, d := range []string{"idle", "used"} {
		require.NoError(t, r.Mkdir(ctx, root+"/"+d, 0o755))
		for i := range 50 {
			boxWrite(t, r, fmt.Sprintf("%s/f%02d", d, i), "x")
		}
	}
	lists := func(dir string) int {
		p.ResetCalls()
		fis, err := c.ReadDir(ctx, dir)
		require.NoError(t, err)
		require.Len(t, fis, 50)
		return len(p.CallsOf("ReadDir")) + len(p.CallsOf("ReadDirMax"))
	}
	assert.Equal(t, 1, lists("idle"))
	assert.Equal(t, 1, lists("used"))
	assert.Zero(t, c.ForgetIdle(), "nothing is idle yet")

	advance(6 * time.Minute)
	assert.Equal(t, 0, lists("used"), "answered from the listing")
	advance(6 * time.Minute)
	assert.Equal(t, 50, c.ForgetIdle(), "the idle directory's 50 entries")
	assert.Equal(t, 0, lists("used"), "used 6 minutes ago: kept")
	assert.Equal(t, 1, lists("idle"), "forgotten: listed again")
}
