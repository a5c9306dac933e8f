package cache_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/syncengine/cache"
)

const root = "/work"

// fakeBox makes a fake box with a workspace directory.
func fakeBox(t *testing.T) (*fake.Provider, providers.Box, cache.Remote) {
	t.Helper()
	p := fake.New()
	box, err := p.Create(t.Context(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	r := box.(cache.Remote)
	if err := r.Mkdir(t.Context(), root, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
		t.Fatal(err)
	}
	return p, box, r
}

func open(t *testing.T, r cache.Remote, dir string) *cache.Cache {
	t.Helper()
	c, err := cache.Open(r, cache.Options{Dir: dir, Root: root, Box: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func boxRead(t *testing.T, r cache.Remote, name string) string {
	t.Helper()
	rc, err := r.ReadFile(t.Context(), path.Join(root, name))
	if err != nil {
		t.Fatalf("box read %s: %v", name, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func boxWrite(t *testing.T, r cache.Remote, name, data string) {
	t.Helper()
	if err := r.WriteFile(t.Context(), path.Join(root, name), strings.NewReader(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, c *cache.Cache, name, data string) *cache.Handle {
	t.Helper()
	h, _, err := c.Create(t.Context(), name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt([]byte(data), 0); err != nil {
		t.Fatal(err)
	}
	return h
}

func read(t *testing.T, c *cache.Cache, name string) (string, bool) {
	t.Helper()
	h, keep, err := c.OpenFile(t.Context(), name, syscall.O_RDONLY)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer h.Release(t.Context())
	buf := make([]byte, 1<<16)
	n, err := h.ReadAt(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n]), keep
}

func TestWriteReachesBoxOnlyAtFlush(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	h := write(t, c, "a.txt", "hello")
	if got := boxRead(t, r, "a.txt"); got != "" {
		t.Errorf("box has %q before flush", got)
	}
	if d := c.Dirty(); len(d) != 1 || d[0] != "a.txt" {
		t.Errorf("dirty %v", d)
	}
	if fi, err := c.Getattr(t.Context(), "a.txt"); err != nil || fi.Size != 5 {
		t.Errorf("getattr of a dirty file: %+v %v", fi, err)
	}
	if err := h.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := boxRead(t, r, "a.txt"); got != "hello" {
		t.Errorf("box has %q after flush", got)
	}
	if d := c.Dirty(); len(d) != 0 {
		t.Errorf("still dirty: %v", d)
	}
	h.Release(t.Context())
}

func TestFailedPushKeepsDataAndSaysSo(t *testing.T) {
	p, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	h := write(t, c, "a.txt", "precious")
	p.On(fake.Match{Op: "WriteFile"}).FailErrno(syscall.ENOSPC).Once()
	err := h.Flush(t.Context())
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush: %v, want ENOSPC", err)
	}
	if d := c.Dirty(); len(d) != 1 {
		t.Errorf("a failed push left dirty %v", d)
	}
	if got, _ := read(t, c, "a.txt"); got != "precious" {
		t.Errorf("host copy %q", got)
	}
	if err := h.Flush(t.Context()); err != nil {
		t.Fatalf("second flush: %v", err)
	}
	if got := boxRead(t, r, "a.txt"); got != "precious" {
		t.Errorf("box has %q", got)
	}
	h.Release(t.Context())
}

func TestRenameBeforeFlushPushesNewName(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	h := write(t, c, ".a.swp", "new content")
	boxWrite(t, r, "a.txt", "old")
	if err := c.Rename(t.Context(), ".a.swp", "a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.Release(t.Context())
	if got := boxRead(t, r, "a.txt"); got != "new content" {
		t.Errorf("a.txt in box %q", got)
	}
	if _, err := r.Lstat(t.Context(), root+"/.a.swp"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("temp name still in box: %v", err)
	}
}

func TestTimesSetBeforeCloseSurviveThePush(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	h := write(t, c, "a.txt", "data")
	mt := time.Date(2020, 1, 2, 3, 4, 5, 678901234, time.UTC)
	if _, err := c.Utimes(t.Context(), "a.txt", mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.Release(t.Context())
	fi, err := r.Lstat(t.Context(), root+"/a.txt")
	if err != nil || !fi.Mtime.Equal(mt) {
		t.Errorf("box mtime %v, want %v (%v)", fi.Mtime, mt, err)
	}
}

func TestReadValidatesAgainstTheBox(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	boxWrite(t, r, "f", "one")
	if got, _ := read(t, c, "f"); got != "one" {
		t.Fatalf("first read %q", got)
	}
	if _, keep := read(t, c, "f"); !keep {
		t.Error("unchanged file: the kernel's cache should be kept")
	}
	boxWrite(t, r, "f", "two!")
	c.Invalidate() // what a command's end or the attribute timeout does
	got, keep := read(t, c, "f")
	if got != "two!" || keep {
		t.Errorf("after a box change: %q keep=%v", got, keep)
	}
}

func TestRefreshReportsChanges(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	boxWrite(t, r, "keep", "k")
	boxWrite(t, r, "change", "c")
	boxWrite(t, r, "gone", "g")
	if _, err := c.ReadDir(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(t.Context(), "later"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	boxWrite(t, r, "change", "changed")
	if err := r.Remove(t.Context(), root+"/gone"); err != nil {
		t.Fatal(err)
	}
	boxWrite(t, r, "later", "l")
	ch, err := c.Refresh(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ch.Changed, ",") != "change" || strings.Join(ch.Removed, ",") != "gone" || strings.Join(ch.Added, ",") != "later" {
		t.Errorf("changes %+v", ch)
	}
	if fi, err := c.Lookup(t.Context(), "later"); err != nil || fi.Size != 1 {
		t.Errorf("lookup after refresh: %+v %v", fi, err)
	}
}

func TestHungBoxIsBoundedByTheCaller(t *testing.T) {
	p, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	boxWrite(t, r, "f", "x")
	p.On(fake.Match{Op: "ReadFile"}).Hang()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := c.OpenFile(ctx, "f", syscall.O_RDONLY)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("open of a hung box: %v after %v", err, time.Since(start))
	}
	if code := providers.CodeOf(err); code != providers.Timeout {
		t.Errorf("code %v, want timeout", code)
	}
}

// TestCrashBetweenWriteAndPush kills a process that wrote through the cache
// before it pushed, then opens the cache again in this process: the journal
// brings the data to the box.
func TestCrashBetweenWriteAndPush(t *testing.T) {
	if os.Getenv("BOXFS_CACHE_CRASH_CHILD") != "" {
		return // the child runs TestCrashChild
	}
	dir := t.TempDir()
	lp := local.New(t.TempDir())
	box, err := lp.Create(t.Context(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Destroy(context.Background()) })
	facts, _ := box.Facts(t.Context())
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), "BOXFS_CACHE_CRASH_CHILD=1", "CACHE_DIR="+dir, "LOCAL_ROOT="+lp.Root(), "BOX_ID="+box.ID())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
	if _, err := os.Stat(facts.Workspace + "/journaled.txt"); err == nil {
		b, _ := os.ReadFile(facts.Workspace + "/journaled.txt")
		if len(b) > 0 {
			t.Fatalf("the child pushed before dying (%q): the test proves nothing", b)
		}
	}
	r := box.(cache.Remote)
	c, err := cache.Open(r, cache.Options{Dir: dir, Root: facts.Workspace, Box: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := c.Dirty(); len(d) != 1 || d[0] != "journaled.txt" {
		t.Fatalf("journal holds %v", d)
	}
	if err := c.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(facts.Workspace + "/journaled.txt")
	if err != nil || string(b) != "written before the crash" {
		t.Errorf("box has %q, %v", b, err)
	}
}

func TestCrashChild(t *testing.T) {
	if os.Getenv("BOXFS_CACHE_CRASH_CHILD") == "" {
		t.Skip("run by TestCrashBetweenWriteAndPush")
	}
	lp := local.New(os.Getenv("LOCAL_ROOT"))
	box, err := lp.Attach(t.Context(), os.Getenv("BOX_ID"))
	if err != nil {
		t.Fatal(err)
	}
	facts, _ := box.Facts(t.Context())
	// Through the cache's copy: a local box's own file would have the
	// bytes at once (hostwrite.go), with nothing left to journal.
	c, err := cache.Open(copyOnly{box.(cache.Remote)}, cache.Options{Dir: os.Getenv("CACHE_DIR"), Root: facts.Workspace})
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := c.Create(t.Context(), "journaled.txt", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt([]byte("written before the crash"), 0); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// copyOnly is a remote whose files are not the host's to write: its
// writes go through the cache's copy and a push.
type copyOnly struct{ cache.Remote }

func (copyOnly) HostFiles() bool { return false }

func (copyOnly) OpenHostWrite(context.Context, string, int, providers.FileMode) (*os.File, providers.FileInfo, error) {
	return nil, providers.FileInfo{}, providers.Errorf(providers.Unsupported, "test", "copy only")
}
