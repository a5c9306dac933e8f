package cache

import (
	"context"
	"io/fs"
	"maps"
	"sort"
	"strings"

	"github.com/boxfs/boxfs/internal/pathmap"
	"github.com/boxfs/boxfs/providers"
)

// What the host made or changed and the box does not have yet: files made
// here and not pushed (news), and in write-behind directories made or
// given attributes here (pdirs), which go with the next batch (made before
// its files, their attributes set after them, as tar sets a directory's
// times once it is filled). A listing or stat of the box never overwrites
// them: they are laid over what the box says until they are pushed. A
// directory made here is listed from the host alone until then.

// specialBits are the mode bits chmod sets.
const specialBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// pendingDir is a directory made or changed here in write-behind.
type pendingDir struct {
	fi    providers.FileInfo     // what the host shows
	mkdir bool                   // the box does not have it yet
	perm  fs.FileMode            // its mode when made
	set   providers.WriteOptions // attributes set since (ForceMode: the mode)
	attrs bool                   // set holds something
	seq   uint64                 // when it last changed
	mkSeq uint64                 // when it was made: parents before children
}

// usable reports whether the listing d can answer without the box: fresh
// (or trusted while the watch is: a report of a change zeroes its time),
// or of a directory the box does not have yet.
func (c *Cache) usable(d *dirList) bool {
	return d != nil && (d.local || c.fresh(d.fetched) || (c.fm.vouches(d.trust) && !d.fetched.IsZero()))
}

// pendingAttrLocked returns what the host shows of rel when the box does
// not have it yet: a directory made or changed in write-behind. c.mu held.
func (c *Cache) pendingAttrLocked(rel string) (providers.FileInfo, bool) {
	if pd, ok := c.pdirs.Get(rel); ok {
		return pd.fi, true
	}
	return providers.FileInfo{}, false
}

// eachPendingLocked calls fn for what the host made or changed under dir
// (its direct children when children, else all below it) and the box
// does not have yet, with what the host shows of it: directories made or
// changed here (pd set; parents first), files made here, and files
// holding writes the box lacks (F-dirty: a listing taken after the box
// removed one still lists it, until its push makes it again), each laid
// over the listing in(p) gives for its directory (boxless). c.mu held.
func (c *Cache) eachPendingLocked(dir string, children bool, in func(p string) *dirList, fn func(p string, fi providers.FileInfo, pd *pendingDir)) {
	dirs := kept(c.pdirs, dir, children)
	sort.Strings(dirs) // parents first
	for _, p := range dirs {
		pd, _ := c.pdirs.Get(p)
		fn(p, pd.fi, pd)
	}
	for _, p := range kept(c.news, dir, children) {
		if f, _ := c.news.Get(p); f != nil {
			if fi, ok := f.localAttr(); ok {
				_, fi.Name = split(p) // one of two names made here (linkHere)
				fn(p, fi, nil)
			}
		}
	}
	dirty := func(p string, f *file) {
		if !f.isDirty() {
			return
		}
		if fi, ok := f.localAttr(); ok {
			_, fi.Name = split(p)
			fn(p, boxless(in(p), fi), nil)
		}
	}
	if children {
		// A listing's overlay costs the directory's files the cache
		// holds, not every dirty file of the box.
		for _, p := range kept(c.files, dir, true) {
			if f := c.file(p); f != nil {
				dirty(p, f)
			}
		}
		return
	}
	if dir == "" {
		for _, f := range c.dirtyFiles() {
			if p := f.path(); c.file(p) == f {
				dirty(p, f)
			}
		}
		return
	}
	// The files the cache holds at or under dir, not every dirty file of
	// the box: a forget of one name (each unlink) costs that name, not
	// the size of a batch not pushed yet.
	for _, p := range append(c.files.Under(dir), dir) {
		if f := c.file(p); f != nil {
			dirty(p, f)
		}
	}
}

// overlayPendingLocked lays what the host made or changed under dir (its
// direct children when children, else all below it) over what the cache
// holds of the box, and gives each directory made here its listing back.
// c.mu held.
func (c *Cache) overlayPendingLocked(dir string, children bool) {
	now := c.now()
	listing := func(p string) *dirList { return c.dir(pathDir(p)) }
	for _, p := range c.goneUnderLocked(dir, children) {
		if d := listing(p); d != nil {
			_, name := split(p)
			delete(d.entries, name)
		}
		c.setAttrLocked(p, attrEntry{at: now, neg: true})
		c.dirs.Delete(p)
		c.dirs.DeleteUnder(p)
	}
	c.eachPendingLocked(dir, children, listing, func(p string, fi providers.FileInfo, pd *pendingDir) {
		c.setAttrLocked(p, attrEntry{fi: fi, at: now})
		_, name := split(p)
		if d := listing(p); d != nil {
			d.entries[name] = fi
		}
		if pd != nil && pd.mkdir && c.dir(p) == nil {
			c.dirs.Set(p, &dirList{entries: map[string]providers.FileInfo{}, local: true})
		}
	})
}

// withPendingLocked returns d, a listing of dir from the box that is not
// installed, with what the host made or wrote there and the box does not
// have yet laid over it (a copy, when there is any). c.mu held.
func (c *Cache) withPendingLocked(dir string, d *dirList) *dirList {
	add := c.pendingEntriesLocked(dir).over(d)
	gone := c.goneUnderLocked(dir, true)
	if add == nil && len(gone) == 0 {
		return d
	}
	nd := &dirList{entries: maps.Clone(d.entries), fetched: d.fetched}
	for _, p := range gone {
		_, name := split(p)
		delete(nd.entries, name)
	}
	maps.Copy(nd.entries, add)
	return nd
}

// pendingEntries is what the host shows of a directory's children the
// box does not have yet, by name; dirty names the files among them the
// box had (boxless applies).
type pendingEntries struct {
	fi    map[string]providers.FileInfo
	dirty map[string]bool
}

// pendingEntriesLocked returns what the host shows of dir's direct
// children and the box does not have yet (eachPendingLocked). c.mu held.
func (c *Cache) pendingEntriesLocked(dir string) pendingEntries {
	pe := pendingEntries{dirty: map[string]bool{}}
	// eachPendingLocked asks for a listing only to lay a dirty file over
	// it: the file is noted, and boxless applied once the listing comes.
	dirty := func(p string) *dirList {
		_, name := split(p)
		pe.dirty[name] = true
		return nil
	}
	c.eachPendingLocked(dir, true, dirty, func(p string, fi providers.FileInfo, _ *pendingDir) {
		if pe.fi == nil {
			pe.fi = map[string]providers.FileInfo{}
		}
		_, name := split(p)
		pe.fi[name] = fi
	})
	return pe
}

// over returns pe's entries laid over d, a listing of their directory
// from the box: a dirty file's inode is the box's only where d has it
// (boxless). nil when pe is empty.
func (pe pendingEntries) over(d *dirList) map[string]providers.FileInfo {
	if pe.fi == nil {
		return nil
	}
	out := make(map[string]providers.FileInfo, len(pe.fi))
	for name, fi := range pe.fi {
		if pe.dirty[name] {
			fi = boxless(d, fi)
		}
		out[name] = fi
	}
	return out
}

// boxless is fi, a dirty file's attributes laid over the listing d: where
// d lacks the name, the box has no file there now, and the inode number
// fi carries from the box's last word is another file's or none (a box
// that renamed the file away keeps its number under the new name, which
// must not read as a second name of this one).
func boxless(d *dirList, fi providers.FileInfo) providers.FileInfo {
	if d == nil {
		return fi
	}
	if _, ok := d.entries[fi.Name]; !ok {
		fi.Ino, fi.Dev = 0, 0
	}
	return fi
}

// pathDir is the directory holding p.
func pathDir(p string) string {
	dir, _ := split(p)
	return dir
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}

// reoverlayLocked lays back what the host made or changed at or under rel
// after what the cache knew of it was dropped. c.mu held.
func (c *Cache) reoverlayLocked(rel string) {
	if rel != "" {
		if pd, ok := c.pdirs.Get(rel); ok {
			c.recordLocked(rel, pd.fi, c.now())
			if pd.mkdir && c.dir(rel) == nil {
				c.dirs.Set(rel, &dirList{entries: map[string]providers.FileInfo{}, local: true})
			}
		} else if f, ok := c.news.Get(rel); ok {
			if fi, ok := f.localAttr(); ok {
				c.recordLocked(rel, fi, c.now())
			}
		}
	}
	c.overlayPendingLocked(rel, false)
}

// mkdirHere makes rel on the host only, in write-behind, when its parent's
// listing vouches that the name is free; the next batch makes it in the
// box. made false: ask the box.
func (c *Cache) mkdirHere(rel string, perm fs.FileMode) (providers.FileInfo, bool) {
	if c.behind == nil {
		return providers.FileInfo{}, false
	}
	dir, name := split(rel)
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dir(dir)
	if !c.usable(d) || transient(name) || len(name) > nameMax || c.file(rel) != nil {
		return providers.FileInfo{}, false
	}
	if _, taken := d.entries[name]; taken {
		return providers.FileInfo{}, false
	}
	owner, _ := c.knownAttrLocked("") // the box's own user makes it
	parent, _ := c.knownAttrLocked(dir)
	fi := providers.FileInfo{Name: name, Mode: fs.ModeDir | perm.Perm(), Nlink: 2, UID: owner.UID, GID: owner.GID, Dev: parent.Dev,
		Mtime: now, Atime: now, Ctime: now}
	c.pseq++
	c.pdirs.Set(rel, &pendingDir{fi: fi, mkdir: true, perm: perm, seq: c.pseq, mkSeq: c.pseq})
	c.dirs.Set(rel, &dirList{entries: map[string]providers.FileInfo{}, local: true, fetched: now})
	c.touchLocked(rel)
	c.recordLocked(rel, fi, now)
	c.behind.changed()
	return fi, true
}

// setDirHere gives a directory attributes on the host only, in
// write-behind: the next batch sets them in the box, after its files.
// ok false: set them in the box.
func (c *Cache) setDirHere(rel string, set func(fi *providers.FileInfo, o *providers.WriteOptions)) (providers.FileInfo, bool) {
	if c.behind == nil {
		return providers.FileInfo{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pd, ok := c.pdirs.Get(rel)
	if !ok {
		fi, known := c.knownAttrLocked(rel)
		if !known || !fi.IsDir() {
			return providers.FileInfo{}, false
		}
		pd = &pendingDir{fi: fi}
		c.pdirs.Set(rel, pd)
	}
	set(&pd.fi, &pd.set)
	pd.fi.Ctime = c.now()
	pd.attrs = true
	c.pseq++
	pd.seq = c.pseq
	c.touchLocked(rel)
	c.recordLocked(rel, pd.fi, c.now())
	c.behind.changed()
	return pd.fi, true
}

// dirOp is one pending directory's part of a batch.
type dirOp struct {
	rel   string
	pd    *pendingDir
	seq   uint64
	mkdir bool // make it (else: set its attributes)
	o     providers.WriteOptions
}

// pendingDirOps returns the directory operations the next batch carries:
// the directories to make, parents first, and the attributes to set.
func (c *Cache) pendingDirOps() (mk, set []dirOp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pdirs.Range(func(rel string, pd *pendingDir) bool {
		if pd.mkdir {
			mk = append(mk, dirOp{rel: rel, pd: pd, seq: pd.mkSeq, mkdir: true,
				o: providers.WriteOptions{Perm: pd.perm, ForceMode: true}})
		}
		if pd.attrs {
			set = append(set, dirOp{rel: rel, pd: pd, seq: pd.seq, o: pd.set})
		}
		return true
	})
	sort.Slice(mk, func(i, j int) bool { return mk[i].seq < mk[j].seq })
	sort.Slice(set, func(i, j int) bool { return set[i].seq < set[j].seq })
	return mk, set
}

// dirPushed records the box's answer to op: the directory made or its
// attributes set; what changed here since stays pending.
func (c *Cache) dirPushed(op dirOp, fi providers.FileInfo) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	pd, ok := c.pdirs.Get(op.rel)
	if !ok || pd != op.pd {
		return
	}
	if op.mkdir {
		pd.mkdir = false
		if d := c.dir(op.rel); d != nil && d.local {
			d.local, d.fetched = false, now
		}
	} else if pd.seq == op.seq {
		pd.attrs, pd.set = false, providers.WriteOptions{}
	}
	_, fi.Name = split(op.rel)
	if !pd.mkdir && !pd.attrs {
		c.pdirs.Delete(op.rel)
		c.recordLocked(op.rel, fi, now)
	}
}

// pushDir sends one directory operation, for a remote without batches.
func (c *Cache) pushDir(ctx context.Context, op dirOp) (providers.FileInfo, error) {
	defer c.intend(op.rel)()
	return providers.WriteDir(ctx, c.remote, providers.FileWrite{Name: c.abs(op.rel), Dir: true, Make: op.mkdir, Options: op.o})
}

// settle pushes everything pending when an operation the box must do
// touches a path made or changed here in write-behind (at, under or above
// one of rels): the box must have it first.
func (c *Cache) settle(ctx context.Context, rels ...string) error {
	if !c.queuesRemoves() {
		return nil
	}
	c.mu.Lock()
	touched := false
	for _, rel := range rels {
		if c.pdirs.HasUnder(rel) || c.news.HasUnder(rel) || c.prms.HasUnder(rel) {
			touched = true
		}
		for p := rel; ; p, _ = split(p) {
			if c.pdirs.Has(p) || c.news.Has(p) || c.prms.Has(p) {
				touched = true
			}
			if p == "" {
				break
			}
		}
	}
	c.mu.Unlock()
	if !touched {
		return nil
	}
	if c.behind == nil {
		// Write-through holds nothing pending but removes.
		return c.sendRms(ctx)
	}
	return c.FlushAll(ctx)
}

// kept returns the paths m holds under dir: its direct children when
// children (at the cost of their number), else all below it.
func kept[V any](m *pathmap.Map[V], dir string, children bool) []string {
	if !children {
		return m.Under(dir)
	}
	var out []string
	m.Children(dir, func(name string) { out = append(out, join(dir, name)) })
	return out
}
