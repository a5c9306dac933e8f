package cache_test

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// smallRemote reads small files in batches the way the agent does, from
// the fake's files, and counts what the cache asked.
type smallRemote struct {
	cache.Remote
	mu      sync.Mutex
	batches [][]string
	reads   []string
	hold    func() // when set, called once after a batch was read
}

func (r *smallRemote) ReadSmall(ctx context.Context, dir string, names []string, max int) ([]providers.SmallFile, error) {
	r.mu.Lock()
	r.batches = append(r.batches, append([]string(nil), names...))
	r.mu.Unlock()
	var out []providers.SmallFile
	for _, n := range names {
		fi, err := r.Remote.Lstat(ctx, path.Join(dir, n))
		if err != nil || !fi.IsRegular() || int(fi.Size) > max {
			continue
		}
		rc, err := r.Remote.ReadFile(ctx, path.Join(dir, n))
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		max -= len(b)
		out = append(out, providers.SmallFile{Info: fi, Data: b})
	}
	r.mu.Lock()
	hold := r.hold
	r.hold = nil
	r.mu.Unlock()
	if hold != nil {
		hold()
	}
	return out, nil
}

func (r *smallRemote) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	r.mu.Lock()
	r.reads = append(r.reads, path.Base(name))
	r.mu.Unlock()
	return r.Remote.ReadFile(ctx, name)
}

// scanCache opens a cache over a fake box that reads small files in
// batches, with an empty directory src in the box.
func scanCache(t *testing.T) (*cache.Cache, *smallRemote, cache.Remote) {
	t.Helper()
	_, _, inner := fakeBox(t)
	r := &smallRemote{Remote: inner}
	c := open(t, r, t.TempDir())
	if err := inner.Mkdir(t.Context(), root+"/src", 0o755); err != nil {
		t.Fatal(err)
	}
	return c, r, inner
}

// Reading a directory's files one after another (grep -r) fetches the
// first alone and the rest in batches, each file's content exact; a file
// the host has written is not overwritten, and a file the box changes
// afterwards is fetched again.
func TestScanPrefetches(t *testing.T) {
	c, r, inner := scanCache(t)
	ctx := t.Context()
	want := map[string]string{}
	for i := range 30 {
		name := fmt.Sprintf("src/f%02d", i)
		want[name] = strings.Repeat(fmt.Sprintf("%d,", i), 100*i)
		boxWrite(t, inner, name, want[name])
	}
	big := strings.Repeat("B", 65<<10)
	boxWrite(t, inner, "src/f15", big) // too large for a batch
	want["src/f15"] = big

	// The host writes f20 before the scan: its bytes are the host's.
	h := write(t, c, "src/f20", "host's")
	want["src/f20"] = "host's"

	list, err := c.ReadDir(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range list {
		rel := "src/" + fi.Name
		got := readWhole(t, c, rel)
		if got != want[rel] {
			t.Fatalf("%s: %d bytes, want %d", rel, len(got), len(want[rel]))
		}
	}
	h.Release(ctx)
	if len(r.batches) == 0 || len(r.batches) > 4 {
		t.Errorf("%d batches for 29 files, want 1..4: %v", len(r.batches), r.batches)
	}
	// f00 alone (the first fetch of the directory), f15 alone (too large).
	if strings.Join(r.reads, " ") != "f00 f15" {
		t.Errorf("files fetched alone: %v, want [f00 f15]", r.reads)
	}
	for _, b := range r.batches {
		for _, n := range b {
			if n == "f20" || n == "f15" {
				t.Errorf("batch %v asked for %s", b, n)
			}
		}
	}
	// The box changes f03: after the listing says so, it is fetched again.
	boxWrite(t, inner, "src/f03", "changed in the box, longer")
	c.Invalidate()
	r.reads = nil
	if got, _ := read(t, c, "src/f03"); got != "changed in the box, longer" {
		t.Errorf("f03 after a box change: %q", got)
	}
}

func readWhole(t *testing.T, c *cache.Cache, name string) string {
	t.Helper()
	h, _, err := c.OpenFile(t.Context(), name, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer h.Release(t.Context())
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for off := int64(0); ; {
		n, err := h.ReadAt(buf, off)
		b.Write(buf[:n])
		off += int64(n)
		if err == io.EOF || n == 0 {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Once a directory is scanned, the small files of the known directories
// below it are read ahead in the background, one batch per directory, so
// the scan finds them held: each file's content exact, nothing fetched
// alone but a file too large for a batch, nothing read ahead twice.
func TestScanReadsAheadBelow(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &smallRemote{Remote: inner}
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	want := map[string]string{}
	for _, d := range []string{"src", "src/p", "src/p/q", "src/r"} {
		if err := inner.Mkdir(ctx, root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			name := fmt.Sprintf("%s/f%d", d, i)
			want[name] = strings.Repeat(name+",", 10*(i+1))
			boxWrite(t, inner, name, want[name])
		}
	}
	want["src/p/big"] = strings.Repeat("B", 65<<10)
	boxWrite(t, inner, "src/p/big", want["src/p/big"])
	for _, d := range []string{"src", "src/p", "src/p/q", "src/r"} {
		if _, err := c.ReadDir(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	// The scan starts in src: its second cold file makes it a scan.
	for _, n := range []string{"src/f0", "src/f1", "src/f2", "src/f3"} {
		if got := readWhole(t, c, n); got != want[n] {
			t.Fatalf("%s: %q", n, got)
		}
	}
	below := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for _, b := range r.batches {
			n += len(b)
		}
		return n
	}
	// src's own batch (f1..f3) and the 12 small files below it, installed.
	c.WaitReadAhead()
	if n := below(); n != 15 {
		t.Fatalf("%d files read in batches, want 15", n)
	}
	r.mu.Lock()
	r.reads = nil
	batches := len(r.batches)
	r.mu.Unlock()
	for _, d := range []string{"src/p", "src/p/q", "src/r"} {
		list, err := c.ReadDir(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, fi := range list {
			if fi.IsDir() {
				continue
			}
			rel := d + "/" + fi.Name
			if got := readWhole(t, c, rel); got != want[rel] {
				t.Fatalf("%s: %d bytes, want %d", rel, len(got), len(want[rel]))
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.Join(r.reads, " ") != "big" {
		t.Errorf("files fetched alone after the read-ahead: %v, want [big]", r.reads)
	}
	if len(r.batches) != batches {
		t.Errorf("the scan below asked %d more batches: %v", len(r.batches)-batches, r.batches[batches:])
	}
	if batches != 4 {
		t.Errorf("%d batches (src's own and one per directory below), want 4: %v", batches, r.batches)
	}
}

// A batch read while the host changes one of its files does not bring
// the file's older attributes back over the host's change.
func TestScanBatchOlderThanHostChange(t *testing.T) {
	c, r, inner := scanCache(t)
	ctx := t.Context()
	for i := range 4 {
		boxWrite(t, inner, fmt.Sprintf("src/f%d", i), "small")
	}
	if _, err := c.ReadDir(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.hold = func() {
		// The batch has f2 as "small"; the host truncates it meanwhile.
		if _, err := c.Truncate(ctx, "src/f2", 0); err != nil {
			t.Error(err)
		}
	}
	r.mu.Unlock()
	readWhole(t, c, "src/f0")
	readWhole(t, c, "src/f1") // the second cold file: f1..f3 in one batch
	fi, err := c.Getattr(ctx, "src/f2")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 0 {
		t.Errorf("f2 after the host truncated it during a batch: %d bytes, want 0", fi.Size)
	}
}
