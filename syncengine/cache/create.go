package cache

import (
	"io/fs"

	"github.com/boxfs/boxfs/providers"
)

// A file created through the mount in a directory whose listing is fresh
// and does not have the name is made on the host only: the push at its
// close makes it in the box, content and attributes in one round trip
// (O_EXCL holds there too: the push does not take a name the box made
// meanwhile). Until it is pushed it is the host's alone: an unlink, a
// truncate or a rename of it costs no round trip either.

// nameMax is the longest name made on the host alone; a longer one is
// the box's to refuse (ENAMETOOLONG) or take.
const nameMax = 255

// createHere makes rel on the host when its directory's listing vouches
// that the name is free; made false means the box must be asked.
func (c *Cache) createHere(rel string, excl bool, perm fs.FileMode) (h *Handle, fi providers.FileInfo, made bool, err error) {
	dir, name := split(rel)
	now := c.now()
	c.mu.Lock()
	d := c.dir(dir)
	if !c.usable(d) || c.file(rel) != nil || transient(name) || len(name) > nameMax {
		c.mu.Unlock()
		return nil, fi, false, nil
	}
	if _, taken := d.entries[name]; taken {
		c.mu.Unlock()
		return nil, fi, false, nil
	}
	// Owner and device as the workspace's (the box's own user makes what
	// the push makes), until the push says.
	owner, _ := c.knownAttrLocked("")
	parent, _ := c.knownAttrLocked(dir)
	gid := owner.GID
	if parent.Mode&fs.ModeSetgid != 0 {
		gid = parent.GID // a set-group-ID directory's group, as the box will give it
	}
	fi = providers.FileInfo{Name: name, Mode: perm.Perm(), Nlink: 1, UID: owner.UID, GID: gid, Dev: parent.Dev,
		Mtime: now, Atime: now, Ctime: now}
	c.nextID++
	f := &file{id: c.nextID, rel: rel, created: true, excl: excl, valid: true, mode: perm.Perm(), base: fi, local: now, nopen: 1}
	c.files.Set(rel, f)
	c.news.Set(rel, f)
	c.touchLocked(rel)
	c.recordLocked(rel, fi, now)
	c.mu.Unlock()

	f.content.Lock()
	f.mu.Lock()
	err = f.openDataLocked(c, true)
	if err == nil {
		f.version++
		f.kernel = f.version
		f.markDirtyLocked(c)
	}
	f.mu.Unlock()
	f.content.Unlock()
	if err != nil {
		c.mu.Lock()
		if c.file(rel) == f {
			c.files.Delete(rel)
			c.news.Delete(rel)
		}
		c.forgetLocked(rel)
		c.mu.Unlock()
		f.unlinked(c)
		return nil, providers.FileInfo{}, true, err
	}
	return &Handle{c: c, f: f, write: true}, fi, true, nil
}

// hostOnly returns rel's content state when the box does not have the
// file yet, with its content lock held (so no push starts meanwhile); the
// caller unlocks it. Else nil.
func (c *Cache) hostOnly(rel string) *file {
	f := c.localFile(rel)
	if f == nil {
		return nil
	}
	f.content.Lock()
	f.mu.Lock()
	only := !f.inBox && !f.gone && f.dirty
	f.mu.Unlock()
	if !only {
		f.content.Unlock()
		return nil
	}
	return f
}

// removeHere unlinks a file the box does not have yet: it is dropped, and
// never pushed. It reports false when the file is in the box.
func (c *Cache) removeHere(rel string) bool {
	f := c.hostOnly(rel)
	if f == nil {
		return false
	}
	c.mu.Lock()
	if c.unaliasLocked(f, rel) {
		c.mu.Unlock()
		f.content.Unlock()
		return true
	}
	if c.file(rel) == f {
		c.files.Delete(rel)
		c.news.Delete(rel)
	}
	c.forgetLocked(rel)
	c.setAttrLocked(rel, attrEntry{at: c.now(), neg: true})
	c.mu.Unlock()
	f.unlinked(c)
	f.content.Unlock()
	return true
}

// renameHere moves a file the box does not have yet to newrel on the host
// (its push makes it there, replacing what the box has under newrel, as
// rename(2) does). It reports false when the box must do the rename: the
// file is in the box, or newrel is a directory.
func (c *Cache) renameHere(oldrel, newrel string) bool {
	if nfi, ok := c.knownAttr(newrel); ok && nfi.IsDir() {
		return false
	}
	f := c.hostOnly(oldrel)
	if f == nil {
		return false
	}
	defer f.content.Unlock()
	c.mu.Lock()
	replaced := c.file(newrel)
	if replaced == f {
		replaced = nil
	}
	if f.hasAlias() || (replaced != nil && replaced.hasAlias()) {
		// A name of a link made here: the box makes the link first.
		c.mu.Unlock()
		return false
	}
	if c.file(oldrel) == f {
		c.files.Delete(oldrel)
		c.news.Delete(oldrel)
	}
	c.news.Delete(newrel)
	c.files.Set(newrel, f)
	fi, _ := c.knownAttrLocked(oldrel)
	c.forgetLocked(oldrel)
	now := c.now()
	c.setAttrLocked(oldrel, attrEntry{at: now, neg: true})
	c.forgetLocked(newrel)
	c.news.Set(newrel, f)
	_, fi.Name = split(newrel)
	c.touchLocked(newrel)
	c.recordLocked(newrel, fi, now)
	c.mu.Unlock()
	f.mu.Lock()
	f.rel = newrel
	f.excl = false // rename(2) replaces
	f.journalLocked(c)
	f.mu.Unlock()
	if replaced != nil {
		replaced.unlinked(c)
	}
	return true
}

// lostCreate drops a file made here with O_EXCL whose push found the name
// taken in the box meanwhile: the box's file stays, and the error says the
// host's copy is not pushed.
func (f *file) lostCreate(c *Cache, rel string, err error) error {
	f.mu.Lock()
	f.gone, f.dirty = true, false
	alias := f.alias
	f.alias = ""
	c.clean(f)
	c.uncharged(f)
	f.unjournalLocked(c)
	f.mu.Unlock()
	c.mu.Lock()
	for _, p := range []string{rel, alias} {
		if p != "" && c.file(p) == f {
			c.files.Delete(p)
			c.news.Delete(p)
		}
	}
	c.mu.Unlock()
	c.Forget(rel) // the box's file: asked at the next lookup
	if alias != "" {
		c.Forget(alias) // made here as a second name of the file: not made
	}
	c.log.Warn("a file made here with O_EXCL was made in the box meanwhile; the host's copy is not pushed", "path", rel)
	return providers.E(providers.Exists, "cache.push", err).WithBox(c.opts.Box).WithPath(c.abs(rel))
}
