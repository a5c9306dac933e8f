package cache

import (
	"context"
	"sync"
	"time"
)

// Write-behind (Options.WriteBehind): close(2) returns once the file's
// bytes are in the journal (they are, from its first write), and the files
// closed dirty are pushed in batches, one round trip each where the remote
// is a providers.BatchWriter: a batch goes BehindDelay after the last
// close, BehindMaxWait after the first one it holds at the latest, and at
// once when it holds BehindFiles files or BehindBytes bytes. A push that
// fails leaves its file dirty, is told to Options.PushFailed, and is tried
// again after a pause that grows while it keeps failing. FlushAll is the
// barrier: it pushes every dirty file and returns the error of any that
// still fails.

// Write-behind defaults.
const (
	DefaultBehindDelay   = 100 * time.Millisecond
	DefaultBehindMaxWait = time.Second
	DefaultBehindFiles   = 1000
	DefaultBehindBytes   = 64 << 20
	behindRetryMax       = 30 * time.Second
)

// behind is the queue of files closed dirty, waiting for their batch.
type behind struct {
	c    *Cache
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	pending map[*file]bool
	bytes   int64
	first   time.Time // when the oldest pending close came
	timer   *time.Timer
	retry   time.Duration // the pause before the next try after failures; 0 after a success
}

func newBehind(c *Cache) *behind {
	b := &behind{c: c, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), pending: map[*file]bool{}}
	go b.run()
	return b
}

// closed queues f, closed with writes the box does not have.
func (b *behind) closed(f *file) {
	size := f.localSize()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.pending[f] {
		b.pending[f] = true
		b.bytes += size
	}
	b.planLocked()
}

// changed notes a directory made or changed here: it goes with the next
// batch.
func (b *behind) changed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.planLocked()
}

// planLocked plans the next batch after a change. b.mu held.
func (b *behind) planLocked() {
	now := time.Now()
	if b.first.IsZero() {
		b.first = now
	}
	o := b.c.opts
	if len(b.pending) >= o.BehindFiles || b.bytes >= o.BehindBytes {
		b.fireLocked(0)
		return
	}
	b.fireLocked(min(o.BehindDelay, max(0, b.first.Add(o.BehindMaxWait).Sub(now))))
}

// fireLocked has the pusher run after d (replacing an earlier plan). b.mu
// held.
func (b *behind) fireLocked(d time.Duration) {
	if b.timer != nil {
		b.timer.Stop()
	}
	if d <= 0 {
		b.signal()
		return
	}
	b.timer = time.AfterFunc(d, b.signal)
}

func (b *behind) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// run pushes a batch each time one is due, until close.
func (b *behind) run() {
	defer close(b.done)
	for {
		select {
		case <-b.stop:
			return
		case <-b.kick:
		}
		b.mu.Lock()
		files := make([]*file, 0, len(b.pending))
		for f := range b.pending {
			files = append(files, f)
		}
		clear(b.pending)
		b.bytes, b.first = 0, time.Time{}
		b.mu.Unlock()
		b.push(files)
	}
}

// push pushes one batch and plans a retry of what failed.
func (b *behind) push(files []*file) {
	c := b.c
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.BehindTimeout)
	defer cancel()
	var failed []*file
	err := c.pushAll(ctx, files, func(rel string, err error) {
		if c.opts.PushFailed != nil {
			c.opts.PushFailed(rel, err)
		}
	})
	for _, f := range files {
		if f.isDirty() {
			failed = append(failed, f)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil && len(failed) == 0 {
		b.retry = 0
		return
	}
	b.retry = min(max(2*b.retry, time.Second), behindRetryMax)
	c.log.Warn("write-behind: files not pushed; trying again", "files", len(failed), "after", b.retry)
	for _, f := range failed {
		if !b.pending[f] {
			b.pending[f] = true
			b.bytes += f.localSize()
		}
	}
	b.first = time.Time{}
	b.fireLocked(b.retry)
}

// close stops the pusher; what is pending stays dirty and journaled.
func (b *behind) close() {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	close(b.stop)
	<-b.done
}

// localSize is the size of f's content here.
func (f *file) localSize() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// dirtied adds f to the dirty set. f.mu may be held.
func (c *Cache) dirtied(f *file) {
	c.dirtyMu.Lock()
	c.dirty[f] = struct{}{}
	c.dirtyMu.Unlock()
}

// clean takes f out of the dirty set. f.mu may be held.
func (c *Cache) clean(f *file) {
	c.dirtyMu.Lock()
	delete(c.dirty, f)
	c.dirtyMu.Unlock()
}

// dirtyFiles returns the files holding writes the box does not have.
func (c *Cache) dirtyFiles() []*file {
	c.dirtyMu.Lock()
	fs := make([]*file, 0, len(c.dirty))
	for f := range c.dirty {
		fs = append(fs, f)
	}
	c.dirtyMu.Unlock()
	out := fs[:0]
	for _, f := range fs {
		if f.isDirty() {
			out = append(out, f)
		}
	}
	return out
}

// WriteBehind reports whether the cache acknowledges a close at the
// journal and pushes in batches.
func (c *Cache) WriteBehind() bool { return c.opts.WriteBehind }
