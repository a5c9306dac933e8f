package cache

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Changes are the paths a refresh found different from what the cache knew.
type Changes struct {
	Added   []string // now present where the cache knew the directory (or knew the name missing)
	Changed []string // kind, size, mode or mtime differ
	Removed []string // known, now gone
}

// Empty reports whether nothing changed.
func (ch Changes) Empty() bool {
	return len(ch.Added) == 0 && len(ch.Changed) == 0 && len(ch.Removed) == 0
}

// Refresh lists the whole workspace in one round trip (one walk) and makes
// it the cache's listing, every directory fresh. It returns what differs from
// what the cache knew, so the filesystem can drop the kernel's stale entries
// and pages. Cached content of changed files is refetched at their next open
// (it no longer matches the listing). It is what runs after a command.
func (c *Cache) Refresh(ctx context.Context) (Changes, error) {
	start := c.beginFetch()
	list, err := c.remote.Walk(ctx, c.opts.Root)
	if err != nil {
		c.mu.Lock()
		c.endFetchLocked()
		c.mu.Unlock()
		c.Invalidate()
		return Changes{}, err
	}
	now := c.now()
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

	var ch Changes
	c.mu.Lock()
	defer c.mu.Unlock()
	c.overlayLocked(start, attrs, dirs, nil)
	c.endFetchLocked()
	for rel, a := range c.attrs {
		if rel == "" {
			continue
		}
		nf, ok := attrs[rel]
		switch {
		case a.neg && ok:
			ch.Added = append(ch.Added, rel)
		case a.neg:
		case !ok:
			ch.Removed = append(ch.Removed, rel)
		case differs(a.fi, nf):
			ch.Changed = append(ch.Changed, rel)
		}
	}
	for rel := range attrs {
		if _, known := c.attrs[rel]; known {
			continue
		}
		dir, _ := split(rel)
		if _, listed := c.dirs[dir]; listed {
			ch.Added = append(ch.Added, rel)
		}
	}
	root, haveRoot := c.attrs[""]
	c.attrs = make(map[string]attrEntry, len(attrs)+1)
	for rel, fi := range attrs {
		c.attrs[rel] = attrEntry{fi: fi, at: now}
	}
	if haveRoot {
		root.at = time.Time{}
		c.attrs[""] = root
	}
	c.dirs = dirs
	sortStrings(ch.Added)
	sortStrings(ch.Changed)
	sortStrings(ch.Removed)
	return ch, nil
}

func differs(a, b providers.FileInfo) bool {
	return a.Mode != b.Mode || a.Size != b.Size || !a.Mtime.Equal(b.Mtime) || a.Target != b.Target
}
