package cache_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// A name made, removed or renamed in a directory, and a push (a temporary
// name renamed over the file), change the directory's mtime in the box; the
// next stat of the directory says so, as a local disk does. rsync re-stats
// each directory after filling it and resets its times only when they moved:
// with the old mtime cached, the box kept the time of rsync's last rename.
func TestDirectoryTimesFollowChangesInIt(t *testing.T) {
	_, _, r := fakeBox(t)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	if _, err := c.Mkdir(ctx, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	h := write(t, c, "d/keep", "k")
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := c.ReadDir(ctx, ""); err != nil { // d known through its parent's listing too
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		name string
		do   func() error
	}{
		{"create", func() error {
			h, _, err := c.Create(ctx, "d/f", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
			if err == nil {
				h.Release(ctx)
			}
			return err
		}},
		{"push", func() error {
			h, _, err := c.OpenFile(ctx, "d/f", syscall.O_WRONLY|syscall.O_TRUNC)
			if err != nil {
				return err
			}
			defer h.Release(ctx)
			if _, err := h.WriteAt([]byte("x"), 0); err != nil {
				return err
			}
			return h.Flush(ctx)
		}},
		{"rename", func() error { return c.Rename(ctx, "d/f", "d/g") }},
		{"rename-out", func() error { return c.Rename(ctx, "d/g", "g") }},
		{"rename-in", func() error { return c.Rename(ctx, "g", "d/g") }},
		{"mkdir", func() error { _, err := c.Mkdir(ctx, "d/sub", 0o755); return err }},
		{"rmdir", func() error { return c.Rmdir(ctx, "d/sub") }},
		{"symlink", func() error { _, err := c.Symlink(ctx, "g", "d/l"); return err }},
		{"link", func() error { _, err := c.Link(ctx, "d/g", "d/h"); return err }},
		{"remove", func() error { return c.Remove(ctx, "d/h") }},
	}
	for _, s := range steps {
		if _, err := c.Utimes(ctx, "d", old, old); err != nil {
			t.Fatal(err)
		}
		if fi, err := c.Getattr(ctx, "d"); err != nil || !fi.Mtime.Equal(old) {
			t.Fatalf("before %s: d's mtime %v %v", s.name, fi.Mtime, err)
		}
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		box, err := r.Lstat(ctx, root+"/d")
		if err != nil || box.Mtime.Equal(old) {
			t.Fatalf("%s: the fake box kept d's mtime (%v %v); the test needs it to move", s.name, box.Mtime, err)
		}
		for _, get := range []struct {
			op string
			fn func() (time.Time, error)
		}{
			{"Getattr", func() (time.Time, error) { fi, err := c.Getattr(ctx, "d"); return fi.Mtime, err }},
			{"Lookup", func() (time.Time, error) { fi, err := c.Lookup(ctx, "d"); return fi.Mtime, err }},
		} {
			if got, err := get.fn(); err != nil || !got.Equal(box.Mtime) {
				t.Errorf("after %s: %s says d's mtime is %v (%v), the box %v", s.name, get.op, got, err, box.Mtime)
			}
		}
	}
}
