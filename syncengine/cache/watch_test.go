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
	c.Watched()
	return c, advance
}

// A watch's report makes the cache ask the box again about a path it
// trusts (here for an hour); a report of a path the host just changed is
// held as the likely echo of that change until the host has left the path
// alone for a while, then taken like any other.
func TestBoxChangedReports(t *testing.T) {
	_, _, r := fakeBox(t)
	c, advance := watchedCache(t, r)
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

	// The host writes h; the box writes it right after.
	h, _, err := c.Create(ctx, "h", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	h.WriteAt([]byte("host"), 0)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	boxWrite(t, r, "h", "the box's")
	if got := c.BoxChanged([]string{"h"}, false); len(got) != 0 {
		t.Errorf("a report of what the host just wrote was taken at once: %q", got)
	}
	if size("h") != 4 {
		t.Errorf("h is %d bytes while the report is held", size("h"))
	}
	advance(time.Second)
	if due := c.DueEchoes(); len(due) != 0 {
		t.Errorf("DueEchoes a second later = %q", due)
	}
	advance(2 * time.Second)
	if due := c.DueEchoes(); len(due) != 1 || due[0] != "h" {
		t.Errorf("DueEchoes 3 s later = %q, want [h]", due)
	}
	if size("h") != int64(len("the box's")) {
		t.Errorf("h is %d bytes after its held report fell due", size("h"))
	}

	// all: everything is asked again.
	boxWrite(t, r, "f", "333")
	c.BoxChanged(nil, true)
	if size("f") != 3 {
		t.Errorf("after a report of lost changes f is %d bytes", size("f"))
	}
}

// A held report is checked with the box soon after the host's change: a
// change the box made right after the host's write shows at once, not
// after the echo window, and the check's answer serves the host's next
// look; a true echo is dropped without making anything stale, and does
// not fall due later.
func TestVerifyEchoes(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &renameStater{Remote: inner}
	c, advance := watchedCache(t, r)
	ctx := t.Context()
	hostWrite := func(name, data string) {
		t.Helper()
		h, _, err := c.Create(ctx, name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		h.WriteAt([]byte(data), 0)
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		h.Release(ctx)
	}
	size := func(rel string) int64 {
		t.Helper()
		fi, err := c.Getattr(ctx, rel)
		if err != nil {
			return -1
		}
		return fi.Size
	}

	hostWrite("h", "host")
	hostWrite("k", "host")
	boxWrite(t, r, "h", "the box's")
	if got := c.BoxChanged([]string{"h", "k"}, false); len(got) != 0 {
		t.Fatalf("reports of what the host just wrote were taken at once: %q", got)
	}
	if got := c.VerifyEchoes(ctx); len(got) != 0 {
		t.Errorf("checked before the host's answer settled: %q", got)
	}
	advance(30 * time.Millisecond)
	if got := c.VerifyEchoes(ctx); len(got) != 1 || got[0] != "h" {
		t.Errorf("VerifyEchoes = %q, want [h]", got)
	}
	stats := r.stats.Load()
	if size("h") != int64(len("the box's")) || size("k") != 4 {
		t.Errorf("after the check h is %d bytes, k %d", size("h"), size("k"))
	}
	if n := r.stats.Load() - stats; n != 0 {
		t.Errorf("the host's look after the check asked %d stats: the check's answer was not kept", n)
	}
	advance(3 * time.Second)
	if due := c.DueEchoes(); len(due) != 0 {
		t.Errorf("checked reports fell due again: %q", due)
	}
}

// A burst of the host's own writes has all its held reports checked, a
// few at a time: the box's one change among them is taken, and the
// host's echoes, of files and of the directory they went into (whose
// times the host only estimates), are dropped without a listing made
// stale.
func TestVerifyEchoesOfABurst(t *testing.T) {
	_, _, r := fakeBox(t)
	c, advance := watchedCache(t, r)
	ctx := t.Context()
	if _, err := c.Mkdir(ctx, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	reports := []string{"d"}
	for i := range 300 {
		name := fmt.Sprintf("d/f%d", i)
		write(t, c, name, "host").Release(ctx)
		reports = append(reports, name)
	}
	boxWrite(t, r, "d/f7", "the box's")
	advance(5 * time.Millisecond) // the box's change is newer than the host's last write
	if got := c.BoxChanged(reports, false); len(got) != 0 {
		t.Fatalf("reports of what the host just wrote were taken at once: %q", got)
	}
	advance(30 * time.Millisecond)
	var changed []string
	for range 20 {
		changed = append(changed, c.VerifyEchoes(ctx)...)
	}
	if len(changed) != 1 || changed[0] != "d/f7" {
		t.Errorf("changed = %q, want [d/f7]", changed)
	}
	advance(3 * time.Second)
	if due := c.DueEchoes(); len(due) != 0 {
		t.Errorf("%d checked reports fell due: %q", len(due), due[:min(len(due), 5)])
	}
	if fi, err := c.Getattr(ctx, "d/f7"); err != nil || fi.Size != int64(len("the box's")) {
		t.Errorf("d/f7 after the check: %+v, %v", fi, err)
	}
}

// A held report can be checked once the host's change it may echo has
// settled: EchoWait says how long that is, 0 for a change long past.
func TestEchoWait(t *testing.T) {
	_, _, r := fakeBox(t)
	c, advance := watchedCache(t, r)
	ctx := t.Context()
	if d := c.EchoWait(); d != 0 {
		t.Errorf("nothing held: wait %v", d)
	}
	write(t, c, "f", "host").Release(ctx)
	advance(5 * time.Millisecond)
	c.BoxChanged([]string{"f"}, false)
	select {
	case <-c.EchoHeld():
	default:
		t.Error("a held report was not signalled")
	}
	if d := c.EchoWait(); d != 15*time.Millisecond {
		t.Errorf("5 ms after the host's change: wait %v, want 15ms", d)
	}
	advance(200 * time.Millisecond)
	if d := c.EchoWait(); d != 0 {
		t.Errorf("200 ms after the host's change: wait %v, want 0", d)
	}
}

// hookedLstat runs a hook inside Lstat of one name, once: a box that
// changes again while the check of its last change is in flight.
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

// A check whose answer is older than a report that came while it ran
// keeps nothing: the host's next look asks the box and sees its newest
// change.
func TestVerifyEchoesOlderThanAReport(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &hookedLstat{renameStater: &renameStater{Remote: inner}, name: "h"}
	c, advance := watchedCache(t, r)
	ctx := t.Context()

	write(t, c, "h", "host").Release(ctx)
	boxWrite(t, inner, "h", "the box's")
	c.BoxChanged([]string{"h"}, false)
	advance(30 * time.Millisecond)
	r.hook = func() {
		boxWrite(t, inner, "h", "the box's, again")
		c.BoxChanged([]string{"h"}, false)
	}
	require.Equal(t, []string{"h"}, c.VerifyEchoes(ctx))
	fi, err := c.Getattr(ctx, "h")
	require.NoError(t, err)
	assert.Equal(t, int64(len("the box's, again")), fi.Size, "the host's look after the check")
}
