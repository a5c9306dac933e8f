package cache_test

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// Each name of a hard link has its own content copy in the cache: a write
// or setattr through one name must reach what the others show, or the next
// write through another name (from its old copy) undoes the first.
func TestHardLinkNamesSeeEachOthersWrites(t *testing.T) {
	c, r := hourCache(t)
	ctx := t.Context()
	h := write(t, c, "h1", "a\n")
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := c.Link(ctx, "h1", "h2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Link(ctx, "h1", "h3"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"h2", "h3"} {
		if got, _ := read(t, c, n); got != "a\n" {
			t.Fatalf("%s: %q", n, got)
		}
	}
	if got := c.Linked("h1"); !slices.Equal(got, []string{"h2", "h3"}) {
		t.Errorf("Linked(h1) = %q", got)
	}
	for _, n := range []string{"h1", "h2", "h3"} {
		if fi, err := c.Getattr(ctx, n); err != nil || fi.Nlink != 3 {
			t.Errorf("%s has %d links (%v), want 3", n, fi.Nlink, err)
		}
	}
	appendVia := func(name, data string) {
		t.Helper()
		h, _, err := c.OpenFile(ctx, name, syscall.O_WRONLY|syscall.O_APPEND)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := c.Getattr(ctx, name)
		if _, err := h.WriteAt([]byte(data), fi.Size); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		h.Release(ctx)
	}
	appendVia("h1", "b\n")
	for _, n := range []string{"h2", "h3"} {
		if got, _ := read(t, c, n); got != "a\nb\n" {
			t.Errorf("%s after a write through h1: %q", n, got)
		}
	}
	appendVia("h2", "c\n")
	if got := boxRead(t, r, "h1"); got != "a\nb\nc\n" {
		t.Errorf("box after writes through h1 and h2: %q", got)
	}
	if got, _ := read(t, c, "h3"); got != "a\nb\nc\n" {
		t.Errorf("h3 after a write through h2: %q", got)
	}
	if _, err := c.Chmod(ctx, "h3", 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := c.Getattr(ctx, "h1"); err != nil || fi.Mode.Perm() != 0o600 {
		t.Errorf("h1's mode after chmod of h3: %v %v", fi.Mode, err)
	}
	if _, err := c.Truncate(ctx, "h1", 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, c, "h2"); got != "a\n" {
		t.Errorf("h2 after truncate of h1: %q", got)
	}
	if err := c.Remove(ctx, "h3"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"h1", "h2"} {
		if fi, err := c.Getattr(ctx, n); err != nil || fi.Nlink != 2 {
			t.Errorf("%s has %d links (%v) after rm h3, want 2", n, fi.Nlink, err)
		}
	}
}

// rename(2) of one name of a file onto another name of it does nothing:
// both names stay, in the box and in the cache.
func TestRenameOntoOtherNameOfSameFile(t *testing.T) {
	c, r := hourCache(t)
	ctx := t.Context()
	h := write(t, c, "a", "x\n")
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := c.Link(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if _, err := r.Lstat(ctx, root+"/"+n); err != nil {
			t.Fatalf("the fake box lost %s: %v (the test needs rename(2)'s no-op)", n, err)
		}
		if fi, err := c.Lookup(ctx, n); err != nil || fi.Nlink != 2 {
			t.Errorf("cache: %s %v %v", n, fi.Nlink, err)
		}
	}
	if got, _ := read(t, c, "a"); got != "x\n" {
		t.Errorf("a reads %q", got)
	}
}

// rename(2) over one name of a hard link leaves its file one link fewer:
// the other names show it at once, with the attribute timeout an hour.
func TestRenameOverOneNameOfHardLink(t *testing.T) {
	c, r := hourCache(t)
	ctx := t.Context()
	for _, n := range []string{"f", "h"} {
		h := write(t, c, n, n+"\n")
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		h.Release(ctx)
	}
	for _, n := range []string{"g1", "g2"} {
		if _, err := c.Link(ctx, "f", n); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := c.Getattr(ctx, "g1"); err != nil || fi.Nlink != 3 {
		t.Fatalf("g1 has %d links (%v), want 3", fi.Nlink, err)
	}
	if err := c.Rename(ctx, "h", "f"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"g1", "g2"} {
		fi, err := c.Getattr(ctx, n)
		want, _ := r.Lstat(ctx, root+"/"+n)
		if err != nil || fi.Nlink != 2 || !fi.Ctime.Equal(want.Ctime) {
			t.Errorf("%s after rename h f: %d links, ctime %v (%v); the box has %d, %v", n, fi.Nlink, fi.Ctime, err, want.Nlink, want.Ctime)
		}
	}
	if fi, err := c.Getattr(ctx, "f"); err != nil || fi.Nlink != 1 {
		t.Errorf("f after rename h f: %d links (%v), want 1", fi.Nlink, err)
	}
	if got, _ := read(t, c, "g2"); got != "f\n" {
		t.Errorf("g2 reads %q", got)
	}
}

// A name of a hard link removed while open for writing: the writes land in
// the file's other name, as on a disk.
func TestWriteThroughRemovedLinkName(t *testing.T) {
	c, r := hourCache(t)
	ctx := t.Context()
	h := write(t, c, "a", "1\n")
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := c.Link(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	w, _, err := c.OpenFile(ctx, "a", syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("2\n"), 2); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("3\n"), 4); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.Release(ctx)
	if got := boxRead(t, r, "b"); got != "1\n2\n3\n" {
		t.Errorf("box's b: %q", got)
	}
	if _, err := r.Lstat(ctx, root+"/a"); err == nil {
		t.Error("the push brought the removed name back")
	}
	if got, _ := read(t, c, "b"); got != "1\n2\n3\n" {
		t.Errorf("b reads %q", got)
	}
}

// hourCache opens a cache over a fresh fake box with an attribute timeout
// of an hour: what it shows changes only by what the test does.
func hourCache(t *testing.T) (*cache.Cache, cache.Remote) {
	t.Helper()
	_, _, r := fakeBox(t)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, r
}

// linkedK opens an hourCache holding "k\n" in k1, pushed, and k2, a hard
// link to it.
func linkedK(t *testing.T) (*cache.Cache, cache.Remote) {
	t.Helper()
	c, r := hourCache(t)
	h := write(t, c, "k1", "k\n")
	closeAll(t, h)
	if _, err := c.Link(t.Context(), "k1", "k2"); err != nil {
		t.Fatal(err)
	}
	return c, r
}

// appendTo opens name for appending.
func appendTo(t *testing.T, c *cache.Cache, name string) *cache.Handle {
	t.Helper()
	h, _, err := c.OpenFile(t.Context(), name, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// closeAll flushes and releases each handle, as close(2) does.
func closeAll(t *testing.T, hs ...*cache.Handle) {
	t.Helper()
	for _, h := range hs {
		if err := h.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		h.Release(t.Context())
	}
}

// Two names of one file open for appending at once, as the kernel sees
// them: one inode, whose size the second write starts at. Both writes
// land in the box's file, as on a disk, whichever close pushes last.
func TestHardLinkNamesOpenAtOnce(t *testing.T) {
	c, r := linkedK(t)
	a, b := appendTo(t, c, "k1"), appendTo(t, c, "k2")
	// The kernel's size of the one inode: 2, then 9 after the first write.
	if _, err := a.WriteAt([]byte("via k1\n"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt([]byte("via k2\n"), 9); err != nil {
		t.Fatal(err)
	}
	closeAll(t, a, b)
	const want = "k\nvia k1\nvia k2\n"
	if got := boxRead(t, r, "k1"); got != want {
		t.Errorf("box: %q, want %q", got, want)
	}
	for _, n := range []string{"k1", "k2"} {
		if got, _ := read(t, c, n); got != want {
			t.Errorf("%s reads %q, want %q", n, got, want)
		}
	}
}

// A name removed, or replaced by a rename, while an open through another
// name of the same file shares its copy: the writes still reach the box
// under the name left.
func TestHardLinkNameRemovedWhileOpenThroughOther(t *testing.T) {
	for _, how := range []string{"remove", "rename"} {
		t.Run(how, func(t *testing.T) { hardLinkNameGoes(t, how) })
	}
}

func hardLinkNameGoes(t *testing.T, how string) {
	c, r := linkedK(t)
	ctx := t.Context()
	if got, _ := read(t, c, "k2"); got != "k\n" { // k2's own copy, clean
		t.Fatalf("k2 reads %q", got)
	}
	a, b := appendTo(t, c, "k1"), appendTo(t, c, "k2")
	if _, err := a.WriteAt([]byte("via k1\n"), 2); err != nil {
		t.Fatal(err)
	}
	if how == "remove" {
		if err := c.Remove(ctx, "k1"); err != nil {
			t.Fatal(err)
		}
	} else {
		closeAll(t, write(t, c, "other", "other\n"))
		if err := c.Rename(ctx, "other", "k1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.WriteAt([]byte("via k2\n"), 9); err != nil {
		t.Fatal(err)
	}
	closeAll(t, a, b)
	const want = "k\nvia k1\nvia k2\n"
	if got := boxRead(t, r, "k2"); got != want {
		t.Errorf("box k2: %q, want %q", got, want)
	}
	if got, _ := read(t, c, "k2"); got != want {
		t.Errorf("k2 reads %q, want %q", got, want)
	}
}
