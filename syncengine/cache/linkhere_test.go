package cache_test

import (
	"context"
	"errors"
	"path"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// linkedObject writes rel in write-behind as git writes an object: under
// a temporary name, closed, then linked to rel.
func linkedObject(t *testing.T, c *cache.Cache, tmp, rel, data string) {
	t.Helper()
	ctx := t.Context()
	h := write(t, c, tmp, data)
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	fi, err := c.Link(ctx, tmp, rel)
	require.NoError(t, err)
	assert.EqualValues(t, 2, fi.Nlink, "links after link(2)")
}

func behindLinkCache(t *testing.T) (*cache.Cache, *batchRemote, *fake.Provider) {
	t.Helper()
	p, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	_, err := c.Mkdir(t.Context(), "objects", 0o755)
	require.NoError(t, err)
	p.ResetCalls()
	return c, r, p
}

// git's write of an object (temporary name, link, unlink) costs the box
// nothing until the batch, which makes the object under its real name
// only.
func TestBehindLinkOfNewFileStaysOnHost(t *testing.T) {
	c, r, p := behindLinkCache(t)
	ctx := t.Context()
	for _, n := range []string{"ab", "cd", "ef"} {
		tmp, obj := "objects/tmp_obj_"+n, "objects/"+n
		linkedObject(t, c, tmp, obj, "object "+n)
		require.NoError(t, c.Remove(ctx, tmp))
		fi, err := c.Lookup(ctx, obj)
		require.NoError(t, err)
		assert.EqualValues(t, 1, fi.Nlink, "%s: links after the temporary name went", obj)
		assert.EqualValues(t, len("object "+n), fi.Size)
	}
	assert.Empty(t, p.Calls(), "calls to the box before the barrier")
	names := func() []string {
		ents, err := c.ReadDir(ctx, "objects")
		require.NoError(t, err)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name)
		}
		return out
	}
	assert.Equal(t, []string{"ab", "cd", "ef"}, names(), "listing before the push")
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, []int{3}, r.took(), "one batch of three objects")
	for _, n := range []string{"ab", "cd", "ef"} {
		assert.Equal(t, "object "+n, boxRead(t, r, "objects/"+n))
		_, err := r.Lstat(ctx, path.Join(root, "objects/tmp_obj_"+n))
		assert.True(t, providers.IsCode(err, providers.NotFound), "temporary name in the box: %v", err)
	}
	assert.Equal(t, []string{"ab", "cd", "ef"}, names(), "listing after the push")
}

// Both names kept until the batch: the box gets one file under both, and
// a later write through one name shows through the other.
func TestBehindLinkBothNamesReachTheBox(t *testing.T) {
	c, r, _ := behindLinkCache(t)
	ctx := t.Context()
	linkedObject(t, c, "objects/a", "objects/b", "one file")
	// A write through the second name before the push is the file's.
	h, _, err := c.OpenFile(ctx, "objects/b", syscall.O_WRONLY)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("ONE"), 0)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	got, _ := read(t, c, "objects/a")
	assert.Equal(t, "ONE file", got)

	require.NoError(t, c.FlushAll(ctx))
	a, err := r.Lstat(ctx, path.Join(root, "objects/a"))
	require.NoError(t, err)
	b, err := r.Lstat(ctx, path.Join(root, "objects/b"))
	require.NoError(t, err)
	assert.Equal(t, a.Ino, b.Ino, "one inode under both names in the box")
	assert.EqualValues(t, 2, b.Nlink)
	assert.Equal(t, "ONE file", boxRead(t, r, "objects/b"))
	fi, err := c.Lookup(ctx, "objects/a")
	require.NoError(t, err)
	assert.EqualValues(t, 2, fi.Nlink)
}

// link(2) over a name the listing shows is EEXIST, asked of no one; a
// second link of a file linked here, or a rename of one of its names,
// is the box's to do, after the batch.
func TestBehindLinkTakenNameAndFallbacks(t *testing.T) {
	c, r, p := behindLinkCache(t)
	ctx := t.Context()
	h := write(t, c, "objects/x", "x")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	linkedObject(t, c, "objects/a", "objects/b", "ab")
	_, err := c.Link(ctx, "objects/a", "objects/x")
	assert.True(t, errors.Is(err, syscall.EEXIST), "link over a listed name: %v", err)
	assert.Empty(t, p.Calls(), "calls to the box")

	_, err = c.Link(ctx, "objects/b", "objects/c")
	require.NoError(t, err)
	require.NoError(t, c.Rename(ctx, "objects/a", "objects/d"))
	for _, n := range []string{"b", "c", "d"} {
		assert.Equal(t, "ab", boxRead(t, r, "objects/"+n))
	}
	fi, err := r.Lstat(ctx, path.Join(root, "objects/c"))
	require.NoError(t, err)
	assert.EqualValues(t, 3, fi.Nlink)
}

// Both names survive a daemon that stops before the batch: the journal
// holds the second name, and the recovery makes it.
func TestBehindLinkJournaled(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	dir := t.TempDir()
	o := cache.Options{Dir: dir, Root: root, Box: "test", WriteBehind: true, BehindDelay: time.Hour, BehindMaxWait: time.Hour}
	c, err := cache.Open(r, o)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.Mkdir(ctx, "objects", 0o755)
	require.NoError(t, err)
	require.NoError(t, c.FlushAll(ctx))
	linkedObject(t, c, "objects/a", "objects/b", "kept")
	require.NoError(t, c.Close())

	c, err = cache.Open(r, o)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, []string{"objects/a"}, c.Dirty())
	require.NoError(t, c.Recover(ctx))
	a, err := r.Lstat(ctx, path.Join(root, "objects/a"))
	require.NoError(t, err)
	b, err := r.Lstat(ctx, path.Join(root, "objects/b"))
	require.NoError(t, err)
	assert.Equal(t, a.Ino, b.Ino)
	assert.Equal(t, "kept", boxRead(t, r, "objects/b"))
}

// A name the box took meanwhile is not replaced by the link made here:
// the barrier reports it, the box's file stays, and the file lives on
// under its other name.
func TestBehindLinkNameTakenInTheBox(t *testing.T) {
	c, r, _ := behindLinkCache(t)
	ctx := t.Context()
	require.NoError(t, c.FlushAll(ctx))
	linkedObject(t, c, "objects/a", "objects/b", "host")
	boxWrite(t, r, "objects/b", "box")
	err := c.FlushAll(ctx)
	assert.True(t, providers.IsCode(err, providers.Exists), "barrier: %v", err)
	assert.Equal(t, "box", boxRead(t, r, "objects/b"))
	assert.Equal(t, "host", boxRead(t, r, "objects/a"))
	got, _ := read(t, c, "objects/b")
	assert.Equal(t, "box", got)
	assert.NoError(t, c.FlushAll(context.Background()), "a second barrier")
}

// link(2) over a name whose host write is queued is EEXIST, also when the
// box removed the file meanwhile: the host shows its write (F-dirty), and
// the barrier pushes it.
func TestBehindLinkOverQueuedWrite(t *testing.T) {
	c, r, p := behindLinkCache(t)
	ctx := t.Context()
	boxWrite(t, r, "objects/a", "a")
	boxWrite(t, r, "objects/b", "box")
	h := write(t, c, "objects/b", "host")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	require.NoError(t, r.Remove(ctx, path.Join(root, "objects/b")))
	p.ResetCalls()
	_, err := c.Link(ctx, "objects/a", "objects/b")
	assert.True(t, errors.Is(err, syscall.EEXIST), "link over the host's queued write: %v", err)
	for _, call := range p.Calls() {
		assert.NotEqual(t, "Link", call.Op, "the box was asked to link")
	}
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, "host", boxRead(t, r, "objects/b"))
	assert.Equal(t, "a", boxRead(t, r, "objects/a"))
}

// replacedRemote has the box replace the new name of each link right
// after making it, before the cache stats it.
type replacedRemote struct{ cache.Remote }

func (r replacedRemote) Link(ctx context.Context, oldname, newname string) error {
	if err := r.Remote.Link(ctx, oldname, newname); err != nil {
		return err
	}
	return r.Remote.WriteFile(ctx, newname, strings.NewReader("another file"), 0o644)
}

// A link's new name the box replaced before its stat is another file: the
// old name is not shown with that file's attributes.
func TestLinkNewNameReplacedInTheBox(t *testing.T) {
	_, _, inner := fakeBox(t)
	c := open(t, replacedRemote{inner}, t.TempDir())
	ctx := t.Context()
	boxWrite(t, inner, "x", "x's bytes")
	_, err := c.Lookup(ctx, "x")
	require.NoError(t, err)
	_, err = c.Link(ctx, "x", "y")
	require.NoError(t, err)
	fi, err := c.Lookup(ctx, "x")
	require.NoError(t, err)
	assert.EqualValues(t, len("x's bytes"), fi.Size, "x's size")
	assert.EqualValues(t, 1, fi.Nlink, "x's links")
}

// A daemon that stopped after the batch made the file but before its
// answer was journaled leaves the second name to the recovery, which
// finds the file there and makes the link.
func TestBehindLinkRecoveredAfterPushLanded(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	o := cache.Options{Dir: t.TempDir(), Root: root, Box: "test", WriteBehind: true, BehindDelay: time.Hour, BehindMaxWait: time.Hour}
	c, err := cache.Open(r, o)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.Mkdir(ctx, "objects", 0o755)
	require.NoError(t, err)
	require.NoError(t, c.FlushAll(ctx))
	linkedObject(t, c, "objects/a", "objects/b", "landed")
	require.NoError(t, c.Close())
	boxWrite(t, r, "objects/a", "landed") // the push the journal did not note

	c, err = cache.Open(r, o)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Recover(ctx))
	a, err := r.Lstat(ctx, path.Join(root, "objects/a"))
	require.NoError(t, err)
	b, err := r.Lstat(ctx, path.Join(root, "objects/b"))
	require.NoError(t, err, "the second name after the recovery")
	assert.Equal(t, a.Ino, b.Ino)
}
