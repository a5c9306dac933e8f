package cache

import (
	"context"
	"sort"

	"github.com/boxfs/boxfs/providers"
)

// Reading a tree file by file (grep -r, an indexer, an agent's search) costs
// a round trip per file. When a second file of one directory has to be
// fetched, the cache takes it as a scan and fetches it together with the
// small files that follow it in the directory, in one round trip, where
// the remote can (providers.SmallReader: the agent channel).
const (
	prefetchFileMax = 64 << 10  // files larger than this are fetched alone
	prefetchBudget  = 160 << 10 // bytes of data per prefetch
	prefetchCount   = 128       // files per prefetch
)

// coldFetch notes that rel's content must be fetched, and reports whether
// its directory has seen a fetch before: a scan.
func (c *Cache) coldFetch(rel string) bool {
	dir, _ := split(rel)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sr == nil {
		return false
	}
	c.cold[dir]++
	return c.cold[dir] >= 2
}

// prefetch fetches rel with the small files after it in its directory's
// listing that the cache does not hold, in one round trip. Whatever it
// cannot do is left to the ordinary fetch of each file.
func (c *Cache) prefetch(ctx context.Context, rel string) {
	dir, name := split(rel)
	c.mu.Lock()
	sr := c.sr
	d := c.dir(dir)
	if sr == nil || d == nil {
		c.mu.Unlock()
		return
	}
	var cands []providers.FileInfo
	for n, fi := range d.entries {
		if n >= name && fi.IsRegular() && fi.Size <= prefetchFileMax && !transient(n) {
			cands = append(cands, fi)
		}
	}
	c.mu.Unlock()
	sort.Slice(cands, func(i, j int) bool { return cands[i].Name < cands[j].Name })
	var names []string
	budget := 0
	for _, fi := range cands {
		if len(names) == prefetchCount || budget+int(fi.Size) > prefetchBudget {
			break
		}
		if fi.Name != name && c.holds(join(dir, fi.Name), fi) {
			continue
		}
		names = append(names, fi.Name)
		budget += int(fi.Size)
	}
	if len(names) < 2 {
		return // rel alone: its own fetch
	}
	start := c.beginFetch()
	got, err := sr.ReadSmall(ctx, c.abs(dir), names, prefetchBudget)
	now := c.now()
	c.mu.Lock()
	if providers.CodeOf(err) == providers.Unsupported {
		c.sr = nil
	}
	var fill []providers.SmallFile
	for _, sf := range got {
		p := join(dir, sf.Info.Name)
		if c.touchedSinceLocked(p, start) {
			continue
		}
		old, known := c.attrGet(p)
		c.learnAttrLocked(p, old, known, sf.Info, true)
		c.recordLocked(p, sf.Info, now)
		fill = append(fill, sf)
	}
	// Ended only now: the last fetch's end forgets what the host touched,
	// which the loop above must still see.
	c.endFetchLocked()
	c.mu.Unlock()
	if err != nil {
		c.log.Debug("prefetch failed; files are fetched one by one", "dir", dir, "err", err)
		return
	}
	for _, sf := range fill {
		if f := c.fileFor(join(dir, sf.Info.Name)); f.fill(c, sf) {
			c.charged(f, int64(len(sf.Data)))
		}
	}
}

// holds reports whether the cache has rel's content as fi describes it.
func (c *Cache) holds(rel string, fi providers.FileInfo) bool {
	c.mu.Lock()
	f := c.file(rel)
	c.mu.Unlock()
	return f != nil && f.holds(fi)
}

// holds reports whether f's data is the box content fi describes, or newer
// writes of the host.
func (f *file) holds(fi providers.FileInfo) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holdsLocked(fi)
}

// holdsLocked is holds with f.mu held.
func (f *file) holdsLocked(fi providers.FileInfo) bool {
	return f.dirty || (f.valid && f.boxSize == fi.Size && f.boxMtime.Equal(fi.Mtime))
}

// fill makes sf's data f's content, unless f holds writes of the host or
// already has that content; it reports whether it did.
func (f *file) fill(c *Cache, sf providers.SmallFile) (filled bool) {
	f.content.Lock()
	defer f.content.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone || f.holdsLocked(sf.Info) {
		return false
	}
	if err := f.openDataLocked(c, true); err != nil {
		return false
	}
	if _, err := f.data.WriteAt(sf.Data, 0); err != nil {
		f.valid = false
	} else {
		f.valid, f.boxSize, f.boxMtime, f.size = true, sf.Info.Size, sf.Info.Mtime, sf.Info.Size
		f.mode, f.base = sf.Info.Mode.Perm(), sf.Info
		f.version++
		filled = true
	}
	if f.nopen == 0 {
		f.data.Close()
		f.data = nil
	}
	return filled
}
