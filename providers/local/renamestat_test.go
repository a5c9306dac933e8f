//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

// RenameStat answers a rename over a file with the attributes it left, as
// a stat after it finds them: the moved file's new change time, and the
// times of both directories (rename(2) moves them all), so the watch's
// report of the new name is the echo of the rename (F-echo). A parent
// reached through a symlink leading out of the workspace is refused and
// nothing outside changes, with or without openat2.
func TestRenameStat(t *testing.T) {
	t.Run("openat2", testRenameStat)
	t.Run("os.Root", func(t *testing.T) {
		was := openat2Off.Swap(true)
		defer openat2Off.Store(was)
		testRenameStat(t)
	})
}

func testRenameStat(t *testing.T) {
	ctx := context.Background()
	b := newBox(t, New(t.TempDir()), providers.Spec{})
	ws := b.Workspace()
	write := func(rel, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ws, rel), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lstat := func(rel string) providers.FileInfo {
		t.Helper()
		fi, err := b.Lstat(ctx, filepath.Join(ws, rel))
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	same := func(what string, got, want providers.FileInfo) {
		t.Helper()
		if got.Ino != want.Ino || got.Mode != want.Mode || got.Size != want.Size || got.Nlink != want.Nlink ||
			!got.Mtime.Equal(want.Mtime) || !got.Ctime.Equal(want.Ctime) || got.Target != want.Target {
			t.Errorf("%s: RenameStat says %+v, a stat after it %+v", what, got, want)
		}
	}
	if err := os.Mkdir(filepath.Join(ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("file", "moved\n")
	write("dir/renamed", "replaced\n")
	before := lstat("file")

	fi, dirs, err := b.RenameStat(ctx, filepath.Join(ws, "file"), filepath.Join(ws, "dir/renamed"))
	if err != nil {
		t.Fatal(err)
	}
	after := lstat("dir/renamed")
	if after.Ino != before.Ino {
		t.Fatalf("the rename left %+v of %+v", after, before)
	}
	same("the new name", fi, after)
	if fi.Name != "renamed" {
		t.Errorf("the new name is called %q", fi.Name)
	}
	if len(dirs) != 2 {
		t.Fatalf("%d directories' attributes, want 2", len(dirs))
	}
	same("the new name's directory", dirs[0], lstat("dir"))
	same("the old name's directory", dirs[1], lstat("."))
	if _, err := b.Lstat(ctx, filepath.Join(ws, "file")); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("the old name after the rename: %v", err)
	}

	// In one directory: one directory's attributes; a symlink's target.
	if err := os.Symlink("renamed", filepath.Join(ws, "dir/link")); err != nil {
		t.Fatal(err)
	}
	fi, dirs, err = b.RenameStat(ctx, filepath.Join(ws, "dir/link"), filepath.Join(ws, "dir/link2"))
	if err != nil {
		t.Fatal(err)
	}
	same("the moved symlink", fi, lstat("dir/link2"))
	if fi.Target != "renamed" {
		t.Errorf("the moved symlink's target is %q", fi.Target)
	}
	if len(dirs) != 1 {
		t.Fatalf("%d directories' attributes for a rename in one, want 1", len(dirs))
	}
	same("the directory", dirs[0], lstat("dir"))

	// A failed rename says why, as Rename does.
	if _, _, err := b.RenameStat(ctx, filepath.Join(ws, "missing"), filepath.Join(ws, "x")); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("RenameStat of a missing name: %v, want NotFound", err)
	}

	// Through a symlink leading out: refused either way, nothing moved.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.RenameStat(ctx, filepath.Join(ws, "out/secret"), filepath.Join(ws, "stolen")); !providers.IsCode(err, providers.Unsafe) {
		t.Errorf("RenameStat from outside: %v, want Unsafe", err)
	}
	if _, _, err := b.RenameStat(ctx, filepath.Join(ws, "dir/renamed"), filepath.Join(ws, "out/planted")); !providers.IsCode(err, providers.Unsafe) {
		t.Errorf("RenameStat to outside: %v, want Unsafe", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("the file outside: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "planted")); err == nil {
		t.Error("a file was moved out of the workspace")
	}
}
