package cache_test

import (
	"context"
	"io"
	"io/fs"
	"path"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// statRemote is a remote whose mutations answer with attributes (as the
// agent channel's do); it records which of its calls the cache made.
type statRemote struct {
	cache.Remote
	mu    sync.Mutex
	calls []string
	last  providers.WriteOptions
}

func (r *statRemote) note(op string) {
	r.mu.Lock()
	r.calls = append(r.calls, op)
	r.mu.Unlock()
}

func (r *statRemote) took() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func (r *statRemote) CreateStat(ctx context.Context, name string, perm fs.FileMode, excl bool) (providers.FileInfo, error) {
	r.note("CreateStat")
	return providers.AsStatWriter(r.Remote).CreateStat(ctx, name, perm, excl)
}

func (r *statRemote) MkdirStat(ctx context.Context, name string, perm fs.FileMode) (providers.FileInfo, error) {
	r.note("MkdirStat")
	return providers.AsStatWriter(r.Remote).MkdirStat(ctx, name, perm)
}

func (r *statRemote) WriteFileStat(ctx context.Context, name string, src io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	r.note("WriteFileStat")
	r.mu.Lock()
	r.last = o
	r.mu.Unlock()
	return providers.AsStatWriter(r.Remote).WriteFileStat(ctx, name, src, o)
}

func (r *statRemote) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	r.note("Lstat")
	return r.Remote.Lstat(ctx, name)
}

func (r *statRemote) Chmod(ctx context.Context, name string, mode fs.FileMode) error {
	r.note("Chmod")
	return r.Remote.Chmod(ctx, name, mode)
}

func (r *statRemote) Chown(ctx context.Context, name string, uid, gid int) error {
	r.note("Chown")
	return r.Remote.Chown(ctx, name, uid, gid)
}

func (r *statRemote) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	r.note("Utimes")
	return r.Remote.Utimes(ctx, name, atime, mtime)
}

// What tar does for each file it extracts (create, write, fchown, fchmod,
// futimens, close) in a directory whose listing the cache holds costs one
// call of a remote whose mutations answer with attributes: the push,
// carrying the attributes, made exclusive as the create was; and the box
// ends with all of them.
func TestExtractedFileIsOneCall(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &statRemote{Remote: inner}
	c := open(t, r, t.TempDir())
	ctx := t.Context()

	if _, err := c.Mkdir(ctx, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	if got := r.took(); !slices.Equal(got, []string{"MkdirStat"}) {
		t.Fatalf("mkdir made calls %v, want [MkdirStat]", got)
	}
	h, fi, err := c.Create(ctx, "d/f", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 0 || !fi.IsRegular() {
		t.Fatalf("create answered %+v", fi)
	}
	if _, err := h.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	if _, err := c.Chown(ctx, "d/f", 1000, -1); err != nil {
		t.Fatal(err)
	}
	got, err := c.Chmod(ctx, "d/f", 0o755)
	if err != nil || got.Mode.Perm() != 0o755 || got.UID != 1000 {
		t.Fatalf("chmod while dirty: %v, shows mode %v uid %d", err, got.Mode, got.UID)
	}
	if got, err = c.Utimes(ctx, "d/f", time.Time{}, mtime); err != nil || !got.Mtime.Equal(mtime) {
		t.Fatalf("utimes while dirty: %v, shows mtime %v", err, got.Mtime)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if got := r.took(); !slices.Equal(got, []string{"WriteFileStat"}) {
		t.Fatalf("extracting a file made calls %v, want [WriteFileStat]", got)
	}
	want := providers.WriteOptions{Perm: 0o755, ForceMode: true, Chown: true, UID: 1000, GID: -1, Mtime: mtime, Exclusive: true}
	if r.last != want {
		t.Errorf("the push asked for %+v, want %+v", r.last, want)
	}
	box, err := inner.Lstat(ctx, path.Join(root, "d/f"))
	if err != nil {
		t.Fatal(err)
	}
	if box.Mode.Perm() != 0o755 || box.UID != 1000 || !box.Mtime.Equal(mtime) || box.Size != 5 {
		t.Errorf("the box has mode %v uid %d mtime %v size %d", box.Mode, box.UID, box.Mtime, box.Size)
	}
	if s := boxRead(t, inner, "d/f"); s != "hello" {
		t.Errorf("box content %q", s)
	}
	// The cache recorded what the push answered: no call to ask again.
	if a, err := c.Getattr(ctx, "d/f"); err != nil || !a.Mtime.Equal(mtime) || a.Mode.Perm() != 0o755 {
		t.Errorf("getattr after the push: %v %+v", err, a)
	}
	if got := r.took(); len(got) != 0 {
		t.Errorf("getattr after the push made calls %v", got)
	}
	// A chmod of a file with nothing to push goes to the box at once.
	if _, err := c.Chmod(ctx, "d/f", 0o700); err != nil {
		t.Fatal(err)
	}
	if got := r.took(); !slices.Equal(got, []string{"Chmod"}) {
		t.Errorf("chmod of a clean file made calls %v, want [Chmod]", got)
	}
}

// A write through one name of a hard link reaches the other name: the push
// writes in place instead of replacing the name.
func TestHardLinkWriteKeepsTheLink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags int
	}{{"append", syscall.O_WRONLY | syscall.O_APPEND}, {"truncate", syscall.O_WRONLY | syscall.O_TRUNC}} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, r := fakeBox(t)
			c := open(t, r, t.TempDir())
			ctx := t.Context()
			h := write(t, c, "f", "a\n")
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			h.Release(ctx)
			if _, err := c.Link(ctx, "f", "g"); err != nil {
				t.Fatal(err)
			}
			g, _, err := c.OpenFile(ctx, "g", tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			off := int64(0)
			if tc.flags&syscall.O_APPEND != 0 {
				off = 2
			}
			if _, err := g.WriteAt([]byte("more\n"), off); err != nil {
				t.Fatal(err)
			}
			if err := g.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			g.Release(ctx)
			want := "a\nmore\n"
			if tc.flags&syscall.O_TRUNC != 0 {
				want = "more\n"
			}
			for _, name := range []string{"f", "g"} {
				if s := boxRead(t, r, name); s != want {
					t.Errorf("box %s = %q, want %q", name, s, want)
				}
			}
			fi, err := r.Lstat(ctx, path.Join(root, "f"))
			if err != nil || fi.Nlink != 2 {
				t.Errorf("box f: %v, nlink %d, want 2", err, fi.Nlink)
			}
		})
	}
}

// A name of a hard link that the box removes while the host holds writes
// to it gets the host's copy back at the push, as a file of its own
// (F-dirty): not a failed close.
func TestHardLinkNameGoneBeforePush(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	h := write(t, c, "f", "a\n")
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := c.Link(ctx, "f", "g"); err != nil {
		t.Fatal(err)
	}
	g, _, err := c.OpenFile(ctx, "g", syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("more\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, path.Join(root, "g")); err != nil {
		t.Fatal(err)
	}
	if err := g.Flush(ctx); err != nil {
		t.Fatalf("close after the box removed the name: %v", err)
	}
	g.Release(ctx)
	if s := boxRead(t, r, "g"); s != "more\n" {
		t.Errorf("box g = %q, want the host's copy", s)
	}
	if s := boxRead(t, r, "f"); s != "a\n" {
		t.Errorf("box f = %q, want it as it was", s)
	}
}
