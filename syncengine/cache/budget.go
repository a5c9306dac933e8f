package cache

import (
	"container/list"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Budget bounds the host disk the content caches of a mount use, all its
// boxes together: past it, the copies of clean files no open holds are
// removed, least recently used first (they are fetched again at their next
// open). Files with writes the box lacks are never removed; they count.
type Budget struct {
	max int64

	mu   sync.Mutex
	used int64
	lru  list.List // of *charge, most recently used at the front
}

// charge is what one cached file counts against a Budget.
type charge struct {
	c    *Cache
	f    *file
	size int64
	el   *list.Element
}

// NewBudget returns a budget of max bytes (no bound when max <= 0).
func NewBudget(max int64) *Budget {
	return &Budget{max: max}
}

// DefaultBudget is a tenth of the file system dir is on, or 0 (no bound)
// when it cannot be told.
func DefaultBudget(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize) / 10
}

// Max is the budget's bound in bytes (0: none).
func (b *Budget) Max() int64 { return b.max }

// Used is what the caches count against it now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// charged notes that f's copy holds size bytes and was just used, and
// removes least recently used copies past the bound. No lock is held.
func (c *Cache) charged(f *file, size int64) {
	b := c.opts.Budget
	if b == nil {
		return
	}
	b.mu.Lock()
	ch := f.charge
	if ch == nil {
		ch = &charge{c: c, f: f}
		ch.el = b.lru.PushFront(ch)
		f.charge = ch
	} else {
		b.lru.MoveToFront(ch.el)
	}
	b.used += size - ch.size
	ch.size = size
	victims := b.overLocked()
	b.mu.Unlock()
	b.evict(victims)
}

// used notes that f was just used.
func (c *Cache) used(f *file) {
	b := c.opts.Budget
	if b == nil {
		return
	}
	b.mu.Lock()
	if ch := f.charge; ch != nil {
		b.lru.MoveToFront(ch.el)
	}
	b.mu.Unlock()
}

// uncharged notes that f's copy is gone. f.mu may be held.
func (c *Cache) uncharged(f *file) {
	b := c.opts.Budget
	if b == nil {
		return
	}
	b.mu.Lock()
	if ch := f.charge; ch != nil {
		b.lru.Remove(ch.el)
		b.used -= ch.size
		f.charge = nil
	}
	b.mu.Unlock()
}

// overLocked takes off the list, least recent first, the charges whose
// copies are removed to get back within the bound. b.mu held.
func (b *Budget) overLocked() []*charge {
	if b.max <= 0 {
		return nil
	}
	var victims []*charge
	for el := b.lru.Back(); el != nil && b.used > b.max; {
		ch := el.Value.(*charge)
		prev := el.Prev()
		if ch.size > 0 {
			b.lru.Remove(el)
			b.used -= ch.size
			ch.f.charge = nil
			victims = append(victims, ch)
		}
		el = prev
	}
	return victims
}

// evict removes the copies of victims that are clean and not open; the
// others (written to, or opened, since) count again. A copy whose content
// is in use (a fetch, a read, a push) is busy too: waiting for it could
// wait for the fetch that is making room.
func (b *Budget) evict(victims []*charge) {
	for _, ch := range victims {
		f := ch.f
		if !f.content.TryLock() {
			b.restore(ch)
			continue
		}
		f.mu.Lock()
		busy := f.dirty || f.nopen > 0 || f.data != nil
		if !busy {
			os.Remove(ch.c.dataPath(f.id))
			f.valid = false
			f.version++
		}
		f.mu.Unlock()
		f.content.Unlock()
		if busy {
			b.restore(ch)
		}
	}
}

// restore puts back a charge evict found busy, as the most recent.
func (b *Budget) restore(ch *charge) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch.f.charge != nil {
		return // charged again meanwhile
	}
	ch.el = b.lru.PushFront(ch)
	ch.f.charge = ch
	b.used += ch.size
}

// forgetCache drops the charges of c's files: the cache is closed.
func (b *Budget) forgetCache(c *Cache) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for el := b.lru.Front(); el != nil; {
		next := el.Next()
		if ch := el.Value.(*charge); ch.c == c {
			b.lru.Remove(el)
			b.used -= ch.size
			ch.f.charge = nil
		}
		el = next
	}
}
