package cache_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// batchRemote is a remote that takes batches of files (as the agent
// channel does), each file written as WriteFileStat writes it and each
// directory as WriteDir does; it records the size of each batch.
type batchRemote struct {
	cache.Remote
	mu      sync.Mutex
	batches []int
	fail    error // when set, every file of a batch fails with it
}

func (r *batchRemote) WriteFiles(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	r.mu.Lock()
	r.batches = append(r.batches, len(files))
	fail := r.fail
	r.mu.Unlock()
	out := make([]providers.FileWritten, len(files))
	for i, f := range files {
		if fail != nil {
			out[i].Err = fail
			continue
		}
		if f.Dir {
			out[i].Info, out[i].Err = providers.WriteDir(ctx, r.Remote, f)
			continue
		}
		out[i].Info, out[i].Err = providers.AsStatWriter(r.Remote).WriteFileStat(ctx, f.Name, f.Data, f.Options)
	}
	return out, nil
}

func (r *batchRemote) took() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.batches
	r.batches = nil
	return out
}

func behindCache(t *testing.T, r cache.Remote, o cache.Options) *cache.Cache {
	t.Helper()
	o.Dir, o.Root, o.Box, o.WriteBehind = t.TempDir(), root, "test", true
	c, err := cache.Open(r, o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// In write-behind a close returns with nothing sent to the box; the
// barrier (FlushAll) pushes every file closed since in one batch.
func TestBehindCloseQueuesBarrierPushesOneBatch(t *testing.T) {
	p, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	ctx := t.Context()
	_, err := c.Mkdir(ctx, "d", 0o755)
	require.NoError(t, err)
	p.ResetCalls()
	names := []string{"d/a", "d/b", "d/c"}
	for _, n := range names {
		h := write(t, c, n, "data of "+n)
		require.NoError(t, h.Flush(ctx))
		h.Release(ctx)
	}
	assert.Empty(t, p.Calls(), "calls to the box before the barrier")
	assert.Equal(t, names, c.Dirty())
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, []int{3}, r.took(), "one batch of three files")
	assert.Empty(t, c.Dirty())
	for _, n := range names {
		assert.Equal(t, "data of "+n, boxRead(t, r, n))
	}
}

// A batch goes without a barrier once it holds BehindFiles files.
func TestBehindBatchGoesWhenFull(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour, BehindFiles: 4})
	ctx := t.Context()
	for _, n := range []string{"a", "b", "c", "d"} {
		h := write(t, c, n, n)
		require.NoError(t, h.Flush(ctx))
		h.Release(ctx)
	}
	require.Eventually(t, func() bool { return len(c.Dirty()) == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []int{4}, r.took())
	assert.Equal(t, "d", boxRead(t, r, "d"))
}

// A background push that fails keeps the file dirty, is reported, and
// fails the next barrier with its error; once the box takes it, the
// barrier passes.
func TestBehindFailedPushFailsTheBarrier(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner, fail: providers.PathError("fake.WriteFile", "b", root+"/a", syscall.ENOSPC)}
	var mu sync.Mutex
	var reported []string
	c := behindCache(t, r, cache.Options{BehindDelay: time.Millisecond, BehindFiles: 1,
		PushFailed: func(rel string, err error) {
			mu.Lock()
			reported = append(reported, rel)
			mu.Unlock()
		}})
	ctx := t.Context()
	h := write(t, c, "a", "precious")
	require.NoError(t, h.Flush(ctx), "close in write-behind")
	h.Release(ctx)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) > 0
	}, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"a"}, c.Dirty())
	assert.ErrorIs(t, c.PushErrors()["a"], syscall.ENOSPC)
	assert.ErrorIs(t, c.FlushAll(ctx), syscall.ENOSPC, "the barrier")
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	require.NoError(t, c.FlushAll(ctx))
	assert.Empty(t, c.Dirty())
	assert.Equal(t, "precious", boxRead(t, r, "a"))
}

// An fsync in write-behind is a barrier: files closed before it are in
// the box when it returns.
func TestBehindFsyncIsABarrier(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	ctx := t.Context()
	first := write(t, c, "first", "1")
	require.NoError(t, first.Flush(ctx))
	first.Release(ctx)
	second := write(t, c, "second", "2")
	require.NoError(t, second.Fsync(ctx))
	assert.Equal(t, "1", boxRead(t, r, "first"))
	assert.Equal(t, "2", boxRead(t, r, "second"))
	second.Release(ctx)
}

// What tar does to a directory (mkdir, files in it, then its owner, mode
// and times once filled) costs no round trip in write-behind; the barrier
// sends it in one batch, in the order that leaves the box as tar would:
// the directory first, its files, its attributes last (the files do not
// move its times). Until then its listing is the host's, however old.
func TestBehindDirectoriesGoWithTheBatch(t *testing.T) {
	p, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	clk := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clk
	}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour, Now: now})
	ctx := t.Context()
	_, err := c.ReadDir(ctx, "")
	require.NoError(t, err)
	p.ResetCalls()

	_, err = c.Mkdir(ctx, "d", 0o750)
	require.NoError(t, err)
	_, err = c.Mkdir(ctx, "d/e", 0o755)
	require.NoError(t, err)
	h := write(t, c, "d/e/f", "data")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	mt := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, dir := range []string{"d/e", "d"} {
		_, err = c.Utimes(ctx, dir, mt, mt)
		require.NoError(t, err)
		_, err = c.Chmod(ctx, dir, 0o700)
		require.NoError(t, err)
	}
	mu.Lock()
	clk = clk.Add(time.Hour) // every listing the box gave is old now
	mu.Unlock()
	ents, err := c.ReadDir(ctx, "d/e")
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.Equal(t, "f", ents[0].Name)
	fi, err := c.Lookup(ctx, "d")
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.True(t, fi.Mtime.Equal(mt))
	assert.Empty(t, p.Calls(), "calls before the barrier")

	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, []int{5}, r.took(), "d, d/e, d/e/f, then the attributes of d/e and d")
	for _, dir := range []string{"d", "d/e"} {
		got, err := inner.Lstat(ctx, root+"/"+dir)
		require.NoError(t, err)
		assert.True(t, got.Mtime.Equal(mt), "%s in the box: mtime %v", dir, got.Mtime)
		assert.Equal(t, "drwx------", got.Mode.String(), dir)
	}
	assert.Equal(t, "data", boxRead(t, r, "d/e/f"))
	fi, err = c.Getattr(ctx, "d")
	require.NoError(t, err)
	assert.True(t, fi.Mtime.Equal(mt), "the cache holds what the box answered")
}

// A rename of a directory made here first sends it to the box (the box
// renames what it has), then renames it.
func TestBehindRenameSettlesFirst(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	ctx := t.Context()
	_, err := c.ReadDir(ctx, "")
	require.NoError(t, err)
	_, err = c.Mkdir(ctx, "a", 0o755)
	require.NoError(t, err)
	h := write(t, c, "a/f", "x")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	require.NoError(t, c.Rename(ctx, "a", "b"))
	assert.Equal(t, "x", boxRead(t, r, "b/f"))
	_, err = c.Lookup(ctx, "a")
	assert.True(t, providers.IsCode(err, providers.NotFound), "a after the rename: %v", err)
}

// In write-behind a file the host made or wrote and the box lacks stays
// listed, whatever listing of the box comes in before its push: the walk
// after a command, a listing asked again after a gap of the watch, and
// one taken after the box removed a file the host holds writes of
// (F-dirty).
func TestBehindListingsShowUnpushedFiles(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &batchRemote{Remote: inner}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	ctx := t.Context()
	_, err := c.Mkdir(ctx, "d", 0o755)
	require.NoError(t, err)
	boxWrite(t, r, "d/old", "old")
	_, err = c.ReadDir(ctx, "d") // the listing vouches that "new" is free
	require.NoError(t, err)
	for _, n := range []string{"d/new", "d/old"} {
		h := write(t, c, n, "host's "+n)
		require.NoError(t, h.Flush(ctx))
		h.Release(ctx)
	}
	require.NoError(t, inner.Remove(ctx, root+"/d/old"))
	listed := func(why string) {
		t.Helper()
		fis, err := c.ReadDir(ctx, "d")
		require.NoError(t, err, why)
		sizes := map[string]int64{}
		for _, fi := range fis {
			sizes[fi.Name] = fi.Size
		}
		assert.Equal(t, map[string]int64{"new": int64(len("host's d/new")), "old": int64(len("host's d/old"))}, sizes, why)
	}
	listed("before any listing of the box")
	_, err = c.Refresh(ctx)
	require.NoError(t, err)
	listed("after the walk that follows a command")
	c.Reported(nil, true)
	listed("after a gap of the watch")
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, "host's d/new", boxRead(t, r, "d/new"))
	assert.Equal(t, "host's d/old", boxRead(t, r, "d/old"))
}

// A batch holds the content locks of its files until the box answers, so
// every push takes them in one order (the order files were made), not a
// map's: a background batch and a barrier pushing overlapping files at
// once would otherwise each hold a lock the other waits for.
func TestBehindBatchInCreationOrder(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &orderRemote{batchRemote: batchRemote{Remote: inner}}
	c := behindCache(t, r, cache.Options{BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	ctx := t.Context()
	var names []string
	for i := range 20 {
		n := fmt.Sprintf("f%02d", i)
		names = append(names, root+"/"+n)
		h := write(t, c, n, n)
		require.NoError(t, h.Flush(ctx))
		h.Release(ctx)
	}
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, names, r.names, "the batch's files, in order")
}

// orderRemote is a batchRemote that records the names of its writes, in
// order.
type orderRemote struct {
	batchRemote
	names []string
}

func (r *orderRemote) WriteFiles(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	r.mu.Lock()
	for _, f := range files {
		r.names = append(r.names, f.Name)
	}
	r.mu.Unlock()
	return r.batchRemote.WriteFiles(ctx, files)
}
