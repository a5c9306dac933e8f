package cache_test

import (
	"context"
	"fmt"
	"path"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// watchedCache opens a watched cache over r that trusts what it learnt
// for an hour, on a fake clock that only advance moves.
func watchedCache(t *testing.T, r cache.Remote) (*cache.Cache, func(time.Duration)) {
	t.Helper()
	var mu sync.Mutex
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour, Now: clock})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, advance
}

// A watch's report makes the cache ask the box again about a path it
// trusts (here for an hour); the echo of the host's own change is dropped
// by its attributes, and a box change right after it is taken at once.
func TestBoxChangedReports(t *testing.T) {
	_, _, r := fakeBox(t)
	c, _ := watchedCache(t, r)
	ctx := t.Context()
	size := func(rel string) int64 {
		t.Helper()
		fi, err := c.Getattr(ctx, rel)
		if err != nil {
			return -1
		}
		return fi.Size
	}
	names := func() map[string]bool { t.Helper(); return rootNames(t, c) }

	boxWrite(t, r, "f", "1")
	names()
	if size("f") != 1 {
		t.Fatal("f not seen")
	}
	boxWrite(t, r, "f", "22")
	boxWrite(t, r, "g", "g")
	if size("f") != 1 || names()["g"] {
		t.Fatal("the cache asked the box within the attribute timeout; the test shows nothing")
	}
	if got := c.BoxChanged([]string{"f", "g"}, false); len(got) != 2 {
		t.Errorf("BoxChanged = %q, want both", got)
	}
	if size("f") != 2 || !names()["g"] {
		t.Errorf("after the report: f is %d bytes, names %v", size("f"), names())
	}

	// The host writes h: the watch's report of it, with the attributes
	// the box shows, is the echo of that write, dropped (F-echo). The box
	// then writes h: that report is taken at once.
	hostWrite(t, c, "h", "host")
	if got := c.Reported([]providers.Change{boxChange(t, r, "h")}, false); len(got) != 0 {
		t.Errorf("the echo of the host's own write was taken: %q", got)
	}
	boxWrite(t, r, "h", "the box's")
	if got := c.Reported([]providers.Change{boxChange(t, r, "h")}, false); len(got) != 1 {
		t.Errorf("a report of the box's write right after the host's was not taken: %q", got)
	}
	if size("h") != int64(len("the box's")) {
		t.Errorf("h is %d bytes after the report of the box's write", size("h"))
	}
	if rc := c.Reports(); rc.Echoes != 1 || rc.Taken != 3 {
		t.Errorf("Reports = %+v, want 1 echo and 3 taken", rc)
	}

	// all: everything is asked again.
	boxWrite(t, r, "f", "333")
	c.BoxChanged(nil, true)
	if size("f") != 3 {
		t.Errorf("after a report of lost changes f is %d bytes", size("f"))
	}
}

// hostWrite writes name through the cache and closes it.
func hostWrite(t *testing.T, c *cache.Cache, name, data string) {
	t.Helper()
	h, _, err := c.Create(t.Context(), name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte(data), 0)
	require.NoError(t, err)
	require.NoError(t, h.Flush(t.Context()))
	h.Release(t.Context())
}

// boxChange is the watch's report of name as the box shows it now, with
// its attributes (gone when it is missing), as the agent sends it.
func boxChange(t *testing.T, r cache.Remote, name string) providers.Change {
	t.Helper()
	fi, err := r.Lstat(t.Context(), path.Join(root, name))
	if err != nil {
		require.True(t, providers.IsCode(err, providers.NotFound), "%v", err)
		return providers.Change{Path: name, Gone: true}
	}
	return providers.Change{Path: name, Info: &fi}
}

// A burst of the host's own writes, created, replaced and removed, comes
// back as reports with the box's attributes: every echo is dropped with
// no round trip, and the box's one change among them is taken (F-echo).
// A report without attributes is taken whatever the host did (it cannot
// be told from a box change).
func TestEchoesDroppedByAttributes(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &renameStater{Remote: inner}
	c, _ := watchedCache(t, r)
	ctx := t.Context()
	_, err := c.Mkdir(ctx, "d", 0o755)
	require.NoError(t, err)
	var reports []providers.Change
	for i := range 300 {
		name := fmt.Sprintf("d/f%d", i)
		hostWrite(t, c, name, "host")
		if i%3 == 0 {
			hostWrite(t, c, name, "host, again") // a replaced file
		}
		if i%10 == 9 {
			require.NoError(t, c.Remove(ctx, name))
		}
	}
	boxWrite(t, r, "d/f7", "the box's")
	for i := range 300 {
		reports = append(reports, boxChange(t, r, fmt.Sprintf("d/f%d", i)))
	}
	stats := r.stats.Load()
	got := c.Reported(reports, false)
	assert.Equal(t, []string{"d/f7"}, got, "reports taken")
	assert.Equal(t, cache.ReportCounts{Taken: 1, Echoes: 299}, c.Reports())
	fi, err := c.Getattr(ctx, "d/f7")
	require.NoError(t, err)
	assert.Equal(t, int64(len("the box's")), fi.Size, "d/f7 after the report")
	fi, err = c.Getattr(ctx, "d/f3")
	require.NoError(t, err)
	assert.Equal(t, int64(len("host, again")), fi.Size)
	assert.EqualValues(t, 1, r.stats.Load()-stats, "stats asked: only the box's change is asked again")

	// Without attributes the report is taken.
	assert.Equal(t, []string{"d/f1"}, c.BoxChanged([]string{"d/f1"}, false))
}

// A report that comes while the host's own change of its path is in
// flight is judged once that change is recorded: one of a box change
// right after the host's is taken, and the path is asked again, so the
// box's change shows (F-watch).
func TestReportDuringHostChange(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &hookedLstat{renameStater: &renameStater{Remote: inner}, name: "h"}
	c, _ := watchedCache(t, r)
	ctx := t.Context()
	r.hook = func() {
		// The host's create of h has reached the box; before its answer
		// is recorded the box writes h, and the watch says so.
		boxWrite(t, inner, "h", "the box's")
		assert.Equal(t, []string{"h"}, c.Reported([]providers.Change{boxChange(t, inner, "h")}, false))
	}
	h, _, err := c.Create(ctx, "h", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
	require.NoError(t, err)
	h.Release(ctx)
	assert.Equal(t, cache.ReportCounts{Taken: 1}, c.Reports())
	fi, err := c.Getattr(ctx, "h")
	require.NoError(t, err)
	assert.Equal(t, int64(len("the box's")), fi.Size, "h after the host's create and the box's write")
}

// The watch's report of the state the host's own change left often comes
// before the change's answer (the two come by separate ways): it is held
// until the change records that state, then dropped as its echo, with no
// round trip (F-echo).
func TestEchoBeforeHostChangeEnds(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &hookedLstat{renameStater: &renameStater{Remote: inner}, name: "h"}
	c, _ := watchedCache(t, r)
	ctx := t.Context()
	r.hook = func() {
		c.Reported([]providers.Change{boxChange(t, inner, "h")}, false)
		assert.Equal(t, cache.ReportCounts{}, c.Reports(), "judged before the change ends")
	}
	h, _, err := c.Create(ctx, "h", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
	require.NoError(t, err)
	h.Release(ctx)
	assert.Equal(t, cache.ReportCounts{Echoes: 1}, c.Reports())
	stats := r.stats.Load()
	_, err = c.Getattr(ctx, "h")
	require.NoError(t, err)
	assert.EqualValues(t, 0, r.stats.Load()-stats, "stats asked after the echo")
}

// hookedLstat runs a hook inside Lstat of one name, once: a box that
// changes while a call of the host is in flight.
type hookedLstat struct {
	*renameStater
	name string
	hook func()
}

func (h *hookedLstat) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	fi, err := h.renameStater.Lstat(ctx, name)
	if hook := h.hook; hook != nil && path.Base(name) == h.name {
		h.hook = nil
		hook()
	}
	return fi, err
}
