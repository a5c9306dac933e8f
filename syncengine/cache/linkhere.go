package cache

import (
	"context"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// A hard link made in write-behind to a file the box does not have yet is
// made on the host alone, as the file's second name (file.alias): git
// writes each object under a temporary name, links it to its real name
// and unlinks the temporary one, and each link asked of the box would be
// a barrier (the box must have the file first). The push makes the file
// under its first name and then links the second there, in the same
// batch. An unlink of either name before the push leaves the file under
// the other alone, to be made there; a rename of either name, or a third
// name, pushes first (settle), as for any file the box has.

// linkHere makes newrel a second name of oldrel on the host when oldrel
// is a file the box does not have yet and newrel's directory listing
// vouches for the name: free, or taken (EEXIST, as link(2) answers,
// without asking the box). done false: ask the box.
func (c *Cache) linkHere(oldrel, newrel string) (fi providers.FileInfo, done bool, err error) {
	if c.behind == nil {
		return fi, false, nil
	}
	f := c.hostOnly(oldrel)
	if f == nil {
		return fi, false, nil
	}
	defer f.content.Unlock()
	dir, name := split(newrel)
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dir(dir)
	if !c.usable(d) || transient(name) || len(name) > nameMax {
		return fi, false, nil
	}
	if _, taken := d.entries[name]; taken {
		return fi, true, providers.PathError("cache.Link", c.opts.Box, c.abs(newrel), syscall.EEXIST)
	}
	if c.file(newrel) != nil || c.pdirs.Has(newrel) {
		return fi, false, nil
	}
	f.mu.Lock()
	if f.alias != "" || f.rel != oldrel {
		f.mu.Unlock()
		return fi, false, nil
	}
	f.alias = newrel
	f.base.Nlink = max(f.base.Nlink, 1) + 1
	f.journalLocked(c)
	fi, _ = f.localAttrLocked()
	f.mu.Unlock()
	c.files.Set(newrel, f)
	c.news.Set(newrel, f)
	c.touchLocked(oldrel)
	c.recordLocked(oldrel, fi, now)
	c.touchLocked(newrel)
	fi.Name = name
	c.recordLocked(newrel, fi, now)
	c.behind.changed()
	return fi, true, nil
}

// unaliasLocked drops rel, one of the two names of f (made by linkHere),
// on the host: the file lives on under the other, with one link. It
// reports false when f has one name. c.mu and f's content lock held.
func (c *Cache) unaliasLocked(f *file, rel string) bool {
	f.mu.Lock()
	other := f.alias
	switch {
	case other == "":
		f.mu.Unlock()
		return false
	case rel == other:
		other = f.rel
	case rel != f.rel:
		f.mu.Unlock()
		return false
	}
	// A name that stays from a link takes link(2)'s rule: it never
	// replaces a file the box made under it meanwhile.
	f.excl = f.excl || rel == f.rel
	f.rel, f.alias = other, ""
	f.base.Nlink = max(f.base.Nlink, 2) - 1
	f.journalLocked(c)
	fi, _ := f.localAttrLocked()
	f.mu.Unlock()
	if c.file(rel) == f {
		c.files.Delete(rel)
		c.news.Delete(rel)
	}
	now := c.now()
	c.forgetLocked(rel)
	c.setAttrLocked(rel, attrEntry{at: now, neg: true})
	c.touchLocked(other)
	c.recordLocked(other, fi, now)
	return true
}

// hasAlias reports whether f has a second name made on the host.
func (f *file) hasAlias() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alias != ""
}

// linkAlias makes in the box the second name the host gave f (linkHere),
// once the push that made f there has answered fi; the caller holds f's
// content lock. A link the box refuses (the box made a file under the
// name meanwhile: link(2) does not replace it) drops the name on the host,
// and the error says so.
func (c *Cache) linkAlias(ctx context.Context, f *file, fi providers.FileInfo) error {
	f.mu.Lock()
	rel, alias := f.rel, f.alias
	f.mu.Unlock()
	if alias == "" {
		return nil
	}
	defer c.intend(rel, alias)()
	err := c.remote.Link(ctx, c.abs(rel), c.abs(alias))
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f.mu.Lock()
	f.alias = ""
	if err == nil {
		fi.Nlink = max(fi.Nlink, 1) + 1
		f.base.Nlink = fi.Nlink
	}
	f.mu.Unlock()
	if c.file(alias) == f {
		c.news.Delete(alias)
		if err != nil {
			c.files.Delete(alias)
		}
	}
	if err != nil {
		// The box's file, if any: asked at the next lookup.
		c.forgetLocked(alias)
		if d := c.dir(pathDir(alias)); d != nil {
			d.fetched = time.Time{}
		}
		c.log.Warn("a hard link made here was refused by the box; the name is dropped", "path", alias, "to", rel, "err", err)
		return err
	}
	c.touchLocked(rel)
	_, fi.Name = split(rel)
	c.recordLocked(rel, fi, now)
	c.touchLocked(alias)
	_, fi.Name = split(alias)
	c.recordLocked(alias, fi, now)
	c.dirTouchedLocked(alias)
	return nil
}
