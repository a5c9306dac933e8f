package cache_test

import (
	"syscall"
	"testing"
)

// Opened is the file an open's copy holds, whatever its name holds by
// now: here a symbolic link renamed over it after the open.
func TestOpenedIsTheCopysFile(t *testing.T) {
	_, _, r := fakeBox(t)
	boxWrite(t, r, "f", "data")
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	h, _, err := c.OpenFile(ctx, "f", syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if _, ok := h.Attr(); ok {
		t.Fatal("Attr answers for an open of the copy with no writes: Opened is not needed")
	}
	if _, err := c.Symlink(ctx, "/etc/passwd", "f.new"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, "f.new", "f"); err != nil {
		t.Fatal(err)
	}
	fi, ok := h.Opened()
	if !ok || !fi.IsRegular() || fi.Size != 4 || fi.Name != "f" {
		t.Errorf("Opened = %+v, %v; want the regular file f of 4 bytes", fi, ok)
	}
	if got, err := c.Getattr(ctx, "f"); err != nil || !got.IsSymlink() {
		t.Errorf("the name: %+v, %v; want the link", got, err)
	}
}
