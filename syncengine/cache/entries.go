package cache

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/boxfs/boxfs/internal/pathmap"
	"github.com/boxfs/boxfs/providers"
)

// A box decides how many entries it lists, and each costs the daemon
// memory: about 520 bytes in the cache (the listing's copy, the
// attributes' copy and the path index; measured in entries_test.go). Two
// bounds hold it. A listing of more than Options.MaxListing entries is
// TooLarge (EFBIG), and nothing of it is kept: a lookup in it stats the
// one name. Past Options.MaxEntries
// entries held by all the listings, the least recently used listings are
// forgotten, with the attributes of their names (but those of paths the
// host holds anything of: a file's state, a listing, a pending change),
// down to three quarters of the bound; they are asked of the box again at
// their next use. A listing holding a change the box does not have yet
// (write-behind) is kept.
//
// Forgetting happens only while no fetch is in flight: the model
// (model.go) then holds no marks, so nothing forgotten can change a
// verdict, and the next look is a fetch like any other, whose answer is
// at least as new as what was forgotten (F-mono). What the fetches
// learned since the last Refresh (learned.go) cannot be told apart from
// what was forgotten, so the next Refresh reports All: the kernel's
// entries are all dropped (F-cmd). After a large eviction the maps are
// built again (a Go map keeps its size when emptied) and the memory is
// handed back to the OS.

const (
	// DefaultMaxListing is the most entries of one directory's listing.
	DefaultMaxListing = 100_000
	// DefaultMaxEntries is the most entries the listings of one box hold
	// in all (about 100 MiB of the daemon's memory).
	DefaultMaxEntries = 200_000
)

// compactMin is the fewest entries forgotten at once that make the maps
// be built again and the memory handed back.
var compactMin = 20_000

// listingUse orders the listings by use, and counts their entries. c.mu.
type listingUse struct {
	tick uint64
	// held is the entries the listings hold, counted again when it
	// passes the bound (listings also change in place).
	held int
	// tooLarge are the directories last found over MaxListing: a lookup
	// in one stats the name alone, until a listing of it is installed.
	tooLarge map[string]bool
}

// tooLargeMax bounds the directories kept as too large to list.
const tooLargeMax = 1024

// noteTooLargeLocked notes rel was found too large to list. c.mu held.
func (c *Cache) noteTooLargeLocked(rel string) {
	if c.lists.tooLarge == nil || len(c.lists.tooLarge) >= tooLargeMax {
		c.lists.tooLarge = map[string]bool{}
	}
	c.lists.tooLarge[rel] = true
}

// touchListingLocked notes d was just used. c.mu held.
func (c *Cache) touchListingLocked(d *dirList) {
	c.lists.tick++
	d.used = c.lists.tick
	d.usedAt = c.now()
}

// errListingCapped is listRemote's error for a directory the box refused
// to list past Options.MaxListing entries.
var errListingCapped = errors.New("listing over the cap")

// listRemote asks the box for rel's listing: where the box can refuse a
// directory of more than MaxListing entries before sending any of it
// (providers.CappedLister), the daemon never holds more than the cap of
// it; elsewhere the whole listing comes, and ReadDir refuses it after.
func (c *Cache) listRemote(ctx context.Context, rel string) ([]providers.FileInfo, error) {
	if cl, ok := c.remote.(providers.CappedLister); ok {
		list, err := cl.ReadDirMax(ctx, c.abs(rel), c.opts.MaxListing)
		switch providers.CodeOf(err) {
		case providers.Unsupported:
		case providers.TooLarge:
			return nil, fmt.Errorf("%w: %w", errListingCapped, err)
		default:
			return list, err
		}
	}
	return c.remote.ReadDir(ctx, c.abs(rel))
}

// tooLargeCapped is the error of a listing the box refused past the cap.
func (c *Cache) tooLargeCapped(rel string) error {
	return providers.Errorf(providers.TooLarge, "cache.ReadDir",
		"the directory has more than the %d entries a listing may hold", c.opts.MaxListing).
		WithBox(c.opts.Box).WithPath(c.abs(rel))
}

// tooLarge is the error of a listing of n entries, over the bound.
func (c *Cache) tooLarge(rel string, n int) error {
	return providers.Errorf(providers.TooLarge, "cache.ReadDir",
		"the directory has %d entries, more than the %d a listing may hold", n, c.opts.MaxListing).
		WithBox(c.opts.Box).WithPath(c.abs(rel))
}

// boundListingsLocked notes n entries installed, and forgets the least
// recently used listings (never keep's) when the listings hold more than
// Options.MaxEntries and no fetch is in flight. It reports whether it
// forgot enough that the caller, once c.mu is free, should hand memory
// back (freeMemory). c.mu held.
func (c *Cache) boundListingsLocked(keep string, n int) (free bool) {
	c.lists.held += n
	if c.lists.held <= c.opts.MaxEntries || c.fm.inflight > 0 {
		return false
	}
	type listing struct {
		rel string
		d   *dirList
	}
	var all []listing
	total := 0
	c.dirs.Range(func(p string, d *dirList) bool {
		total += len(d.entries)
		all = append(all, listing{p, d})
		return true
	})
	c.lists.held = total
	if total <= c.opts.MaxEntries {
		return false
	}
	slices.SortFunc(all, func(a, b listing) int {
		switch {
		case a.d.used < b.d.used:
			return -1
		case a.d.used > b.d.used:
			return 1
		}
		return 0
	})
	target := c.opts.MaxEntries / 4 * 3
	forgot := 0
	for _, l := range all {
		if total <= target {
			break
		}
		if l.rel == keep || l.d.local || c.pdirs.Has(l.rel) || c.pdirs.HasUnder(l.rel) || c.news.HasUnder(l.rel) {
			continue
		}
		total -= len(l.d.entries)
		forgot += len(l.d.entries)
		c.forgetListingLocked(l.rel)
	}
	c.lists.held = total
	if forgot == 0 {
		return false
	}
	c.fm.learned.all, c.fm.learned.paths = true, nil
	c.log.Debug("cache: forgot listings past the bound", "entries", forgot, "held", total, "max", c.opts.MaxEntries)
	if forgot < compactMin {
		return false
	}
	c.attrs = rebuilt(c.attrs)
	c.dirs = rebuilt(c.dirs)
	return true
}

// forgetListingLocked drops rel's listing and the attributes of its
// names, but those the host holds more of. c.mu held.
func (c *Cache) forgetListingLocked(rel string) {
	c.dirs.Delete(rel)
	var drop []string
	c.attrs.Children(rel, func(name string) {
		p := join(rel, name)
		if !c.dirs.Has(p) && !c.files.Has(p) && !c.attrs.HasUnder(p) && !c.news.Has(p) && !c.pdirs.Has(p) {
			drop = append(drop, p)
		}
	})
	for _, p := range drop {
		c.attrs.Delete(p)
	}
}

// rebuilt copies m into a new map of its size: a Go map keeps its
// buckets when its entries go.
func rebuilt[V any](m *pathmap.Map[V]) *pathmap.Map[V] {
	n := pathmap.New[V]()
	m.Range(func(p string, v V) bool {
		n.Set(p, v)
		return true
	})
	return n
}

// freeMemory hands the memory of forgotten listings back to the OS. No
// lock held.
func freeMemory() { debug.FreeOSMemory() }
