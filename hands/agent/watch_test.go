//go:build linux

package agent

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWatchTree: every kind of change under the root is reported by its
// path relative to the root, including in directories made (or moved in)
// after the watch began and in a directory renamed within the tree; boxfs's
// own temporary names are not; the root's removal ends the watch.
func TestWatchTree(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	must(os.WriteFile(filepath.Join(root, "a", "b", "f"), []byte("1"), 0o644))

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- WatchTree(root, 0, pw); pw.Close() }()
	recs := make(chan string, 1000)
	go func() {
		br := bufio.NewReader(pr)
		for {
			r, err := br.ReadString(0)
			if err != nil {
				close(recs)
				return
			}
			recs <- strings.TrimSuffix(r, "\x00")
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case r, ok := <-recs:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no record within 10 s", what)
		}
		return ""
	}
	if r := next("start"); r != "r" {
		t.Fatalf("first record %q, want ready", r)
	}
	// expect waits for path records until every wanted one came, or a
	// directory above it; others (a create also modifies, say) may come
	// between.
	expect := func(what string, want ...string) {
		t.Helper()
		left := map[string]bool{}
		for _, w := range want {
			left[w] = true
		}
		for len(left) > 0 {
			r := next(what)
			if r == "!" {
				t.Fatalf("%s: overflow", what)
			}
			got := recordPath(t, r)
			if strings.HasPrefix(got, ".boxfs-tmp-") || strings.Contains(got, "/.boxfs-tmp-") {
				t.Errorf("%s: a temporary name was reported: %q", what, r)
			}
			// A directory reported covers what is under it (the host
			// drops all it knows below it): a directory made just before
			// a write in it may be reported after the write.
			for w := range left {
				if w == got || strings.HasPrefix(w, got+"/") {
					delete(left, w)
				}
			}
		}
	}

	must(os.WriteFile(filepath.Join(root, "a", "b", "f"), []byte("22"), 0o644))
	expect("a write in a nested directory", "a/b/f")
	must(os.WriteFile(filepath.Join(root, "a", ".boxfs-tmp-x"), []byte("t"), 0o644))
	must(os.Rename(filepath.Join(root, "a", ".boxfs-tmp-x"), filepath.Join(root, "a", "g")))
	expect("an atomic write", "a/g")
	must(os.MkdirAll(filepath.Join(root, "n", "m"), 0o755))
	must(os.WriteFile(filepath.Join(root, "n", "m", "h"), []byte("h"), 0o644))
	expect("a directory made after the watch began", "n")
	must(os.WriteFile(filepath.Join(root, "n", "m", "h"), []byte("hh"), 0o644))
	expect("a write in it", "n/m/h")
	must(os.Rename(filepath.Join(root, "n"), filepath.Join(root, "renamed")))
	expect("a rename", "n", "renamed")
	must(os.WriteFile(filepath.Join(root, "renamed", "m", "h"), []byte("hhh"), 0o644))
	expect("a write under the new name", "renamed/m/h")
	outside := t.TempDir()
	must(os.MkdirAll(filepath.Join(outside, "in", "deep"), 0o755))
	must(os.Rename(filepath.Join(outside, "in"), filepath.Join(root, "in")))
	expect("a directory moved in", "in")
	must(os.WriteFile(filepath.Join(root, "in", "deep", "x"), nil, 0o644))
	expect("a file made in it", "in/deep/x")
	must(os.Chmod(filepath.Join(root, "a", "g"), 0o600))
	expect("a chmod", "a/g")
	must(os.Remove(filepath.Join(root, "a", "g")))
	expect("a removal", "a/g")

	must(os.RemoveAll(root))
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchTree after the root went: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end when its root went away")
	}
}

// recordPath returns the path of a watch record: a path alone, a path
// gone, or a path with its attributes after the change (checked to
// decode, and to name a file of the path's kind).
func recordPath(t *testing.T, r string) string {
	t.Helper()
	switch r[0] {
	case watchPath, watchGone:
		return r[1:]
	case watchStat:
		c, ok := parseWatchStat(r[1:])
		if !ok || c.Info == nil || c.Info.Ctime.IsZero() {
			t.Fatalf("record %q does not decode", r)
		}
		return c.Path
	}
	t.Fatalf("record %q of no known type", r)
	return ""
}
