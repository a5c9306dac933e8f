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
// A rename, mkdir or rmdir (which may change the link count too) asks the
// box; a file made, pushed or removed moves the times on the host's clock
// (the kernel checks the directory at every create under
// default_permissions, and asking the box would cost a round trip a file).
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
		name  string
		exact bool // the box's own times, else moved on the host's clock
		do    func() error
	}{
		{"create", false, func() error {
			h, _, err := c.Create(ctx, "d/f", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
			if err == nil {
				h.Release(ctx)
			}
			return err
		}},
		{"push", false, func() error {
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
		{"rename", true, func() error { return c.Rename(ctx, "d/f", "d/g") }},
		{"rename-out", true, func() error { return c.Rename(ctx, "d/g", "g") }},
		{"rename-in", true, func() error { return c.Rename(ctx, "g", "d/g") }},
		{"mkdir", true, func() error { _, err := c.Mkdir(ctx, "d/sub", 0o755); return err }},
		{"rmdir", true, func() error { return c.Rmdir(ctx, "d/sub") }},
		{"symlink", true, func() error { _, err := c.Symlink(ctx, "g", "d/l"); return err }},
		{"link", true, func() error { _, err := c.Link(ctx, "d/g", "d/h"); return err }},
		{"remove", false, func() error { return c.Remove(ctx, "d/h") }},
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
			got, err := get.fn()
			if err != nil || got.Equal(old) || (s.exact && !got.Equal(box.Mtime)) {
				t.Errorf("after %s: %s says d's mtime is %v (%v), the box %v (exact: %v)", s.name, get.op, got, err, box.Mtime, s.exact)
			}
		}
	}
}
