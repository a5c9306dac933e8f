package cache_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// An open file whose box file grew (a command in the box appends to a log
// the host follows with tail -f) reads the new bytes once Renew is asked at
// the end of its copy; a file holding the host's writes stays the host's.
func TestRenewFollowsTheBoxFile(t *testing.T) {
	_, _, r := fakeBox(t)
	now := time.Now()
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Second,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	boxWrite(t, r, "log", "0\n")
	h, _, err := c.OpenFile(ctx, "log", syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	buf := make([]byte, 64)
	if n, _ := h.ReadAt(buf, 0); string(buf[:n]) != "0\n" {
		t.Fatalf("first read: %q", buf[:n])
	}
	boxWrite(t, r, "log", "0\n1\n")
	if renewed, err := h.Renew(ctx); err != nil || renewed {
		t.Errorf("Renew within the attribute timeout: %v %v (the listing is trusted)", renewed, err)
	}
	now = now.Add(2 * time.Second)
	if renewed, err := h.Renew(ctx); err != nil || !renewed {
		t.Fatalf("Renew after the box appended: %v %v", renewed, err)
	}
	if n, _ := h.ReadAt(buf, 2); string(buf[:n]) != "1\n" {
		t.Errorf("read at the old end after Renew: %q", buf[:n])
	}
	if renewed, err := h.Renew(ctx); err != nil || renewed {
		t.Errorf("Renew of an unchanged file: %v %v", renewed, err)
	}

	w, _, err := c.OpenFile(ctx, "log", syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if _, err := w.WriteAt([]byte("host"), 4); err != nil {
		t.Fatal(err)
	}
	boxWrite(t, r, "log", "box rewrote it\n")
	now = now.Add(2 * time.Second)
	if renewed, err := w.Renew(ctx); err != nil || renewed {
		t.Errorf("Renew of a file holding host writes: %v %v", renewed, err)
	}
	if n, _ := w.ReadAt(buf, 0); string(buf[:n]) != "0\n1\nhost" {
		t.Errorf("the host's writes after Renew: %q", buf[:n])
	}
}
