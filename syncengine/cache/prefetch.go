package cache

import (
	"context"
	"sort"
	"sync"
	"time"

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
	c.readAheadBelow(dir)
	if len(names) < 2 {
		return // rel alone: its own fetch
	}
	c.fetchSmall(ctx, sr, dir, names)
}

// fetchSmall fetches names of dir in one round trip and keeps what came,
// unless the host changed it meanwhile or a newer walk was installed.
func (c *Cache) fetchSmall(ctx context.Context, sr providers.SmallReader, dir string, names []string) {
	now := c.now() // what comes is as old as the ask
	t := c.beginFetch()
	got, err := sr.ReadSmall(ctx, c.abs(dir), names, prefetchBudget)
	c.mu.Lock()
	if providers.CodeOf(err) == providers.Unsupported {
		c.sr = nil
	}
	var fill []providers.SmallFile
	for _, sf := range got {
		p := join(dir, sf.Info.Name)
		if c.fm.judge(p, t) != install {
			continue // changed or reported meanwhile: asked at its next use
		}
		c.fm.installed(p, t)
		old, known := c.attrGet(p)
		c.learnAttrLocked(p, old, known, sf.Info, true)
		c.recordLocked(p, sf.Info, now)
		fill = append(fill, sf)
	}
	// Ended only now: the last fetch's end forgets what the host touched,
	// which the loop above must still see.
	c.fm.end(t)
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
	if f.gone || f.ndirect > 0 || f.holdsLocked(sf.Info) {
		return false // opens of the box's own file read that
	}
	if err := f.openDataLocked(c, true); err != nil {
		return false
	}
	if _, err := f.data.WriteAt(sf.Data, 0); err != nil {
		f.valid = false
	} else {
		f.valid, f.boxSize, f.boxMtime, f.size = true, sf.Info.Size, sf.Info.Mtime, sf.Info.Size
		f.mode, f.base = sf.Info.Mode&specialBits, sf.Info
		f.version++
		filled = true
	}
	if f.nopen == 0 {
		f.data.Close()
		f.data = nil
	}
	return filled
}

// A scan of a tree (grep -r, an indexer, an agent reading a package) goes
// on below the directory it started in. When a directory turns out to be
// scanned (its second cold fetch), the small files of the directories
// below it whose listings the cache knows are read ahead too, one round
// trip per directory, in the background and several at once, so the
// scanner finds them held when it gets there. It is bounded in
// directories and bytes, done once per directory, and stopped by Close.
const (
	aheadDirs   = 64      // directories read ahead below one scanned directory
	aheadBudget = 2 << 20 // bytes of file data they may bring
	aheadFlight = 4       // their fetches in flight at once
	aheadWait   = 30 * time.Second
)

// readAhead is the state of the read-ahead below scanned directories.
type readAhead struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}
	done   map[string]bool // directories read ahead, or being (Cache.mu)
}

func newReadAhead() *readAhead {
	ctx, cancel := context.WithCancel(context.Background())
	return &readAhead{ctx: ctx, cancel: cancel, sem: make(chan struct{}, aheadFlight), done: map[string]bool{}}
}

// stop ends the fetches in flight and waits for them.
func (ra *readAhead) stop() {
	ra.cancel()
	ra.wg.Wait()
}

// aheadDir is one directory's part of a read-ahead.
type aheadDir struct {
	dir   string
	cands []providers.FileInfo
}

// readAheadBelow reads ahead the small files of the known directories
// below dir, breadth first, in name order, within the bounds above.
func (c *Cache) readAheadBelow(dir string) {
	c.mu.Lock()
	sr, ra := c.sr, c.ahead
	if sr == nil || ra == nil || ra.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	var plan []aheadDir
	queue := c.subdirsLocked(dir)
	for len(queue) > 0 && len(plan) < aheadDirs {
		d := queue[0]
		queue = queue[1:]
		dl := c.dir(d)
		if dl == nil || ra.done[d] {
			continue
		}
		ra.done[d] = true
		var cands []providers.FileInfo
		for n, fi := range dl.entries {
			if fi.IsRegular() && fi.Size <= prefetchFileMax && !transient(n) {
				cands = append(cands, fi)
			}
		}
		if len(cands) > 0 {
			plan = append(plan, aheadDir{d, cands})
		}
		queue = append(queue, c.subdirsLocked(d)...)
	}
	c.mu.Unlock()

	budget := aheadBudget
	for _, ad := range plan {
		if budget <= 0 {
			break
		}
		sort.Slice(ad.cands, func(i, j int) bool { return ad.cands[i].Name < ad.cands[j].Name })
		var names []string
		used := 0
		for _, fi := range ad.cands {
			if len(names) == prefetchCount || used+int(fi.Size) > min(prefetchBudget, budget) {
				break
			}
			if c.holds(join(ad.dir, fi.Name), fi) {
				continue
			}
			names = append(names, fi.Name)
			used += int(fi.Size)
		}
		if len(names) == 0 {
			continue
		}
		budget -= used
		ra.wg.Add(1)
		go func(d string, names []string) {
			defer ra.wg.Done()
			select {
			case ra.sem <- struct{}{}:
			case <-ra.ctx.Done():
				return
			}
			defer func() { <-ra.sem }()
			ctx, cancel := context.WithTimeout(ra.ctx, aheadWait)
			defer cancel()
			c.fetchSmall(ctx, sr, d, names)
		}(ad.dir, names)
	}
}

// subdirsLocked lists the directories in dir's known listing, by name.
// c.mu held.
func (c *Cache) subdirsLocked(dir string) []string {
	d := c.dir(dir)
	if d == nil {
		return nil
	}
	var out []string
	for n, fi := range d.entries {
		if fi.IsDir() && !transient(n) {
			out = append(out, join(dir, n))
		}
	}
	sort.Strings(out)
	return out
}
