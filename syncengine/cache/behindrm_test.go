package cache_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// rmRemote is a batchRemote that also takes batches of removes, done one
// call each in order; it records each batch.
type rmRemote struct {
	*batchRemote
	rmu sync.Mutex
	rms [][]providers.FileRemove
}

func (r *rmRemote) RemoveFiles(ctx context.Context, rms []providers.FileRemove) ([]error, error) {
	r.rmu.Lock()
	r.rms = append(r.rms, rms)
	r.rmu.Unlock()
	out := make([]error, len(rms))
	for i, rm := range rms {
		if rm.Dir {
			out[i] = r.Remote.Rmdir(ctx, rm.Name)
		} else {
			out[i] = r.Remote.Remove(ctx, rm.Name)
		}
	}
	return out, nil
}

func (r *rmRemote) tookRms() [][]providers.FileRemove {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	out := r.rms
	r.rms = nil
	return out
}

// rmSetup is a write-behind cache over a box holding d/a, d/b and d/e/f,
// listed, with a clock the test moves.
func rmSetup(t *testing.T, pushFailed func(rel string, err error)) (c *cache.Cache, r *rmRemote, inner cache.Remote, later func()) {
	c, r, inner, later, _ = rmSetupFake(t, pushFailed, time.Hour)
	return c, r, inner, later
}

func rmSetupFake(t *testing.T, pushFailed func(rel string, err error), delay time.Duration) (c *cache.Cache, r *rmRemote, inner cache.Remote, later func(), p *fake.Provider) {
	t.Helper()
	p, _, inner = fakeBox(t)
	r = &rmRemote{batchRemote: &batchRemote{Remote: inner}}
	ctx := t.Context()
	require.NoError(t, inner.Mkdir(ctx, root+"/d", 0o755))
	require.NoError(t, inner.Mkdir(ctx, root+"/d/e", 0o755))
	for _, n := range []string{"d/a", "d/b", "d/e/f"} {
		boxWrite(t, r, n, "box's "+n)
	}
	clk := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clk
	}
	later = func() {
		mu.Lock()
		clk = clk.Add(time.Hour) // every listing and stat the box gave is old
		mu.Unlock()
	}
	c = behindCache(t, r, cache.Options{BehindDelay: delay, BehindMaxWait: time.Hour, Now: now, PushFailed: pushFailed})
	for _, dir := range []string{"", "d", "d/e"} {
		_, err := c.ReadDir(ctx, dir)
		require.NoError(t, err)
	}
	return c, r, inner, later, p
}

func listed(t *testing.T, c *cache.Cache, dir string) []string {
	t.Helper()
	ents, err := c.ReadDir(t.Context(), dir)
	require.NoError(t, err)
	return names(ents)
}

func boxHas(t *testing.T, r cache.Remote, name string) bool {
	t.Helper()
	_, err := r.Lstat(t.Context(), root+"/"+name)
	if providers.IsCode(err, providers.NotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

// In write-behind rm -r of a tree the box has asks nothing of the box:
// the names are gone from what the host shows at once, also from the
// box's listings taken before the batch, and the batch removes them in
// one round trip, children before their directory.
func TestBehindRemovesGoWithTheBatch(t *testing.T) {
	c, r, inner, later, p := rmSetupFake(t, nil, time.Hour)
	ctx := t.Context()
	p.ResetCalls()
	require.NoError(t, c.Remove(ctx, "d/a"))
	require.NoError(t, c.Remove(ctx, "d/e/f"))
	require.NoError(t, c.Rmdir(ctx, "d/e"))
	assert.Empty(t, p.Calls(), "calls to the box before the batch")
	assert.True(t, boxHas(t, inner, "d/a"), "the box keeps d/a until the batch")

	_, err := c.Lookup(ctx, "d/a")
	assert.True(t, providers.IsCode(err, providers.NotFound), "d/a after its remove: %v", err)
	assert.Equal(t, []string{"b"}, listed(t, c, "d"))
	later() // the box is asked again: it still has the names
	assert.Equal(t, []string{"b"}, listed(t, c, "d"), "a listing of the box before the batch")
	_, err = c.Getattr(ctx, "d/e")
	assert.True(t, providers.IsCode(err, providers.NotFound), "d/e after its rmdir: %v", err)
	_, err = c.Getattr(ctx, "d/e/f")
	assert.True(t, providers.IsCode(err, providers.NotFound), "d/e/f after its remove: %v", err)

	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, [][]providers.FileRemove{{
		{Name: root + "/d/a"}, {Name: root + "/d/e/f"}, {Name: root + "/d/e", Dir: true},
	}}, r.tookRms(), "one batch of removes, in the order they were made")
	for _, n := range []string{"d/a", "d/e/f", "d/e"} {
		assert.False(t, boxHas(t, inner, n), "%s in the box after the barrier", n)
	}
	assert.True(t, boxHas(t, inner, "d/b"))
	later()
	assert.Equal(t, []string{"b"}, listed(t, c, "d"), "after the batch")
}

// A name removed and made again before the batch: the batch removes the
// box's file first, then writes the host's.
func TestBehindRemoveThenMadeAgain(t *testing.T) {
	c, r, inner, _ := rmSetup(t, nil)
	ctx := t.Context()
	require.NoError(t, c.Remove(ctx, "d/a"))
	h := write(t, c, "d/a", "host's new d/a")
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	require.NoError(t, c.Remove(ctx, "d/e/f"))
	require.NoError(t, c.Rmdir(ctx, "d/e"))
	_, err := c.Mkdir(ctx, "d/e", 0o700)
	require.NoError(t, err)
	got, ok := read(t, c, "d/a")
	require.True(t, ok)
	assert.Equal(t, "host's new d/a", got)

	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, "host's new d/a", boxRead(t, r, "d/a"))
	fi, err := inner.Lstat(ctx, root+"/d/e")
	require.NoError(t, err)
	assert.Equal(t, "drwx------", fi.Mode.String(), "d/e as the host made it again")
	assert.False(t, boxHas(t, inner, "d/e/f"))
}

// A remove the box refuses (it filled the directory meanwhile) fails the
// barrier that sends it (a batch's is told to PushFailed); the name comes back as the box has it, and the barrier after
// succeeds.
func TestBehindRemoveRefused(t *testing.T) {
	c, r, inner, _ := rmSetup(t, nil)
	ctx := t.Context()
	require.NoError(t, c.Remove(ctx, "d/e/f"))
	require.NoError(t, c.Rmdir(ctx, "d/e"))
	boxWrite(t, r, "d/e/g", "the box's own")

	err := c.FlushAll(ctx)
	require.Error(t, err, "the barrier after a refused remove")
	assert.Contains(t, err.Error(), root+"/d/e", "the error names what the box refused")
	assert.Equal(t, []string{"a", "b", "e"}, listed(t, c, "d"), "d/e as the box has it")
	assert.Equal(t, []string{"g"}, listed(t, c, "d/e"))
	assert.False(t, boxHas(t, inner, "d/e/f"), "the remove before it was done")
	assert.NoError(t, c.FlushAll(ctx), "the next barrier")
}

// A queued remove is journaled: a daemon killed before the batch leaves
// it queued for the next, which hides the name and sends the remove.
func TestBehindRemoveSurvivesACrash(t *testing.T) {
	_, _, inner := fakeBox(t)
	ctx := t.Context()
	boxWrite(t, inner, "gone", "box's")
	boxWrite(t, inner, "kept", "box's")
	dir := t.TempDir()
	o := cache.Options{Dir: dir, Root: root, Box: "test", WriteBehind: true, BehindDelay: time.Hour, BehindMaxWait: time.Hour}
	c, err := cache.Open(inner, o)
	require.NoError(t, err)
	_, err = c.ReadDir(ctx, "")
	require.NoError(t, err)
	require.NoError(t, c.Remove(ctx, "gone"))
	require.NoError(t, c.Close()) // no barrier: as a kill leaves it
	require.True(t, boxHas(t, inner, "gone"))

	c2, err := cache.Open(inner, o)
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Lookup(ctx, "gone")
	assert.True(t, providers.IsCode(err, providers.NotFound), "the removed name after a restart: %v", err)
	require.NoError(t, c2.Recover(ctx))
	assert.False(t, boxHas(t, inner, "gone"))
	assert.True(t, boxHas(t, inner, "kept"))
}

// A batch whose remove the box refuses tells PushFailed (the mount's err
// file), and the next barrier fails with it, once.
func TestBehindRemoveRefusedInABatch(t *testing.T) {
	var mu sync.Mutex
	var told []string
	c, r, _, _, _ := rmSetupFake(t, func(rel string, err error) {
		var rm *cache.RemoveError
		if !errors.As(err, &rm) || rm.Queued {
			t.Errorf("told %s: %v, want a refused remove", rel, err)
		}
		mu.Lock()
		told = append(told, rel)
		mu.Unlock()
	}, time.Millisecond)
	ctx := t.Context()
	boxWrite(t, r, "d/e/g", "the box's own")
	require.NoError(t, c.Remove(ctx, "d/e/f"))
	require.NoError(t, c.Rmdir(ctx, "d/e")) // the host's listing of d/e is old
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(told) > 0
	}, 10*time.Second, time.Millisecond, "the batch's refusal told")
	mu.Lock()
	assert.Equal(t, []string{"d/e"}, told)
	mu.Unlock()
	err := c.FlushAll(ctx)
	require.Error(t, err, "the barrier after the batch")
	assert.Contains(t, err.Error(), root+"/d/e")
	assert.NoError(t, c.FlushAll(ctx), "the barrier after that")
}

// gatedRmRemote holds each batch of removes until let go.
type gatedRmRemote struct {
	rmRemote
	asked, release chan struct{}
}

func (r *gatedRmRemote) RemoveFiles(ctx context.Context, rms []providers.FileRemove) ([]error, error) {
	r.asked <- struct{}{}
	<-r.release
	return r.rmRemote.RemoveFiles(ctx, rms)
}

func (r *gatedRmRemote) waitAsked(t *testing.T) {
	t.Helper()
	select {
	case <-r.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch of removes sent")
	}
}

// In write-through, removes on a remote box that takes batches of them
// are sent as they come, without waiting: the first goes at once, and
// those made while it is out go together in the next batch. A name made
// again after its remove goes to the box after it.
func TestThroughRemovesArePipelined(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &gatedRmRemote{rmRemote: rmRemote{batchRemote: &batchRemote{Remote: inner}},
		asked: make(chan struct{}), release: make(chan struct{})}
	ctx := t.Context()
	require.NoError(t, inner.Mkdir(ctx, root+"/d", 0o755))
	for i := range 10 {
		boxWrite(t, inner, "d/f"+string(rune('0'+i)), "box's")
	}
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour, PipelineRemoves: true})
	require.NoError(t, err)
	defer c.Close()
	for _, dir := range []string{"", "d"} {
		_, err = c.ReadDir(ctx, dir)
		require.NoError(t, err)
	}

	require.NoError(t, c.Remove(ctx, "d/f0"))
	r.waitAsked(t) // the first batch is out
	for i := 1; i < 10; i++ {
		require.NoError(t, c.Remove(ctx, "d/f"+string(rune('0'+i))), "remove while a batch is out")
	}
	require.NoError(t, c.Rmdir(ctx, "d"))
	_, err = c.Lookup(ctx, "d")
	assert.True(t, providers.IsCode(err, providers.NotFound), "d after its rmdir: %v", err)
	made := make(chan error, 1)
	go func() { // a directory made again under the name waits for the removes
		_, err := c.Mkdir(ctx, "d", 0o700)
		made <- err
	}()
	r.release <- struct{}{}
	r.waitAsked(t) // the second batch: all that queued meanwhile
	r.release <- struct{}{}
	require.NoError(t, <-made)
	batches := r.tookRms()
	require.Len(t, batches, 2)
	assert.Len(t, batches[0], 1)
	assert.Len(t, batches[1], 10, "nine files and their directory")
	fi, err := inner.Lstat(ctx, root+"/d")
	require.NoError(t, err)
	assert.Equal(t, "drwx------", fi.Mode.String(), "the box's d is the one made after the removes")
	ents, err := inner.ReadDir(ctx, root+"/d")
	require.NoError(t, err)
	assert.Empty(t, ents)
}

// A name removed here and made again where the host cannot make it alone
// (its directory's listing is old): the queued remove goes first, so the
// box's old file neither refuses an O_EXCL create nor removes the new one.
func TestBehindRemoveThenCreateInTheBox(t *testing.T) {
	c, r, _, later := rmSetup(t, nil)
	ctx := t.Context()
	require.NoError(t, c.Remove(ctx, "d/a"))
	later() // the listing of d is old: the create goes to the box
	h, _, err := c.Create(ctx, "d/a", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
	require.NoError(t, err, "an O_EXCL create of the removed name")
	_, err = h.WriteAt([]byte("new"), 0)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))
	h.Release(ctx)
	require.NoError(t, c.FlushAll(ctx))
	assert.Equal(t, "new", boxRead(t, r, "d/a"))
}
