package cache_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// countRemote records the remote calls the cache makes that ask or change
// the box's attributes and listings.
type countRemote struct {
	cache.Remote
	mu    sync.Mutex
	calls []string
}

func (r *countRemote) note(op string) {
	r.mu.Lock()
	r.calls = append(r.calls, op)
	r.mu.Unlock()
}

func (r *countRemote) took() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func (r *countRemote) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	r.note("Lstat")
	return r.Remote.Lstat(ctx, name)
}

func (r *countRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	r.note("ReadDir")
	return r.Remote.ReadDir(ctx, name)
}

func (r *countRemote) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	r.note("Walk")
	return r.Remote.Walk(ctx, root)
}

// linkRemote is countRemote with the remote's LinkAttrSetter.
type linkRemote struct{ *countRemote }

func (r linkRemote) Lchown(ctx context.Context, name string, uid, gid int) error {
	r.note("Lchown")
	return r.Remote.(providers.LinkAttrSetter).Lchown(ctx, name, uid, gid)
}

func (r linkRemote) Lutimes(ctx context.Context, name string, atime, mtime time.Time) error {
	r.note("Lutimes")
	return r.Remote.(providers.LinkAttrSetter).Lutimes(ctx, name, atime, mtime)
}

// linkBox makes a local box holding d/{a,l->a,dl->missing} and e/f, and a
// cache over it that trusts what it fetched for an hour.
func linkBox(t *testing.T, withLinkAttrs bool) (c *cache.Cache, r *countRemote, ws string) {
	t.Helper()
	box, err := local.New(t.TempDir()).Create(t.Context(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Destroy(context.Background()) })
	facts, err := box.Facts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws = facts.Workspace
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Date(2003, 3, 3, 0, 0, 0, 0, time.UTC)
	for _, f := range []string{"d/a", "e/f"} {
		os.WriteFile(filepath.Join(ws, f), []byte("data\n"), 0o644)
		os.Chtimes(filepath.Join(ws, f), old, old)
	}
	os.Symlink("a", filepath.Join(ws, "d/l"))
	os.Symlink("missing", filepath.Join(ws, "d/dl"))
	r = &countRemote{Remote: box.(cache.Remote)}
	var remote cache.Remote = r
	if withLinkAttrs {
		remote = linkRemote{r}
	}
	c, err = cache.Open(remote, cache.Options{Dir: t.TempDir(), Root: ws, Box: "test", AttrTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, d := range []string{"d", "e"} {
		if _, err := c.ReadDir(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	r.took()
	return c, r, ws
}

func hostLstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Lutimes and Lchown change the link itself in one remote call, answer
// what they set, and keep every listing the cache holds.
func TestLinkAttrsKeepTheCache(t *testing.T) {
	ctx := t.Context()
	c, r, ws := linkBox(t, true)
	targetBefore := hostLstat(t, filepath.Join(ws, "d/a"))

	mt := time.Date(2002, 2, 2, 2, 2, 2, 123456789, time.UTC)
	fi, err := c.Lutimes(ctx, "d/l", time.Time{}, mt)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mtime.Equal(mt) || !fi.IsSymlink() || fi.Target != "a" || fi.Name != "l" {
		t.Errorf("Lutimes answered %+v", fi)
	}
	if got := r.took(); !slices.Equal(got, []string{"Lutimes"}) {
		t.Errorf("Lutimes made the remote calls %v, want [Lutimes]", got)
	}
	if st := hostLstat(t, filepath.Join(ws, "d/l")); !time.Unix(st.Mtim.Sec, st.Mtim.Nsec).Equal(mt) {
		t.Errorf("the box's link has mtime %v, want %v", time.Unix(st.Mtim.Sec, st.Mtim.Nsec), mt)
	}
	if os.Geteuid() == 0 {
		fi, err := c.Lchown(ctx, "d/dl", -1, 4322)
		if err != nil || fi.GID != 4322 || !fi.IsSymlink() {
			t.Errorf("Lchown of a dangling link: %v %+v", err, fi)
		}
		if got := r.took(); !slices.Equal(got, []string{"Lchown"}) {
			t.Errorf("Lchown made the remote calls %v, want [Lchown]", got)
		}
		if st := hostLstat(t, filepath.Join(ws, "d/dl")); st.Gid != 4322 {
			t.Errorf("the box's dangling link has gid %d", st.Gid)
		}
	}
	if st := hostLstat(t, filepath.Join(ws, "d/a")); st.Mtim != targetBefore.Mtim || st.Gid != targetBefore.Gid {
		t.Error("the link's target changed")
	}

	// Every listing is still the cache's: no remote call, and d's shows
	// the link's new time.
	for _, d := range []string{"d", "e"} {
		list, err := c.ReadDir(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			if d == "d" && e.Name == "l" && !e.Mtime.Equal(mt) {
				t.Errorf("d's listing shows l with mtime %v, want %v", e.Mtime, mt)
			}
		}
	}
	if fi, err := c.Lookup(ctx, "e/f"); err != nil || fi.Size != 5 {
		t.Errorf("Lookup e/f: %v %+v", err, fi)
	}
	if got := r.took(); len(got) != 0 {
		t.Errorf("listing after the link's setattrs asked the box: %v", got)
	}

	if _, err := c.Lutimes(ctx, "d/nope", time.Time{}, mt); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Lutimes of a missing name: %v, want NotFound", err)
	}
	if _, err := c.Lchown(ctx, "d/nope", -1, -1); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Lchown of a missing name: %v, want NotFound", err)
	}
}

// Without a LinkAttrSetter the cache says Unsupported and changes
// nothing; Forget then refreshes the one name a command changed, and
// nothing else.
func TestLinkAttrsUnsupportedAndForget(t *testing.T) {
	ctx := t.Context()
	c, r, ws := linkBox(t, false)
	mt := time.Date(2002, 2, 2, 2, 2, 2, 0, time.UTC)
	before := hostLstat(t, filepath.Join(ws, "d/l"))
	if _, err := c.Lutimes(ctx, "d/l", time.Time{}, mt); !providers.IsCode(err, providers.Unsupported) {
		t.Errorf("Lutimes without a LinkAttrSetter: %v, want Unsupported", err)
	}
	if _, err := c.Lchown(ctx, "d/l", -1, 1); !providers.IsCode(err, providers.Unsupported) {
		t.Errorf("Lchown without a LinkAttrSetter: %v, want Unsupported", err)
	}
	if st := hostLstat(t, filepath.Join(ws, "d/l")); st.Mtim != before.Mtim || st.Gid != before.Gid {
		t.Error("an Unsupported call changed the link")
	}

	// A command changes the link's time in the box.
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(ws, "d/l"), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if fi, err := c.Lookup(ctx, "d/l"); err != nil || fi.Mtime.Equal(mt) {
		t.Fatalf("before Forget the cache already shows the box's change (%v %v): the test proves nothing", err, fi.Mtime)
	}
	r.took()
	c.Forget("d/l")
	fi, err := c.Lookup(ctx, "d/l")
	if err != nil || !fi.Mtime.Equal(mt) || fi.Target != "a" {
		t.Errorf("Lookup after Forget: %v mtime %v target %q, want %v", err, fi.Mtime, fi.Target, mt)
	}
	// Its siblings are still there, and the other directory was not asked.
	for _, name := range []string{"d/a", "d/dl", "e/f"} {
		if _, err := c.Lookup(ctx, name); err != nil {
			t.Errorf("Lookup %s after Forget(d/l): %v", name, err)
		}
	}
	if _, err := c.ReadDir(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	if got := r.took(); len(got) != 1 {
		t.Errorf("after Forget(d/l) the cache asked the box %v, want one call for d/l", got)
	}
	if _, err := c.Lookup(ctx, "d/gone"); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Lookup of a missing sibling: %v", err)
	}
}
