package cache

import (
	"sync"
	"time"
)

// Listings are kept while the watch vouches for them, and past the
// attribute timeout they still save a round trip when asked again; held
// forever, a directory walked once keeps its entries in the daemon's
// memory (200,000 of them: about 130 MB) for as long as the mount lives.
// A listing nothing used for ListingIdle is forgotten, as MaxEntries
// forgets the least recently used, and the memory handed back once
// enough went at once; the next use of the directory lists it again.

// DefaultListingIdle is how long an unused listing is kept by default.
const DefaultListingIdle = 10 * time.Minute

// idleSweep runs ForgetIdle every quarter of the idle time, on the real
// clock (the cache's own clock, which tests pin, says what is idle).
type idleSweep struct {
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

func newIdleSweep(c *Cache, idle time.Duration) *idleSweep {
	s := &idleSweep{quit: make(chan struct{}), done: make(chan struct{})}
	if idle <= 0 {
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(max(idle/4, time.Second))
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
				c.ForgetIdle()
			}
		}
	}()
	return s
}

func (s *idleSweep) stop() {
	s.stopOnce.Do(func() { close(s.quit) })
	<-s.done
}

// ForgetIdle forgets the listings nothing used for ListingIdle (those of
// directories the host made or holds unpushed files in excepted, as
// MaxEntries excepts them), and returns how many entries went. Nothing
// goes while a fetch is in flight: what it brings is judged against the
// listings it began with.
func (c *Cache) ForgetIdle() int {
	idle := c.opts.ListingIdle
	if idle <= 0 {
		return 0
	}
	c.mu.Lock()
	if c.fm.inflight > 0 {
		c.mu.Unlock()
		return 0
	}
	before := c.now().Add(-idle)
	var old []string
	forgot := 0
	c.dirs.Range(func(p string, d *dirList) bool {
		last := d.usedAt
		if d.fetched.After(last) {
			last = d.fetched
		}
		if last.Before(before) && !d.local && !c.pdirs.Has(p) && !c.pdirs.HasUnder(p) && !c.news.HasUnder(p) {
			old = append(old, p)
			forgot += len(d.entries)
		}
		return true
	})
	for _, p := range old {
		c.forgetListingLocked(p)
	}
	if len(old) > 0 {
		c.lists.held = max(0, c.lists.held-forgot)
		c.fm.learned.all, c.fm.learned.paths = true, nil
		c.log.Debug("cache: forgot idle listings", "listings", len(old), "entries", forgot, "idle", idle)
	}
	free := forgot >= compactMin
	if free {
		c.attrs = rebuilt(c.attrs)
		c.dirs = rebuilt(c.dirs)
	}
	c.mu.Unlock()
	if free {
		freeMemory()
	}
	return forgot
}
