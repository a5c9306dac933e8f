package cache

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/internal/pathmap"
	"github.com/boxfs/boxfs/providers"
)

// Changes are the paths a refresh found different from what the cache knew,
// or from what it knew at the refresh before (see learned.go).
type Changes struct {
	Added   []string // now present where the cache knew the directory (or knew the name missing, or another kind under it)
	Changed []string // size, mode, mtime or (for a file) link count differ
	Removed []string // known, now gone (or of another kind now: then in Added too)
	All     bool     // more changed than is kept: anything may have
}

// Empty reports whether nothing changed.
func (ch Changes) Empty() bool {
	return len(ch.Added) == 0 && len(ch.Changed) == 0 && len(ch.Removed) == 0 && !ch.All
}

// Refresh lists the whole workspace in one round trip (one walk) and makes
// it the cache's listing, every directory fresh. It returns what differs from
// what the cache knew, so the filesystem can drop the kernel's stale entries
// and pages. Cached content of changed files is refetched at their next open
// (it no longer matches the listing). It is what runs after a command.
func (c *Cache) Refresh(ctx context.Context) (Changes, error) {
	asked := c.now()
	t := c.beginFetch()
	list, err := c.remote.Walk(ctx, c.opts.Root)
	if err != nil {
		c.mu.Lock()
		c.fm.end(t)
		c.mu.Unlock()
		c.Invalidate()
		return Changes{}, err
	}
	ch, ok := c.installWalk(t, asked, list)
	if !ok {
		// A walk begun later was installed first, or the watch had a gap
		// meanwhile; what this one would have changed is not known, so
		// all of it is asked again.
		c.Invalidate()
		return Changes{}, providers.Errorf(providers.Aborted, "cache.Refresh", "a newer listing of the box was installed first, or the watch lost changes")
	}
	c.mu.Lock()
	ch = c.takeLearnedLocked(ch)
	free := c.boundListingsLocked("", len(list))
	c.mu.Unlock()
	if free {
		freeMemory()
	}
	return ch, nil
}

// installWalk makes a walk of the workspace, with ticket t, asked at now, the cache's
// listing, with the host's changes since laid over it and the watch's
// reports since laid over it again, and returns what differs from what
// the cache knew. ok false: a walk begun later was installed first, or
// the watch had a gap, and this one is dropped.
func (c *Cache) installWalk(t ticket, now time.Time, list []providers.FileInfo) (ch Changes, ok bool) {
	attrs := make(map[string]providers.FileInfo, len(list))
	dirs := map[string]*dirList{"": {entries: map[string]providers.FileInfo{}, fetched: now}}
	for _, fi := range list {
		rel := fi.Name
		dir, name := split(rel)
		if transient(name) {
			continue
		}
		fi.Name = name
		attrs[rel] = fi
		if fi.IsDir() {
			if dirs[rel] == nil {
				dirs[rel] = &dirList{entries: map[string]providers.FileInfo{}, fetched: now}
			}
		}
		d := dirs[dir]
		if d == nil {
			d = &dirList{entries: map[string]providers.FileInfo{}, fetched: now}
			dirs[dir] = d
		}
		d.entries[name] = fi
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.fm.end(t)
	if c.fm.judge("", t) == stale || !c.fm.walkInstalled(t, now) {
		return Changes{}, false
	}
	// A directory listed by a fetch begun after the walk keeps that
	// listing: it is the newer answer (F-mono).
	for _, dir := range c.fm.listedSince(t) {
		cur := c.dir(dir)
		if cur == nil {
			continue
		}
		if wd := dirs[dir]; wd != nil {
			for name := range wd.entries {
				if _, ok := cur.entries[name]; !ok {
					delete(attrs, join(dir, name))
				}
			}
		}
		dirs[dir] = cur
		for name, fi := range cur.entries {
			p := join(dir, name)
			if a, ok := c.attrGet(p); ok && !a.neg {
				fi = a.fi
			}
			attrs[p] = fi
		}
	}
	again, host := c.overlayLocked(t, attrs, dirs, nil)
	if c.fm.judge("", t) == reported {
		again = append(again, "")
	}
	trust := c.fm.trusted(t)
	for _, d := range dirs {
		d.trust = trust && !d.fetched.IsZero()
	}
	defer func() {
		for _, p := range again {
			c.staleLocked(p, now)
		}
	}()
	c.attrs.Range(func(rel string, a attrEntry) bool {
		if rel == "" {
			return true
		}
		nf, ok := attrs[rel]
		switch {
		case a.neg && ok:
			ch.Added = append(ch.Added, rel)
		case a.neg:
		case !ok:
			ch.Removed = append(ch.Removed, rel)
		case a.fi.Mode.Type() != nf.Mode.Type():
			// Another kind of file under the name (rm -r d && echo > d): the
			// old one went and a new one came, so the filesystem drops the
			// old node instead of showing a directory's inode for a file.
			ch.Removed = append(ch.Removed, rel)
			ch.Added = append(ch.Added, rel)
		case differs(a.fi, nf):
			ch.Changed = append(ch.Changed, rel)
		}
		return true
	})
	for rel := range attrs {
		if c.attrs.Has(rel) {
			continue
		}
		dir, _ := split(rel)
		if c.dirs.Has(dir) {
			ch.Added = append(ch.Added, rel)
		}
	}
	root, haveRoot := c.attrGet("")
	c.attrs = pathmap.New[attrEntry]()
	clear(c.links)
	for rel, fi := range attrs {
		c.setAttrLocked(rel, attrEntry{fi: fi, at: now, trust: trust})
	}
	for rel, a := range host {
		c.setAttrLocked(rel, a)
	}
	// A name the walk found missing, which the host changed or the watch
	// reported while it was out, is kept as missing (and made stale with
	// the rest of again), not left unknown: a fetch begun before the host
	// changed it and answered after the walk lays the host's state over
	// its answer for the name, and an unknown name keeps what the box had
	// when that fetch was asked (overlayOneLocked), which the host's
	// change undid (F-noundo, F-dirty).
	for _, p := range again {
		if _, ok := attrs[p]; ok || p == "" {
			continue
		}
		if _, kept := host[p]; kept {
			continue
		}
		if dir, _ := split(p); dirs[dir] != nil {
			c.setAttrLocked(p, attrEntry{at: now, neg: true, trust: trust})
		}
	}
	if haveRoot {
		root.at = time.Time{}
		c.attrs.Set("", root)
	}
	c.dirs = pathmap.New[*dirList]()
	for rel, d := range dirs {
		c.dirs.Set(rel, d)
	}
	// What the host made or wrote and the box does not have yet stays
	// shown over the walk, as over any listing.
	c.overlayPendingLocked("", false)
	sortStrings(ch.Added)
	sortStrings(ch.Changed)
	sortStrings(ch.Removed)
	return ch, true
}

// differs reports whether a file's attributes changed in a way the host
// must be told of: its content, its mode, or its names (a hard link made
// or removed in the box changes the link count every name shows).
func differs(a, b providers.FileInfo) bool {
	return a.Mode != b.Mode || a.Size != b.Size || !a.Mtime.Equal(b.Mtime) || a.Target != b.Target ||
		(!a.IsDir() && a.Nlink != b.Nlink)
}

// revalidateDirs is how many directories the cache must know before a
// stale one is renewed with all the others in one walk.
const revalidateDirs = 8

// revalidate renews every listing with one capped walk of the workspace,
// where the remote can walk in one round trip (providers.CappedWalker): a
// walk of a tree outlasting the attribute timeout then costs one round trip
// per timeout, not one per directory. It runs at most once per attribute
// timeout, only when the cache knows several directories, and not for a
// minute after the tree was found larger than Options.WalkMax entries. It
// reports whether the listings are fresh now.
func (c *Cache) revalidate(ctx context.Context) bool {
	c.mu.Lock()
	cw := c.cw
	ok := cw != nil && c.opts.WalkMax > 0 && c.dirs.Len() >= revalidateDirs && !c.fresh(c.fm.lastWalk) && !c.now().Before(c.fm.walkOff)
	c.mu.Unlock()
	if !ok {
		return false
	}
	c.walkMu.Lock()
	defer c.walkMu.Unlock()
	c.mu.Lock()
	done := c.fresh(c.fm.lastWalk) // another caller's walk ran meanwhile
	c.mu.Unlock()
	if done {
		return true
	}
	asked := c.now()
	t := c.beginFetch()
	list, err := cw.WalkMax(ctx, c.opts.Root, c.opts.WalkMax)
	if err != nil {
		c.mu.Lock()
		c.fm.end(t)
		switch providers.CodeOf(err) {
		case providers.TooLarge:
			c.fm.walkOff = c.now().Add(time.Minute)
		case providers.Unsupported:
			c.cw = nil
		}
		c.mu.Unlock()
		return false
	}
	ch, ok := c.installWalk(t, asked, list)
	if ok {
		c.mu.Lock()
		c.learnChangesLocked(ch)
		c.mu.Unlock()
	}
	return ok
}
