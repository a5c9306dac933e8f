package cache_test

import (
	"context"
	"fmt"
	"path"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// wideBox is a fake box with directories of its own at the workspace's
// top, each of n entries made up as it is listed; it counts the listings
// asked of each.
type wideBox struct {
	cache.Remote
	n map[string]int // name under root -> entries

	mu    sync.Mutex
	asked map[string]int
}

func newWideBox(t *testing.T, n map[string]int) *wideBox {
	_, _, r := fakeBox(t)
	return &wideBox{Remote: r, n: n, asked: map[string]int{}}
}

func (w *wideBox) dir(name string) (string, bool) {
	if path.Dir(name) != root {
		return "", false
	}
	_, ok := w.n[path.Base(name)]
	return path.Base(name), ok
}

func (w *wideBox) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	d, ok := w.dir(name)
	if !ok {
		out, err := w.Remote.ReadDir(ctx, name)
		if err == nil && name == root {
			for d := range w.n {
				fi, _ := w.Lstat(ctx, path.Join(root, d))
				out = append(out, fi)
			}
		}
		return out, err
	}
	w.mu.Lock()
	w.asked[d]++
	w.mu.Unlock()
	out := make([]providers.FileInfo, w.n[d])
	for i := range out {
		out[i] = w.entry(i)
	}
	return out, nil
}

func (w *wideBox) entry(i int) providers.FileInfo {
	return providers.FileInfo{Name: fmt.Sprintf("file-%07d.txt", i), Mode: 0o644, Size: int64(i),
		Mtime: time.Unix(1700000000, int64(i)), Nlink: 1, Ino: uint64(1000 + i), UID: 1000, GID: 1000}
}

func (w *wideBox) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	if d, ok := w.dir(name); ok {
		return providers.FileInfo{Name: d, Mode: 0o755 | providers.FileMode(1<<31), Mtime: time.Unix(1700000000, 0), Nlink: 2, Ino: 7}, nil
	}
	var i int
	if _, ok := w.dir(path.Dir(name)); ok {
		if _, err := fmt.Sscanf(path.Base(name), "file-%07d.txt", &i); err == nil {
			return w.entry(i), nil
		}
	}
	return w.Remote.Lstat(ctx, name)
}

func (w *wideBox) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	return w.Lstat(ctx, name)
}

func (w *wideBox) listed(d string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.asked[d]
}

// A listing of more entries than a listing may hold is TooLarge (EFBIG),
// and nothing of it is kept; one at the cap is listed.
func TestListingOverTheCapIsTooLarge(t *testing.T) {
	w := newWideBox(t, map[string]int{"big": 1001, "ok": 1000})
	c, err := cache.Open(w, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", MaxListing: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.ReadDir(t.Context(), "big")
	require.Error(t, err)
	assert.Equal(t, providers.TooLarge, providers.CodeOf(err), "%v", err)
	list, err := c.ReadDir(t.Context(), "ok")
	require.NoError(t, err)
	assert.Len(t, list, 1000)
	_, err = c.ReadDir(t.Context(), "big")
	require.Error(t, err)
	assert.Equal(t, 2, w.listed("big"), "nothing of it was kept")
	fi, err := c.Lookup(t.Context(), "big/file-0000042.txt")
	require.NoError(t, err, "a name in it is looked up alone")
	assert.Equal(t, int64(42), fi.Size)
	assert.Equal(t, 2, w.listed("big"), "with no listing")
}

// Past the bound on the entries all listings hold, the least recently
// used listings are forgotten and asked of the box again at their next
// use; the ones in use stay.
func TestListingsPastTheBoundAreForgotten(t *testing.T) {
	n := map[string]int{}
	for i := range 5 {
		n[fmt.Sprintf("d%d", i)] = 3000
	}
	w := newWideBox(t, n)
	c, err := cache.Open(w, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", MaxEntries: 10_000, AttrTimeout: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	for i := range 5 {
		d := fmt.Sprintf("d%d", i)
		list, err := c.ReadDir(t.Context(), d)
		require.NoError(t, err)
		require.Len(t, list, 3000)
		if i == 2 {
			// d0 is used again: d1 and d2 are now the least recent.
			_, err := c.ReadDir(t.Context(), "d0")
			require.NoError(t, err)
		}
	}
	// d3 took the listings to 12,000 entries: d1 and d2 were forgotten,
	// down to 7,500 at most.
	for _, d := range []string{"d0", "d3", "d4", "d1", "d2"} {
		want := 1
		if d == "d1" || d == "d2" {
			want = 2
		}
		_, err := c.ReadDir(t.Context(), d)
		require.NoError(t, err)
		assert.Equal(t, want, w.listed(d), "listings of %s asked of the box", d)
	}
	fi, err := c.Getattr(t.Context(), "d2/file-0000007.txt")
	require.NoError(t, err, "a forgotten name is asked of the box")
	assert.Equal(t, int64(7), fi.Size)
}

// memoryNow is, once collected, the live heap and the memory the Go
// runtime holds from the OS (what a daemon's RSS follows).
func memoryNow() (live, held int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.Sys - ms.HeapReleased)
}

// What a box lists cannot make the daemon hold more than the bounds: a
// million-entry directory is refused and its memory given back, and many
// large listings are held to MaxEntries, the memory of the forgotten ones
// given back.
func TestListingMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("lists 1,400,000 entries")
	}
	n := map[string]int{"million": 1_000_000}
	for i := range 4 {
		n[fmt.Sprintf("w%d", i)] = 100_000
	}
	w := newWideBox(t, n)
	c, err := cache.Open(w, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	idleLive, idle := memoryNow()

	_, err = c.ReadDir(t.Context(), "million")
	assert.Equal(t, providers.TooLarge, providers.CodeOf(err), "%v", err)
	_, refused := memoryNow()
	t.Logf("idle: %d MiB held, %d KiB live; after a 1,000,000-entry listing was refused: %d MiB held", idle>>20, idleLive>>10, refused>>20)
	assert.LessOrEqual(t, refused, idle+idle/5, "back within 20%% of idle")

	// MaxEntries is 200,000: two listings of 100,000 at most are held; the
	// third (w2) makes the two least recent go (down to 150,000 at most),
	// and the fourth is held beside it.
	var one int64
	for i := range 4 {
		_, err := c.ReadDir(t.Context(), fmt.Sprintf("w%d", i))
		require.NoError(t, err)
		live, held := memoryNow()
		if i == 0 {
			one = live - idleLive
		}
		t.Logf("after listing w%d (100,000 entries): %d MiB live, %d MiB held; %d bytes an entry of the first", i, live>>20, held>>20, one/100_000)
		assert.LessOrEqual(t, live-idleLive, 2*one+one/10, "at most two listings' worth")
		if i == 2 {
			assert.LessOrEqual(t, live-idleLive, one+one/10, "the forgotten listings' memory is back")
		}
	}
}

// cappedBox is a wideBox that refuses, as an agent or a local box does, to
// list a directory past the cap it is given: it sends none of it.
type cappedBox struct {
	*wideBox
	caps []int // the caps it was asked with
}

func (b *cappedBox) ReadDirMax(ctx context.Context, name string, max int) ([]providers.FileInfo, error) {
	b.mu.Lock()
	b.caps = append(b.caps, max)
	b.mu.Unlock()
	if d, ok := b.dir(name); ok && b.n[d] > max {
		return nil, providers.Errorf(providers.TooLarge, "box.ReadDir", "more than %d entries", max)
	}
	return b.ReadDir(ctx, name)
}

// A box that can refuse a listing past the cap is asked with the cap, so
// the daemon never holds the whole of a huge directory: its refusal is the
// listing's TooLarge, and a lookup in the directory stats the one name.
func TestListingCappedAtTheBox(t *testing.T) {
	b := &cappedBox{wideBox: newWideBox(t, map[string]int{"big": 1001, "ok": 1000})}
	c, err := cache.Open(b, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", MaxListing: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.ReadDir(t.Context(), "big")
	assert.Equal(t, providers.TooLarge, providers.CodeOf(err), "%v", err)
	assert.Equal(t, 0, b.listed("big"), "the box sent the listing past the cap")
	list, err := c.ReadDir(t.Context(), "ok")
	require.NoError(t, err)
	assert.Len(t, list, 1000)
	for _, max := range b.caps {
		assert.Equal(t, 1000, max, "asked with a cap other than MaxListing")
	}
	fi, err := c.Lookup(t.Context(), "big/file-0000999.txt")
	require.NoError(t, err)
	assert.Equal(t, int64(999), fi.Size)
}
