package cache

import "github.com/boxfs/boxfs/providers"

// A fetch between two refreshes (a listing asked again, a stat, the walk
// that renews stale listings, a prefetch) may find that the box changed a
// path, and install it, without the filesystem hearing of it: the kernel
// keeps its entry for the entry timeout. The next Refresh would then find
// the path as it knows it and report nothing, so what a command changed
// could stay unseen for that long after the command ended. The cache
// therefore keeps what its fetches learned since the last Refresh, and
// Refresh reports it with what its own walk found.

// learnedSet is what the fetches learned since the last Refresh.
type learnedSet struct {
	paths map[string]byte // path -> the learned* bits
	all   bool            // more than learnMax: anything may have changed
}

// learnMax bounds the paths kept; past it Refresh reports All.
const learnMax = 4096

const (
	learnedAdded byte = 1 << iota
	learnedChanged
	learnedRemoved
)

// learnLocked notes that a fetch found rel added, changed or removed in
// the box (kind: the learned* bits). c.mu held.
func (c *Cache) learnLocked(rel string, kind byte) {
	l := &c.fm.learned
	if l.all || rel == "" {
		return
	}
	if l.paths == nil {
		l.paths = map[string]byte{}
	}
	if _, ok := l.paths[rel]; !ok && len(l.paths) >= learnMax {
		l.all, l.paths = true, nil
		return
	}
	l.paths[rel] |= kind
}

// learnAttrLocked compares what the cache knew of rel (old, if known)
// with what a fetch found now (nf, or missing when !found). c.mu held.
func (c *Cache) learnAttrLocked(rel string, old attrEntry, known bool, nf providers.FileInfo, found bool) {
	switch {
	case !known:
	case old.neg && found:
		c.learnLocked(rel, learnedAdded)
	case old.neg:
	case !found:
		c.learnLocked(rel, learnedRemoved)
	case old.fi.Mode.Type() != nf.Mode.Type():
		c.learnLocked(rel, learnedRemoved|learnedAdded)
	case differs(old.fi, nf):
		c.learnLocked(rel, learnedChanged)
	}
}

// learnListingLocked compares a directory's listing the cache knew (old,
// nil if none) with the one a fetch brought. c.mu held.
func (c *Cache) learnListingLocked(rel string, old, now *dirList) {
	if old == nil {
		return
	}
	for name, ofi := range old.entries {
		p := join(rel, name)
		nfi, ok := now.entries[name]
		c.learnAttrLocked(p, attrEntry{fi: ofi}, true, nfi, ok)
	}
	for name := range now.entries {
		if _, ok := old.entries[name]; !ok {
			c.learnLocked(join(rel, name), learnedAdded)
		}
	}
}

// learnChangesLocked keeps what a walk found that Refresh did not return
// (the walk that renews stale listings). c.mu held.
func (c *Cache) learnChangesLocked(ch Changes) {
	for _, p := range ch.Added {
		c.learnLocked(p, learnedAdded)
	}
	for _, p := range ch.Changed {
		c.learnLocked(p, learnedChanged)
	}
	for _, p := range ch.Removed {
		c.learnLocked(p, learnedRemoved)
	}
}

// takeLearnedLocked adds what the fetches learned to ch and forgets it.
// c.mu held.
func (c *Cache) takeLearnedLocked(ch Changes) Changes {
	if c.fm.learned.all {
		ch.All = true
	}
	seen := map[string]bool{}
	for _, l := range [][]string{ch.Added, ch.Changed, ch.Removed} {
		for _, p := range l {
			seen[p] = true
		}
	}
	for p, kind := range c.fm.learned.paths {
		if seen[p] {
			continue
		}
		if kind&learnedRemoved != 0 {
			ch.Removed = append(ch.Removed, p)
		}
		if kind&learnedAdded != 0 {
			ch.Added = append(ch.Added, p)
		}
		if kind&learnedChanged != 0 && kind&learnedRemoved == 0 {
			ch.Changed = append(ch.Changed, p)
		}
	}
	c.fm.learned = learnedSet{}
	sortStrings(ch.Added)
	sortStrings(ch.Changed)
	sortStrings(ch.Removed)
	return ch
}
