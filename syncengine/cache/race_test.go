package cache_test

import (
	"context"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// lateRemote answers listings with what the box held when they were asked,
// but only once let go: the answer arrives after the host changed things.
type lateRemote struct {
	cache.Remote
	asked   chan struct{}
	release chan struct{}
}

func (r *lateRemote) hold(list []providers.FileInfo, err error) ([]providers.FileInfo, error) {
	r.asked <- struct{}{}
	<-r.release
	return list, err
}

func (r *lateRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	return r.hold(r.Remote.ReadDir(ctx, name))
}

func (r *lateRemote) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	return r.hold(r.Remote.Walk(ctx, root))
}

func names(fis []providers.FileInfo) []string {
	var out []string
	for _, fi := range fis {
		out = append(out, fi.Name)
	}
	slices.Sort(out)
	return out
}

// A listing fetched while the host creates, pushes and removes files in
// the directory does not undo those changes when it arrives, and a push's
// temporary name caught by a listing is never shown.
func TestListingOlderThanHostChanges(t *testing.T) {
	for _, how := range []string{"readdir", "refresh"} {
		t.Run(how, func(t *testing.T) {
			_, _, inner := fakeBox(t)
			r := &lateRemote{Remote: inner, asked: make(chan struct{}), release: make(chan struct{})}
			now := time.Unix(1000, 0)
			clock := func() time.Time { return now }
			c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			boxWrite(t, inner, "old", "o")
			boxWrite(t, inner, ".boxfs-tmp-0123456789abcdef", "half a push")

			type result struct {
				list []providers.FileInfo
				err  error
			}
			done := make(chan result, 1)
			go func() {
				if how == "refresh" {
					_, err := c.Refresh(ctx)
					done <- result{nil, err}
					return
				}
				l, err := c.ReadDir(ctx, "")
				done <- result{l, err}
			}()
			<-r.asked // the box's answer is taken: old and the temp name, nothing new
			h, _, err := c.Create(ctx, "new", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			h.WriteAt([]byte("n"), 0)
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			h.Release(ctx)
			if err := c.Remove(ctx, "old"); err != nil {
				t.Fatal(err)
			}
			close(r.release)
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			list := res.list
			if how == "refresh" {
				// The refreshed listing is fresh: no second fetch.
				list, err = c.ReadDir(ctx, "")
				if err != nil {
					t.Fatal(err)
				}
			}
			if got, want := names(list), []string{"new"}; !slices.Equal(got, want) {
				t.Errorf("listing after the late answer: %q, want %q", got, want)
			}
			if _, err := c.Lookup(ctx, "old"); providers.CodeOf(err) != providers.NotFound {
				t.Errorf("lookup of the removed file: %v, want not found", err)
			}
			if fi, err := c.Lookup(ctx, "new"); err != nil || fi.Size != 1 {
				t.Errorf("lookup of the new file: %v size %d", err, fi.Size)
			}
			if s := boxRead(t, inner, "new"); s != "n" {
				t.Errorf("box has %q", s)
			}
		})
	}
}

// armedRemote holds listings as lateRemote does once armed, and answers
// them at once before.
type armedRemote struct {
	lateRemote
	armed atomic.Bool
}

func (r *armedRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	if !r.armed.Load() {
		return r.Remote.ReadDir(ctx, name)
	}
	return r.lateRemote.ReadDir(ctx, name)
}

// A remove of a name of a hard link, while a listing is out, does not
// show the link's other name, which the box removed meanwhile, in the
// listing's answer: what the host knew of it was a guess, not a change
// of its own.
func TestListingAfterRemoveOfLinkedName(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &armedRemote{lateRemote: lateRemote{Remote: inner, asked: make(chan struct{}), release: make(chan struct{})}}
	now := time.Unix(1000, 0)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	boxWrite(t, inner, "x", "x")
	if _, err := c.Lookup(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Link(ctx, "x", "y"); err != nil {
		t.Fatal(err)
	}
	if err := inner.Remove(ctx, root+"/y"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour) // the listing the lookup fetched is old: ReadDir asks the box
	r.armed.Store(true)
	done := make(chan []providers.FileInfo, 1)
	go func() {
		l, err := c.ReadDir(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	<-r.asked // the box's answer is taken: x alone
	if err := c.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	r.release <- struct{}{}
	if got := names(<-done); slices.Contains(got, "y") {
		t.Errorf("listing %v shows y, which the box removed before it was asked", got)
	}
}

// A listing asked while the host holds a write the box lacks, and answered
// after that write's push, shows the host's write, not the box's state
// from before the push, also when the watch reported the path since (the
// push's own echo): F-dirty.
func TestListingAnsweredAfterPush(t *testing.T) {
	for _, report := range []string{"none", "echo", "bare"} {
		t.Run(report, func(t *testing.T) {
			_, _, inner := fakeBox(t)
			r := &armedRemote{lateRemote: lateRemote{Remote: inner, asked: make(chan struct{}), release: make(chan struct{})}}
			now := time.Unix(1000, 0)
			c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour, Now: func() time.Time { return now }})
			ctx := t.Context()
			boxWrite(t, inner, "f", "box")
			if _, err := c.Lookup(ctx, "f"); err != nil {
				t.Fatal(err)
			}
			const host = "the host's f"
			h := write(t, c, "f", host)
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			h.Release(ctx)
			now = now.Add(time.Hour) // what the cache listed is old: ReadDir asks the box
			r.armed.Store(true)
			done := make(chan []providers.FileInfo, 1)
			go func() {
				l, err := c.ReadDir(ctx, "")
				if err != nil {
					t.Error(err)
				}
				done <- l
			}()
			<-r.asked // the box's answer is taken: f as the box had it
			if err := c.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			fi, err := inner.Lstat(ctx, root+"/f")
			if err != nil {
				t.Fatal(err)
			}
			switch report {
			case "echo":
				c.Reported([]providers.Change{{Path: "f", Info: &fi}}, false)
			case "bare":
				c.BoxChanged([]string{"f"}, false)
			}
			r.release <- struct{}{}
			for _, fi := range <-done {
				if fi.Name == "f" && fi.Size != int64(len(host)) {
					t.Errorf("the listing shows f of %d bytes, want the host's %d", fi.Size, len(host))
				}
			}
			r.armed.Store(false)
			if fi, err := c.Lookup(ctx, "f"); err != nil || fi.Size != int64(len(host)) {
				t.Errorf("lookup of f after the listing: %v, %d bytes, want %d", err, fi.Size, len(host))
			}
		})
	}
}

// A listing asked before the host renamed a file, and answered after the
// watch reported the rename's echo (the old name gone), does not show the
// old name: the echo is the state the rename left, not news a fetch begun
// before it may carry (F-noundo).
func TestListingAnsweredAfterRenameEcho(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &armedRemote{lateRemote: lateRemote{Remote: inner, asked: make(chan struct{}), release: make(chan struct{})}}
	now := time.Unix(1000, 0)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	boxWrite(t, inner, "f", "f")
	if _, err := c.Lookup(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour) // what the cache listed is old: ReadDir asks the box
	r.armed.Store(true)
	done := make(chan []providers.FileInfo, 1)
	go func() {
		l, err := c.ReadDir(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	<-r.asked // the box's answer is taken: f
	if err := c.Rename(ctx, "f", "g"); err != nil {
		t.Fatal(err)
	}
	if got := c.Reported([]providers.Change{{Path: "f", Gone: true}}, false); len(got) != 0 {
		t.Fatalf("the rename's echo made %q stale", got)
	}
	r.release <- struct{}{}
	if got := names(<-done); slices.Contains(got, "f") {
		t.Errorf("listing %v shows f, which the host renamed after it was asked", got)
	}
}

// gatedRemote holds the answers of the calls its gates name (ReadDir,
// Walk, Remove) until let go: each call is made in the box at once, then
// says so on asked and waits for its release.
type gatedRemote struct {
	cache.Remote
	gates map[string]*gate
}

type gate struct{ asked, release chan struct{} }

func newGate() *gate { return &gate{asked: make(chan struct{}), release: make(chan struct{})} }

func (r *gatedRemote) wait(call string) {
	if g := r.gates[call]; g != nil {
		g.asked <- struct{}{}
		<-g.release
	}
}

func (r *gatedRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	l, err := r.Remote.ReadDir(ctx, name)
	r.wait("readdir")
	return l, err
}

func (r *gatedRemote) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	l, err := r.Remote.Walk(ctx, root)
	r.wait("walk")
	return l, err
}

func (r *gatedRemote) Remove(ctx context.Context, name string) error {
	err := r.Remote.Remove(ctx, name)
	r.wait("remove")
	return err
}

// A listing asked before the host removed a file, answered after a walk
// that began while the remove was out and was installed after it, does
// not show the file: the walk found it missing, and that absence, which
// the remove left, is what the listing's answer is laid under (F-noundo;
// F-dirty where the file held writes the box lacked).
func TestListingOlderThanWalkAfterRemove(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &gatedRemote{Remote: inner, gates: map[string]*gate{"readdir": newGate(), "walk": newGate(), "remove": newGate()}}
	now := time.Unix(1000, 0)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	boxWrite(t, inner, "b", "b")
	listed := make(chan []providers.FileInfo, 1)
	go func() {
		l, err := c.ReadDir(ctx, "")
		if err != nil {
			t.Error(err)
		}
		listed <- l
	}()
	<-r.gates["readdir"].asked // the box's answer is taken: b
	removed := make(chan error, 1)
	go func() { removed <- c.Remove(ctx, "b") }()
	<-r.gates["remove"].asked // the box removed b; its answer is out
	walked := make(chan error, 1)
	go func() {
		_, err := c.Refresh(ctx)
		walked <- err
	}()
	<-r.gates["walk"].asked // the walk's answer is taken: no b
	r.gates["remove"].release <- struct{}{}
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	r.gates["walk"].release <- struct{}{}
	if err := <-walked; err != nil {
		t.Fatal(err)
	}
	r.gates["readdir"].release <- struct{}{}
	if got := names(<-listed); slices.Contains(got, "b") {
		t.Errorf("listing %v shows b, which the host removed after it was asked", got)
	}
}

// A listing asked before the host removed a file, and answered after the
// watch reported a box change of the name made after the remove, does not
// show the file as it was when the listing was asked: that answer is
// older than the remove (F-noundo), and the report makes the name be
// asked again at its next use (F-watch).
func TestListingOlderThanRemoveAndReport(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &gatedRemote{Remote: inner, gates: map[string]*gate{"readdir": newGate()}}
	now := time.Unix(1000, 0)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	const old, newer = "old", "the box's newer b"
	boxWrite(t, inner, "b", old)
	listed := make(chan []providers.FileInfo, 1)
	go func() {
		l, err := c.ReadDir(ctx, "")
		if err != nil {
			t.Error(err)
		}
		listed <- l
	}()
	<-r.gates["readdir"].asked // the box's answer is taken: b as it was
	if err := c.Remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	boxWrite(t, inner, "b", newer)
	fi, err := inner.Lstat(ctx, root+"/b")
	if err != nil {
		t.Fatal(err)
	}
	c.Reported([]providers.Change{{Path: "b", Info: &fi}}, false)
	r.gates["readdir"].release <- struct{}{}
	for _, fi := range <-listed {
		if fi.Name == "b" && fi.Size == int64(len(old)) {
			t.Errorf("the listing shows b as the box had it before the host removed it")
		}
	}
	delete(r.gates, "readdir")
	if fi, err := c.Lookup(ctx, "b"); err != nil || fi.Size != int64(len(newer)) {
		t.Errorf("lookup of b after the listing: %v, %d bytes, want the box's newer %d", err, fi.Size, len(newer))
	}
}

// A listing asked before a rename of a file whose attributes the host
// holds only stale (the watch reported it) over a file holding host
// writes, and answered after the rename, shows what the rename left
// there: never the box's file from before it, which the host never
// showed (F-dirty).
func TestListingAnsweredAfterRenameOverDirty(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &armedRemote{lateRemote: lateRemote{Remote: inner, asked: make(chan struct{}), release: make(chan struct{})}}
	now := time.Unix(1000, 0)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", WriteBehind: true,
		BehindDelay: time.Hour, BehindMaxWait: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	boxWrite(t, inner, "a", "box's a")
	boxWrite(t, inner, "c", "box's c, before")
	if _, err := c.ReadDir(ctx, ""); err != nil {
		t.Fatal(err)
	}
	h := write(t, c, "c", "host's c")
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	boxWrite(t, inner, "a", "box's a, changed")
	c.Reported([]providers.Change{{Path: "a"}}, false) // a's attributes are stale
	now = now.Add(time.Hour)                           // the listing is old: ReadDir asks the box
	r.armed.Store(true)
	done := make(chan []providers.FileInfo, 1)
	go func() {
		l, err := c.ReadDir(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	<-r.asked // the box's answer is taken: a, and c as it was
	r.armed.Store(false)
	if err := c.Rename(ctx, "a", "c"); err != nil {
		t.Fatal(err)
	}
	r.release <- struct{}{}
	for _, fi := range <-done {
		if fi.Name == "c" && fi.Size != int64(len("box's a, changed")) {
			t.Errorf("listing shows c of size %d; the rename left a's %d bytes there", fi.Size, len("box's a, changed"))
		}
	}
}
