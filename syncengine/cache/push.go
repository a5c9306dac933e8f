package cache

import (
	"cmp"
	"context"
	"io"
	"os"
	"slices"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// pushJob is one dirty file made ready to push: what to write where.
type pushJob struct {
	done    func() // called once the push's answer is recorded (Cache.intend)
	f       *file
	rel     string
	o       providers.WriteOptions
	src     *os.File
	size    int64
	inPlace bool // a name of a hard link: written in place, not replaced
	inBox   bool
	// shownAtime, shownMtime and shownCtime are the times the host
	// reported of the dirty file.
	shownAtime, shownMtime, shownCtime time.Time
}

// push sends a dirty file to the box: the whole content, atomically (the box
// writes a temporary name and renames it), with the attributes set while it
// was dirty, and records what the box answers. On failure the file stays
// dirty and the error is returned.
func (f *file) push(ctx context.Context, c *Cache) error {
	f.content.Lock()
	defer f.content.Unlock()
	j, err := f.prepare(ctx, c, nil)
	if j == nil || err != nil {
		return err
	}
	defer j.src.Close()
	defer j.done()
	var fi providers.FileInfo
	if j.inPlace {
		var replaced bool
		if fi, replaced, err = c.writeLinked(ctx, j.rel, j.src, j.o); replaced {
			j.inPlace = false
		}
	} else {
		fi, err = c.sw.WriteFileStat(ctx, c.abs(j.rel), j.src, j.o)
	}
	return j.finish(ctx, c, fi, err)
}

// prepare readies a push of f, whose content lock the caller holds: nil
// when f has nothing to push. A file an earlier process journaled is
// checked against the box first (recoverCheck; scans as it says).
func (f *file) prepare(ctx context.Context, c *Cache, scans dirScans) (*pushJob, error) {
	f.mu.Lock()
	if !f.dirty || f.gone {
		f.mu.Unlock()
		return nil, nil
	}
	if f.recovered {
		f.mu.Unlock()
		if err := c.recoverCheck(ctx, f, scans); err != nil {
			f.mu.Lock()
			f.pushErr = err
			f.mu.Unlock()
			return nil, err
		}
		f.mu.Lock()
		if !f.dirty || f.gone {
			f.mu.Unlock()
			return nil, nil // the box had it already
		}
	}
	// A file made here takes the mode its create asked for (the caller's
	// umask applied already), exactly: not the box's umask too.
	j := &pushJob{f: f, rel: f.rel, inBox: f.inBox,
		o: providers.WriteOptions{Perm: f.mode, ForceMode: f.force || (f.created && !f.inBox), Chown: f.chown, UID: f.uid, GID: f.gid, Atime: f.atime, Mtime: f.mtime,
			Exclusive: f.excl && !f.inBox}}
	if lfi, ok := f.localAttrLocked(); ok {
		j.shownAtime, j.shownMtime, j.shownCtime = lfi.Atime, lfi.Mtime, lfi.Ctime
	}
	links := f.base.Nlink
	basedOn := providers.FileInfo{Size: f.boxSize, Mtime: f.boxMtime} // the box's file this copy started from
	src, err := os.Open(c.dataPath(f.id))
	f.mu.Unlock()
	if err != nil {
		return nil, providers.E(providers.Unknown, "cache.push", err)
	}
	st, err := src.Stat()
	if err != nil {
		src.Close()
		return nil, providers.E(providers.Unknown, "cache.push", err)
	}
	j.src, j.size = src, st.Size()
	if j.o.Perm == 0 && !j.o.ForceMode {
		j.o.Perm = 0o644
	}
	if fi, ok := c.knownAttr(j.rel); ok {
		links = max(links, fi.Nlink)
		if j.inBox && !basedOn.Mtime.IsZero() && fi.IsRegular() && (fi.Size != basedOn.Size || !fi.Mtime.Equal(basedOn.Mtime)) {
			// The later close wins (docs/namespace.md): said, not silent.
			c.log.Warn("push replaces a change the box made to the file after the host read it", "path", j.rel,
				"box_size", fi.Size, "box_mtime", fi.Mtime, "read_size", basedOn.Size, "read_mtime", basedOn.Mtime)
			if c.opts.Overwrote != nil {
				c.opts.Overwrote(j.rel)
			}
		}
	}
	// A name of a hard link: replacing it would split it from its other
	// names. Written in place instead (not atomic, as on a disk).
	j.inPlace = j.inBox && links > 1
	j.done = c.intend(j.rel)
	return j, nil
}

// finish records the outcome of j's write: what the box answered (fi), or
// its error, which leaves the file dirty; a file the box has now gets the
// second name the host gave it (linkAlias). It returns the error close(2)
// reports.
func (j *pushJob) finish(ctx context.Context, c *Cache, fi providers.FileInfo, err error) error {
	f, rel := j.f, j.rel
	if err != nil {
		if j.o.Exclusive && providers.IsCode(err, providers.Exists) {
			return f.lostCreate(c, rel, err)
		}
		f.mu.Lock()
		f.pushErr = err
		f.mu.Unlock()
		return err
	}
	now := c.now()
	f.mu.Lock()
	// What the cache records is the box's; what it reports is shown.
	f.shownAtime, f.shownMtime, f.shownCtime, f.boxTimes = j.shownAtime, j.shownMtime, j.shownCtime, fi
	f.boxSize, f.boxMtime = fi.Size, fi.Mtime
	f.size, f.base = fi.Size, fi
	f.valid = true
	f.dirty = false
	f.pushErr = nil
	f.atime, f.mtime = time.Time{}, time.Time{}
	f.force, f.chown = false, false
	f.inBox, f.created, f.excl, f.started, f.recovered = true, false, false, nil, false
	if f.nopen == 0 && f.data != nil {
		f.data.Close()
		f.data = nil
	}
	f.unjournalLocked(c)
	f.mu.Unlock()
	c.clean(f)
	c.charged(f, fi.Size)
	_, fi.Name = split(rel)
	c.mu.Lock()
	if g, _ := c.news.Get(rel); g == f {
		c.news.Delete(rel)
	}
	c.touchLocked(rel)
	c.fm.pushEnded(rel)
	c.recordLocked(rel, fi, now)
	if !j.inPlace {
		c.dirTouchedLocked(rel) // the push renamed a temporary name over rel
	}
	c.linksChangedLocked(rel, fi, true)
	c.mu.Unlock()
	c.shownd.put(rel, fi, j.shownMtime, j.shownCtime, j.shownAtime)
	return c.linkAlias(ctx, f, fi)
}

// pushAll pushes files and what is pending of directories (made first,
// parents before children; their attributes after the files): through the
// remote's BatchWriter in one round trip where it has one (names of hard
// links, written in place, one by one), else one call each. It returns the
// first error; what fails stays pending, and report is told of each
// failure. Files go in the order they were first cached (their ids),
// whatever the caller's order: a batch holds the content locks of its
// files until the box answers, so two pushes of overlapping files (a
// background batch and a barrier) take those locks in one order and never
// wait on each other.
func (c *Cache) pushAll(ctx context.Context, files []*file, report func(rel string, err error)) error {
	files = slices.SortedFunc(slices.Values(files), func(a, b *file) int { return cmp.Compare(a.id, b.id) })
	var first error
	fail := func(rel string, err error) {
		if err == nil {
			return
		}
		if first == nil {
			first = err
		}
		if report != nil {
			report(rel, err)
		}
	}
	// The removes made here go first: a name made again after its remove
	// goes after it.
	if !c.pushRms(ctx, fail) {
		return first
	}
	mk, set := c.pendingDirOps()
	dir := func(op dirOp, fi providers.FileInfo, err error) {
		if err == nil {
			c.dirPushed(op, fi)
		}
		fail(op.rel, err)
	}
	bw, batch := c.remote.(providers.BatchWriter)
	if !batch {
		for _, op := range mk {
			fi, err := c.pushDir(ctx, op)
			dir(op, fi, err)
		}
		for _, f := range files {
			fail(f.path(), f.push(ctx, c))
		}
		for _, op := range set {
			fi, err := c.pushDir(ctx, op)
			dir(op, fi, err)
		}
		return first
	}
	var jobs []*pushJob
	var writes []providers.FileWrite
	var dones []func()
	var scans dirScans // journaled files are checked a directory at a time where listings are exact
	if el, ok := c.remote.(exactLister); ok && el.ExactListings() {
		scans = dirScans{}
	}
	defer func() {
		for _, done := range dones {
			done()
		}
	}()
	for _, op := range mk {
		dones = append(dones, c.intend(op.rel))
		writes = append(writes, providers.FileWrite{Name: c.abs(op.rel), Dir: true, Make: true, Options: op.o})
	}
	for _, f := range files {
		f.content.Lock()
		j, err := f.prepare(ctx, c, scans)
		if j == nil || err != nil {
			f.content.Unlock()
			fail(f.path(), err)
			continue
		}
		dones = append(dones, j.done)
		if j.inPlace {
			fi, replaced, err := c.writeLinked(ctx, j.rel, j.src, j.o)
			if replaced {
				j.inPlace = false
			}
			j.src.Close()
			fail(j.rel, j.finish(ctx, c, fi, err))
			f.content.Unlock()
			continue
		}
		jobs = append(jobs, j)
		writes = append(writes, providers.FileWrite{Name: c.abs(j.rel), Data: j.src, Size: j.size, Options: j.o})
	}
	for _, op := range set {
		dones = append(dones, c.intend(op.rel))
		writes = append(writes, providers.FileWrite{Name: c.abs(op.rel), Dir: true, Options: op.o})
	}
	if len(writes) == 0 {
		return first
	}
	res, err := bw.WriteFiles(ctx, writes)
	if err == nil && len(res) != len(writes) {
		err = providers.Errorf(providers.Unknown, "cache.push", "a batch of %d answered %d results", len(writes), len(res))
	}
	result := func(i int) (providers.FileInfo, error) {
		if err != nil {
			return providers.FileInfo{}, err
		}
		return res[i].Info, res[i].Err
	}
	for i, op := range mk {
		fi, err := result(i)
		dir(op, fi, err)
	}
	for i, j := range jobs {
		j.src.Close()
		fi, err := result(len(mk) + i)
		fail(j.rel, j.finish(ctx, c, fi, err))
		j.f.content.Unlock()
	}
	for i, op := range set {
		fi, err := result(len(mk) + len(jobs) + i)
		dir(op, fi, err)
	}
	return first
}

// writeLinked writes src over rel, a name of a file with several, in
// place. Where the box will not (another of its names is outside the
// workspace: Unsafe), the name is replaced instead and leaves the link,
// and where the name is gone from the box it is made again with src;
// replaced says so.
func (c *Cache) writeLinked(ctx context.Context, rel string, src *os.File, o providers.WriteOptions) (fi providers.FileInfo, replaced bool, err error) {
	fi, err = c.writeInPlace(ctx, c.abs(rel), src, o)
	switch {
	case providers.IsCode(err, providers.NotFound):
		// The box removed or renamed the name meanwhile: the host's
		// writes win there (F-dirty), as a file of its own, as a push
		// of a file with one name makes it.
		c.log.Warn("a hard-linked file's name is gone from the box; the host's copy is written under it", "path", rel)
	case providers.IsCode(err, providers.Unsafe):
		c.log.Warn("a hard-linked file with a name outside the workspace is replaced, not written in place", "path", rel, "err", err)
	default:
		return fi, false, err
	}
	fi, err = c.sw.WriteFileStat(ctx, c.abs(rel), io.NewSectionReader(src, 0, 1<<62), o)
	return fi, true, err
}
