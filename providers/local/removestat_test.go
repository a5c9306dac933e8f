//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

// RemoveStat answers an unlink with the attributes the file keeps: under
// its other name, one link fewer, as a stat after it finds them; with no
// name left, no link. A symlink is removed, not followed, and a name
// reached through a symlink leading out is refused.
func TestRemoveStat(t *testing.T) {
	t.Run("openat2", testRemoveStat)
	t.Run("os.Root", func(t *testing.T) {
		was := openat2Off.Swap(true)
		defer openat2Off.Store(was)
		testRemoveStat(t)
	})
}

func testRemoveStat(t *testing.T) {
	ctx := context.Background()
	b := newBox(t, New(t.TempDir()), providers.Spec{})
	ws := b.Workspace()
	at := func(rel string) string { return filepath.Join(ws, rel) }
	if err := os.WriteFile(at("tmp"), []byte("object"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(at("tmp"), at("obj")); err != nil {
		t.Fatal(err)
	}
	fi, err := b.RemoveStat(ctx, at("tmp"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.Lstat(ctx, at("obj"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Ino != want.Ino || fi.Nlink != 1 || want.Nlink != 1 || !fi.Ctime.Equal(want.Ctime) || !fi.Mtime.Equal(want.Mtime) || fi.Size != want.Size {
		t.Errorf("RemoveStat says %+v, a stat of the other name after it %+v", fi, want)
	}
	if _, err := os.Lstat(at("tmp")); !os.IsNotExist(err) {
		t.Errorf("the removed name: %v", err)
	}
	fi, err = b.RemoveStat(ctx, at("obj"))
	if err != nil || fi.Nlink != 0 {
		t.Errorf("RemoveStat of the last name: %+v, %v", fi, err)
	}
	if _, err := b.RemoveStat(ctx, at("obj")); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("RemoveStat of a missing name: %v, want NotFound", err)
	}

	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, at("out")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RemoveStat(ctx, at("out/secret")); !providers.IsCode(err, providers.Unsafe) {
		t.Errorf("RemoveStat through a symlink leading out: %v, want Unsafe", err)
	}
	fi, err = b.RemoveStat(ctx, at("out"))
	if err != nil || !fi.IsSymlink() {
		t.Errorf("RemoveStat of a symlink: %+v, %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("the file outside: %v", err)
	}
}
