package syncengine_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine"
	"github.com/boxfs/boxfs/syncengine/safetar"
)

// pullT pulls and fails the test on an error.
func pullT(t *testing.T, box syncengine.BoxIO, boxDir, host string, since *syncengine.Mark, opts syncengine.PullOptions) (syncengine.Receipt, syncengine.Mark) {
	t.Helper()
	rc, m, err := syncengine.Pull(context.Background(), box, boxDir, host, since, opts)
	if err != nil {
		t.Fatalf("Pull: %v (receipt %+v)", err, rc)
	}
	return rc, m
}

func readHost(t *testing.T, host, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(host, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("host %s: %v", rel, err)
	}
	return string(b)
}

func absentHost(t *testing.T, host, rel string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(host, filepath.FromSlash(rel))); err == nil {
		t.Errorf("host %s exists, want it absent", rel)
	}
}

// TestPullRoundTripFake seeds a tree into a fake box, pulls it back, then
// pulls only what a "command" changed, through the fake's whole-root
// GetArchive (the fallback path: one archive, filtered).
func TestPullRoundTripFake(t *testing.T) {
	f := newFakeBox(t)
	src, dst := t.TempDir(), t.TempDir()
	files := map[string]string{}
	for i := range 40 {
		files[filepath.ToSlash(filepath.Join("d"+string(rune('a'+i%4)), "f"+strings.Repeat("x", i%3)+string(rune('0'+i/4))))] = strings.Repeat("content ", i)
	}
	files["top"] = "top"
	hostTree(t, src, files, map[string]fs.FileMode{"top": 0o755, "da": 0o700})
	if _, err := syncengine.Seed(context.Background(), f.io, src, f.dir, syncengine.SeedOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, m1 := pullT(t, f.io, f.dir, dst, nil, syncengine.PullOptions{})
	sameTrees(t, readTree(t, dst), readTree(t, src), 10)
	if rc.Files != len(files) || rc.Archives != 1 || rc.Unchanged != 0 {
		t.Errorf("first pull: files %d archives %d unchanged %d, want %d 1 0", rc.Files, rc.Archives, rc.Unchanged, len(files))
	}
	if len(m1.Entries) != len(files)+4 || m1.Entries["top"].SHA256 == "" || m1.Host["top"].Ino == 0 {
		t.Errorf("mark: %d entries, top %+v host %+v", len(m1.Entries), m1.Entries["top"], m1.Host["top"])
	}

	// A command changes three files, adds one, removes one.
	f.write(t, "top", "top, changed", 0o755)
	f.write(t, "da/f0", "changed", 0o644)
	f.write(t, "db/fx0", "changed too", 0o644)
	f.write(t, "new/file", "new", 0o644)
	if err := f.prog.Remove(context.Background(), f.dir+"/dc/fxx0"); err != nil {
		t.Fatal(err)
	}
	f.p.ResetCalls()
	rc, m2 := pullT(t, f.io, f.dir, dst, &m1, syncengine.PullOptions{})
	want := []string{"da/f0", "db/fx0", "new/file", "top"}
	if !slices.Equal(rc.Moved, want) || rc.Files != 4 || rc.Archives != 1 {
		t.Errorf("incremental pull moved %q (files %d, archives %d), want %q in 1", rc.Moved, rc.Files, rc.Archives, want)
	}
	if n := len(f.p.CallsOf("GetArchive")); n != 1 {
		t.Errorf("%d GetArchive calls, want 1", n)
	}
	if n := len(f.p.CallsOf("Walk")); n != 1 {
		t.Errorf("%d Walk calls, want 1", n)
	}
	if got := readHost(t, dst, "top"); got != "top, changed" {
		t.Errorf("top = %q", got)
	}
	readHost(t, dst, "dc/fxx0") // no MirrorDeletes: the host keeps it
	if _, ok := m2.Entries["dc/fxx0"]; ok {
		t.Error("the new mark still lists a path the box removed")
	}

	// Nothing changed: no archive at all.
	f.p.ResetCalls()
	rc, _ = pullT(t, f.io, f.dir, dst, &m2, syncengine.PullOptions{})
	if rc.Files != 0 || rc.Archives != 0 || len(f.p.CallsOf("GetArchive")) != 0 {
		t.Errorf("a pull with nothing changed moved %d files in %d archives", rc.Files, rc.Archives)
	}
	if rc.Unchanged != len(m2.Entries) {
		t.Errorf("unchanged %d, want %d", rc.Unchanged, len(m2.Entries))
	}
}

func TestPullOverwriteAndMirrorDeletes(t *testing.T) {
	ctx := context.Background()
	f := newFakeBox(t)
	for _, rel := range []string{"a", "b", "c", "c2", "d/e", "d/f", "n/x", "y"} {
		f.write(t, rel, "box "+rel, 0o644)
	}
	host := t.TempDir()
	_, m1 := pullT(t, f.io, f.dir, host, nil, syncengine.PullOptions{})

	// The host edits b and c2 and makes its own files; the box changes a,
	// b and x, removes c, c2, d (all of it), n/x, and makes x (which the
	// host made too).
	os.WriteFile(filepath.Join(host, "b"), []byte("host b"), 0o644)
	os.WriteFile(filepath.Join(host, "c2"), []byte("host c2"), 0o644)
	os.WriteFile(filepath.Join(host, "mine"), []byte("host's own"), 0o644)
	os.WriteFile(filepath.Join(host, "x"), []byte("host x"), 0o644)
	os.WriteFile(filepath.Join(host, "n", "host-made"), []byte("h"), 0o644)
	f.write(t, "a", "box a, changed", 0o644)
	f.write(t, "b", "box b, changed", 0o644)
	f.write(t, "x", "box x", 0o644)
	for _, p := range []string{"c", "c2", "d/e", "d/f", "n/x"} {
		if err := f.prog.Remove(ctx, f.dir+"/"+p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"d", "n"} {
		if err := f.prog.Rmdir(ctx, f.dir+"/"+p); err != nil {
			t.Fatal(err)
		}
	}
	rc, m2 := pullT(t, f.io, f.dir, host, &m1, syncengine.PullOptions{MirrorDeletes: true, Overwrite: syncengine.OverwriteIfUnchanged})
	if got := readHost(t, host, "a"); got != "box a, changed" {
		t.Errorf("a = %q: an unchanged host copy is replaced", got)
	}
	if got := readHost(t, host, "b"); got != "host b" {
		t.Errorf("b = %q: a host copy changed since the mark wins", got)
	}
	if got := readHost(t, host, "x"); got != "host x" {
		t.Errorf("x = %q: a host file no pull wrote wins", got)
	}
	if got := readHost(t, host, "c2"); got != "host c2" {
		t.Errorf("c2 = %q: a host-changed file is not deleted", got)
	}
	readHost(t, host, "mine")
	readHost(t, host, "n/host-made")
	absentHost(t, host, "c")
	absentHost(t, host, "d")
	absentHost(t, host, "n/x")
	if want := []string{"b", "c2", "x"}; !slices.Equal(rc.HostChanged, want) {
		t.Errorf("host_changed %q, want %q", rc.HostChanged, want)
	}
	slices.Sort(rc.Deleted)
	if want := []string{"c", "d", "d/e", "d/f", "n/x"}; !slices.Equal(rc.Deleted, want) {
		t.Errorf("deleted %q, want %q", rc.Deleted, want)
	}
	if rc.Skips(syncengine.ReasonNotEmpty) != 1 {
		t.Errorf("not_empty skips %d, want 1 (n holds a host file): %+v", rc.Skips(syncengine.ReasonNotEmpty), rc.Skipped)
	}
	// What the host kept stays marked as before, so the next pull reports
	// it again rather than forgetting it.
	if m2.Entries["b"] != m1.Entries["b"] || m2.Entries["c2"] != m1.Entries["c2"] {
		t.Errorf("mark of host-changed paths moved on: b %+v c2 %+v", m2.Entries["b"], m2.Entries["c2"])
	}
	rc, _ = pullT(t, f.io, f.dir, host, &m2, syncengine.PullOptions{MirrorDeletes: true, Overwrite: syncengine.OverwriteIfUnchanged})
	if want := []string{"b", "c2", "x"}; !slices.Equal(rc.HostChanged, want) || rc.Files != 0 {
		t.Errorf("second pull: host_changed %q files %d", rc.HostChanged, rc.Files)
	}
	// With the default policy the box wins.
	rc, _ = pullT(t, f.io, f.dir, host, &m2, syncengine.PullOptions{MirrorDeletes: true})
	if got := readHost(t, host, "b"); got != "box b, changed" || len(rc.HostChanged) != 0 {
		t.Errorf("overwrite always: b = %q, host_changed %q", got, rc.HostChanged)
	}
	absentHost(t, host, "c2")
}

func TestPullOverwriteNever(t *testing.T) {
	f := newFakeBox(t)
	f.write(t, "a", "box", 0o644)
	f.write(t, "b", "box", 0o644)
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "a"), []byte("host"), 0o644)
	rc, _ := pullT(t, f.io, f.dir, host, nil, syncengine.PullOptions{Overwrite: syncengine.OverwriteNever})
	if readHost(t, host, "a") != "host" || readHost(t, host, "b") != "box" || rc.Skips(safetar.ReasonRefused) != 1 {
		t.Errorf("never: a %q b %q refused %d", readHost(t, host, "a"), readHost(t, host, "b"), rc.Skips(safetar.ReasonRefused))
	}
	if _, _, err := syncengine.Pull(context.Background(), f.io, f.dir, host, nil, syncengine.PullOptions{Overwrite: "sometimes"}); providers.CodeOf(err) != providers.Invalid {
		t.Errorf("an unknown policy: %v", err)
	}
}

func TestPullKeepReadOnlyExclude(t *testing.T) {
	f := newFakeBox(t)
	for _, rel := range []string{"dirty", "ro/f", "skip.o", "plain"} {
		f.write(t, rel, "box v1", 0o644)
	}
	host := t.TempDir()
	opts := syncengine.PullOptions{ReadOnly: syncengine.Patterns{"ro"}, Exclude: syncengine.Patterns{"*.o"}}
	_, m1 := pullT(t, f.io, f.dir, host, nil, opts)
	absentHost(t, host, "skip.o")
	absentHost(t, host, "ro/f") // never pulled: the host's copy is the truth
	os.MkdirAll(filepath.Join(host, "ro"), 0o755)
	os.WriteFile(filepath.Join(host, "ro", "f"), []byte("host truth"), 0o644)
	os.WriteFile(filepath.Join(host, "dirty"), []byte("dirty on host"), 0o644)
	for _, rel := range []string{"dirty", "ro/f", "plain"} {
		f.write(t, rel, "box v2", 0o644)
	}
	opts.Keep = func(rel string) bool { return rel == "dirty" }
	rc, m2 := pullT(t, f.io, f.dir, host, &m1, opts)
	if readHost(t, host, "dirty") != "dirty on host" || readHost(t, host, "ro/f") != "host truth" || readHost(t, host, "plain") != "box v2" {
		t.Errorf("dirty %q ro/f %q plain %q", readHost(t, host, "dirty"), readHost(t, host, "ro/f"), readHost(t, host, "plain"))
	}
	if rc.Skips(syncengine.ReasonKept) != 1 || rc.Skips(syncengine.ReasonReadOnly) != 2 || !slices.Equal(rc.Moved, []string{"plain"}) {
		t.Errorf("kept %d read_only %d (ro and ro/f) moved %q", rc.Skips(syncengine.ReasonKept), rc.Skips(syncengine.ReasonReadOnly), rc.Moved)
	}
	// Once the cache no longer keeps it, the next pull brings it: the mark
	// did not move on for a kept path.
	opts.Keep = nil
	rc, _ = pullT(t, f.io, f.dir, host, &m2, opts)
	if readHost(t, host, "dirty") != "box v2" || !slices.Equal(rc.Moved, []string{"dirty"}) {
		t.Errorf("after keep: dirty %q moved %q", readHost(t, host, "dirty"), rc.Moved)
	}
}

func TestPullKindChanges(t *testing.T) {
	ctx := context.Background()
	f := newFakeBox(t)
	f.write(t, "k", "a file", 0o644)
	f.write(t, "j/y", "in a dir", 0o644)
	host := t.TempDir()
	_, m1 := pullT(t, f.io, f.dir, host, nil, syncengine.PullOptions{})
	f.prog.Remove(ctx, f.dir+"/k")
	f.write(t, "k/x", "now a dir", 0o644)
	f.prog.Remove(ctx, f.dir+"/j/y")
	f.prog.Rmdir(ctx, f.dir+"/j")
	f.write(t, "j", "now a file", 0o644)
	rc, _ := pullT(t, f.io, f.dir, host, &m1, syncengine.PullOptions{MirrorDeletes: true})
	if readHost(t, host, "k/x") != "now a dir" || readHost(t, host, "j") != "now a file" {
		t.Errorf("kind changes not applied: %+v", rc)
	}
}

// hostileBox is a fake box whose listing and archive lie.
type hostileBox struct {
	syncengine.BoxIO
	walk    []providers.FileInfo
	archive []byte
	gets    atomic.Int32
}

func (h *hostileBox) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	return h.walk, nil
}

func (h *hostileBox) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	h.gets.Add(1)
	return io.NopCloser(bytes.NewReader(h.archive)), nil
}

// multiBox adds a GetFiles that returns the same archive.
type multiBox struct{ *hostileBox }

func (m multiBox) GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	m.gets.Add(1)
	return io.NopCloser(bytes.NewReader(m.archive)), nil
}

func tarOf(t *testing.T, members ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range members {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return b.Bytes()
}

func TestPullHostileBox(t *testing.T) {
	now := time.Now()
	walk := []providers.FileInfo{
		{Name: "ok", Mode: 0o644, Size: 1, Mtime: now},
		{Name: "../escape", Mode: 0o644, Size: 1, Mtime: now},
		{Name: "l", Mode: fs.ModeSymlink | 0o777, Mtime: now, Target: "/etc"},
		{Name: "l/passwd", Mode: 0o644, Size: 1, Mtime: now},
	}
	for _, multi := range []bool{false, true} {
		name := map[bool]string{false: "archiver=root", true: "archiver=multi"}[multi]
		t.Run(name, func(t *testing.T) {
			prefix := "work/"
			if multi {
				prefix = ""
			}
			hb := &hostileBox{BoxIO: newFakeBox(t).io, walk: walk, archive: tarOf(t,
				&tar.Header{Name: prefix + "ok", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
				&tar.Header{Name: prefix + "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
				&tar.Header{Name: prefix + "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
				&tar.Header{Name: prefix + "l/passwd", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
				&tar.Header{Name: prefix + "unasked", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
				&tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
			)}
			var box syncengine.BoxIO = hb
			if multi {
				box = multiBox{hb}
			}
			base := t.TempDir()
			host := filepath.Join(base, "host")
			rc, _, err := syncengine.Pull(context.Background(), box, "/work", host, nil, syncengine.PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := readTree(t, base)
			want := map[string]node{
				"host":          {dir: true, mode: 0o755},
				"host/ok":       fileNode(0o644, "x"),
				"host/l":        {dir: true, mode: 0o755}, // made as a plain directory: the link never was
				"host/l/passwd": fileNode(0o644, "x"),
			}
			sameTrees(t, got, want, 10)
			if hb.gets.Load() != 1 || rc.Archives != 1 {
				t.Errorf("%d archives", hb.gets.Load())
			}
			if rc.Skips(safetar.ReasonBadName) < 1 || rc.Skips(safetar.ReasonSymlink) < 1 {
				t.Errorf("skips %+v", rc.SkipsBy)
			}
		})
	}
}

// blockingBox holds its first Walk until released.
type blockingBox struct {
	syncengine.BoxIO
	entered chan struct{}
	release chan struct{}
	walks   atomic.Int32
}

func (b *blockingBox) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	if b.walks.Add(1) == 1 {
		close(b.entered)
		<-b.release
	}
	return b.BoxIO.Walk(ctx, root)
}

func TestPullsIntoOneDirRunOneAtATime(t *testing.T) {
	f := newFakeBox(t)
	f.write(t, "a", "a", 0o644)
	bb := &blockingBox{BoxIO: f.io, entered: make(chan struct{}), release: make(chan struct{})}
	host := t.TempDir()
	first := make(chan error, 1)
	go func() {
		_, _, err := syncengine.Pull(context.Background(), bb, f.dir, host, nil, syncengine.PullOptions{})
		first <- err
	}()
	<-bb.entered
	// A second pull into the same directory (named differently) waits.
	second := make(chan error, 1)
	go func() {
		_, _, err := syncengine.Pull(context.Background(), bb, f.dir, host+"/./", nil, syncengine.PullOptions{})
		second <- err
	}()
	// One into another directory does not.
	if _, _, err := syncengine.Pull(context.Background(), f.io, f.dir, t.TempDir(), nil, syncengine.PullOptions{}); err != nil {
		t.Fatal(err)
	}
	// A waiting pull gives up when its ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := syncengine.Pull(ctx, bb, f.dir, host, nil, syncengine.PullOptions{}); providers.CodeOf(err) != providers.Timeout {
		t.Errorf("a pull waiting past its deadline: %v, want timeout", err)
	}
	select {
	case err := <-second:
		t.Fatalf("the second pull ran while the first held the directory (err %v)", err)
	default:
	}
	if n := bb.walks.Load(); n != 1 {
		t.Fatalf("%d walks while the first pull held the directory, want 1", n)
	}
	close(bb.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := bb.walks.Load(); n != 2 {
		t.Errorf("%d walks, want 2", n)
	}
}

func TestPullMarkOfAnotherRoot(t *testing.T) {
	f := newFakeBox(t)
	m := syncengine.Mark{Root: "/elsewhere"}
	if _, _, err := syncengine.Pull(context.Background(), f.io, f.dir, t.TempDir(), &m, syncengine.PullOptions{}); providers.CodeOf(err) != providers.Invalid {
		t.Errorf("a mark of another root: %v", err)
	}
}

// TestPullHardLinks pulls a box file with two names through an archive that
// sends the second name as a hard link: both arrive as files, from one
// archive.
func TestPullHardLinks(t *testing.T) {
	ctx := context.Background()
	f := newFakeBox(t)
	f.write(t, "d/orig", "shared content", 0o755)
	if err := f.prog.Link(ctx, f.dir+"/d/orig", f.dir+"/second"); err != nil {
		t.Fatal(err)
	}
	if err := f.prog.Link(ctx, f.dir+"/d/orig", f.dir+"/d/third"); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	rc, m := pullT(t, f.io, f.dir, host, nil, syncengine.PullOptions{})
	for _, rel := range []string{"d/orig", "second", "d/third"} {
		if got := readHost(t, host, rel); got != "shared content" {
			t.Errorf("%s = %q", rel, got)
		}
		if m.Entries[rel].SHA256 == "" || m.Host[rel].Ino == 0 {
			t.Errorf("%s: mark %+v host %+v", rel, m.Entries[rel], m.Host[rel])
		}
	}
	if rc.Files != 3 || rc.Archives != 1 || len(f.p.CallsOf("GetArchive")) != 1 || len(rc.Skipped) != 0 {
		t.Errorf("files %d archives %d skipped %+v", rc.Files, rc.Archives, rc.Skipped)
	}
	if a, b := m.Host["d/orig"].Ino, m.Host["second"].Ino; a == b {
		t.Errorf("the host copies share inode %d: a later write to one would change the other", a)
	}
}
