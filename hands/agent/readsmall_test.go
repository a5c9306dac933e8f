package agent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// ReadSmall reads the regular files it is asked for whole, in one round
// trip, with each file's attributes, and leaves out what it cannot or may
// not read.
func TestReadSmall(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	files := map[string][]byte{
		"a":          []byte("alpha\n"),
		"b":          bytes.Repeat([]byte("b"), 10<<10),
		"empty":      nil,
		"odd \n\xff": []byte("odd name"),
		"big":        bytes.Repeat([]byte("B"), smallMax+1),
		"after-big":  []byte("still read"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink("a", filepath.Join(dir, "link"))
	names := []string{"a", "b", "empty", "odd \n\xff", "big", "sub", "link", "missing", "../a", "after-big"}
	before := c.RoundTrips()
	got, err := c.ReadSmall(ctx, dir, names, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.RoundTrips() - before; n != 1 {
		t.Errorf("%d round trips, want 1", n)
	}
	var order []string
	for _, f := range got {
		order = append(order, f.Info.Name)
		if !bytes.Equal(f.Data, files[f.Info.Name]) {
			t.Errorf("%q: %d bytes, want %d", f.Info.Name, len(f.Data), len(files[f.Info.Name]))
		}
		fi, err := c.Lstat(ctx, filepath.Join(dir, f.Info.Name))
		if err != nil || fi.Size != f.Info.Size || !fi.Mtime.Equal(f.Info.Mtime) || fi.Mode != f.Info.Mode || fi.Ino != f.Info.Ino {
			t.Errorf("%q: attributes %+v, Lstat %+v (%v)", f.Info.Name, f.Info, fi, err)
		}
	}
	if want := "a|b|empty|odd \n\xff|after-big"; strings.Join(order, "|") != want {
		t.Errorf("read %q, want %q (no dir, link, missing, escaping or over-budget name)", strings.Join(order, "|"), want)
	}
	// The budget: files past it are left out, in order.
	got, err = c.ReadSmall(ctx, dir, []string{"b", "a", "after-big"}, 10<<10+6)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Info.Name != "b" || got[1].Info.Name != "a" {
		t.Errorf("with a budget of b+a: got %d files", len(got))
	}
	if _, err := c.ReadSmall(ctx, filepath.Join(dir, "nodir"), []string{"a"}, 100); errnoString(err) != "errno ENOENT" {
		t.Errorf("a missing directory: %v, want ENOENT", err)
	}
}

// WalkMax lists a tree up to its cap in one round trip, and refuses a
// larger one as TooLarge without listing it.
func TestWalkMax(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	makeTree(t, dir, 50, 8)
	all, err := c.Walk(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	before := c.RoundTrips()
	got, err := c.WalkMax(ctx, dir, len(all))
	if err != nil || len(got) != len(all) {
		t.Fatalf("WalkMax at the tree's size: %d entries, %v; want %d", len(got), err, len(all))
	}
	if n := c.RoundTrips() - before; n != 1 {
		t.Errorf("%d round trips, want 1", n)
	}
	if _, err := c.WalkMax(ctx, dir, len(all)-1); providers.CodeOf(err) != providers.TooLarge {
		t.Errorf("WalkMax under the tree's size: %v, want too_large", err)
	}
}

// ReadDirMax lists a directory up to its cap, and refuses a larger one as
// TooLarge: the agent sends none of it.
func TestReadDirMax(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.ReadDirMax(ctx, dir, 20)
	if err != nil || len(got) != 20 || got[0].Name != "f00" {
		t.Fatalf("ReadDirMax at the directory's size: %d entries, %v; want 20", len(got), err)
	}
	if _, err := c.ReadDirMax(ctx, dir, 19); providers.CodeOf(err) != providers.TooLarge {
		t.Errorf("ReadDirMax under the directory's size: %v, want too_large", err)
	}
}
