package syncengine_test

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine"
	"github.com/boxfs/boxfs/syncengine/safetar"
)

// node is one regular file or directory of a tree, as a user sees it.
type node struct {
	dir  bool
	mode fs.FileMode
	size int64
	sum  [32]byte // SHA-256 of the content
}

func fileNode(mode fs.FileMode, content string) node {
	return node{mode: mode, size: int64(len(content)), sum: sha256.Sum256([]byte(content))}
}

// hostTree writes files (content) under dir, then sets every listed mode.
func hostTree(t testing.TB, dir string, files map[string]string, modes map[string]fs.FileMode) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for rel, m := range modes {
		if err := os.Chmod(filepath.Join(dir, filepath.FromSlash(rel)), m); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree returns the regular files and directories under dir (links and
// special files left out, as seed and pull leave them out).
func readTree(t testing.TB, dir string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out[rel] = node{dir: true, mode: fi.Mode().Perm()}
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fileNode(fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky), string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTrees reports every difference between two trees, at most max.
func sameTrees(t testing.TB, got, want map[string]node, max int) {
	t.Helper()
	n := 0
	report := func(format string, args ...any) {
		if n < max {
			t.Errorf(format, args...)
		}
		n++
	}
	for _, rel := range slices.Sorted(mapKeys(want)) {
		w, g := want[rel], got[rel]
		if _, ok := got[rel]; !ok {
			report("%s: missing", rel)
			continue
		}
		if g != w {
			report("%s: got dir=%v %v %d bytes %x, want dir=%v %v %d bytes %x", rel, g.dir, g.mode, g.size, g.sum[:4], w.dir, w.mode, w.size, w.sum[:4])
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			report("%s: unexpected", rel)
		}
	}
	if n > max {
		t.Errorf("... %d differences in all", n)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestSeed(t *testing.T) {
	ctx := context.Background()
	f := newFakeBox(t)
	host := t.TempDir()
	outside := t.TempDir()
	hostTree(t, host, map[string]string{
		"a":                    "alpha",
		"bin/x":                "#!/bin/sh\n",
		"suid":                 "s",
		"world":                "w",
		"priv/p":               "p",
		"ro/f":                 "read only",
		"skip.o":               "object",
		"node_modules/m/index": "module",
		"sub/node_modules":     "a file named like the pattern",
		"empty/.keep":          "",
	}, map[string]fs.FileMode{"bin/x": 0o777, "suid": 0o4755, "world": 0o666, "priv": 0o700})
	hostTree(t, outside, map[string]string{"secret": "not for the box"}, nil)
	if err := os.Symlink("a", filepath.Join(host, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(host, "out")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(host, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	rc, err := syncengine.Seed(ctx, f.io, host, "/work/deep/sub", syncengine.SeedOptions{
		Exclude:  syncengine.Patterns{"*.o", "node_modules"},
		ReadOnly: syncengine.Patterns{"ro"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.dir = "/work/deep/sub"
	want := map[string]struct {
		content string
		mode    providers.FileMode
	}{
		"a":           {"alpha", 0o644},
		"bin/x":       {"#!/bin/sh\n", 0o755},
		"suid":        {"s", 0o755},
		"world":       {"w", 0o644},
		"priv/p":      {"p", 0o644},
		"ro/f":        {"read only", 0o444},
		"empty/.keep": {"", 0o644},
	}
	for rel, w := range want {
		got, mode := f.read(t, rel)
		if got != w.content || mode != w.mode {
			t.Errorf("box %s = %q %v, want %q %v", rel, got, mode, w.content, w.mode)
		}
	}
	m, err := syncengine.TakeMark(ctx, f.io, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	wantPaths := []string{"a", "bin", "bin/x", "empty", "empty/.keep", "priv", "priv/p", "ro", "ro/f", "sub", "suid", "world"}
	if got := m.Paths(); !slices.Equal(got, wantPaths) {
		t.Errorf("the box holds %q, want %q", got, wantPaths)
	}
	if m.Entries["priv"].Mode != 0o700 || m.Entries["ro"].Mode != 0o555 {
		t.Errorf("dir modes: priv %v ro %v", m.Entries["priv"].Mode, m.Entries["ro"].Mode)
	}
	if rc.Files != 7 || rc.Dirs != 5 || rc.Archives != 1 || rc.Masked != 2 {
		t.Errorf("receipt files %d dirs %d archives %d masked %d", rc.Files, rc.Dirs, rc.Archives, rc.Masked)
	}
	for reason, n := range map[safetar.Reason]int{safetar.ReasonSymlink: 2, safetar.ReasonFifo: 1, syncengine.ReasonExcluded: 3} {
		if rc.Skips(reason) != n {
			t.Errorf("skips %s = %d, want %d (%+v)", reason, rc.Skips(reason), n, rc.SkipsBy)
		}
	}
	if rc.Hashes["a"] != "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8" {
		t.Errorf("hash of a = %q", rc.Hashes["a"])
	}
	if n := len(f.p.CallsOf("PutArchive")); n != 1 {
		t.Errorf("%d PutArchive calls, want 1", n)
	}
}

func TestSeedErrors(t *testing.T) {
	ctx := context.Background()
	f := newFakeBox(t)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		name, host string
		opts       syncengine.SeedOptions
		code       providers.Code
	}{
		{"missing host dir", filepath.Join(t.TempDir(), "none"), syncengine.SeedOptions{}, providers.NotFound},
		{"host file", file, syncengine.SeedOptions{}, providers.Invalid},
		{"bad pattern", t.TempDir(), syncengine.SeedOptions{Exclude: syncengine.Patterns{"[x"}}, providers.Invalid},
	}
	for _, tt := range tests {
		_, err := syncengine.Seed(ctx, f.io, tt.host, "/work", tt.opts)
		if providers.CodeOf(err) != tt.code {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.code)
		}
	}
	// Into a box path that is a file.
	f.write(t, "file", "x", 0o644)
	if _, err := syncengine.Seed(ctx, f.io, t.TempDir(), "/work/file/sub", syncengine.SeedOptions{}); err == nil {
		t.Error("seed under a box file succeeded")
	}
}
