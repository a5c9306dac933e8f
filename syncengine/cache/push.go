package cache

import (
	"context"
	"os"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// pushJob is one dirty file made ready to push: what to write where.
type pushJob struct {
	f       *file
	rel     string
	o       providers.WriteOptions
	src     *os.File
	size    int64
	inPlace bool // a name of a hard link: written in place, not replaced
	inBox   bool
}

// push sends a dirty file to the box: the whole content, atomically (the box
// writes a temporary name and renames it), with the attributes set while it
// was dirty, and records what the box answers. On failure the file stays
// dirty and the error is returned.
func (f *file) push(ctx context.Context, c *Cache) error {
	f.content.Lock()
	defer f.content.Unlock()
	j, err := f.prepare(ctx, c)
	if j == nil || err != nil {
		return err
	}
	defer j.src.Close()
	var fi providers.FileInfo
	if j.inPlace {
		fi, err = c.writeInPlace(ctx, c.abs(j.rel), j.src, j.o)
	} else {
		fi, err = c.sw.WriteFileStat(ctx, c.abs(j.rel), j.src, j.o)
	}
	return j.finish(c, fi, err)
}

// prepare readies a push of f, whose content lock the caller holds: nil
// when f has nothing to push. A file an earlier process journaled is
// checked against the box first (recoverCheck).
func (f *file) prepare(ctx context.Context, c *Cache) (*pushJob, error) {
	f.mu.Lock()
	if !f.dirty || f.gone {
		f.mu.Unlock()
		return nil, nil
	}
	if f.recovered {
		f.mu.Unlock()
		if err := c.recoverCheck(ctx, f); err != nil {
			f.mu.Lock()
			f.pushErr = err
			f.mu.Unlock()
			return nil, err
		}
		f.mu.Lock()
	}
	j := &pushJob{f: f, rel: f.rel, inBox: f.inBox,
		o: providers.WriteOptions{Perm: f.mode, ForceMode: f.force, Chown: f.chown, UID: f.uid, GID: f.gid, Atime: f.atime, Mtime: f.mtime,
			Exclusive: f.excl && !f.inBox}}
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
	c.intend(j.rel)
	return j, nil
}

// finish records the outcome of j's write: what the box answered (fi), or
// its error, which leaves the file dirty. It returns the error close(2)
// reports.
func (j *pushJob) finish(c *Cache, fi providers.FileInfo, err error) error {
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
	_, fi.Name = split(rel)
	c.mu.Lock()
	c.touchLocked(rel)
	c.recordLocked(rel, fi, now)
	if !j.inPlace {
		c.dirChangedLocked(rel) // the push renamed a temporary name over rel
	}
	c.linksChangedLocked(rel, fi, true)
	c.mu.Unlock()
	return nil
}

// pushMany pushes files: through the remote's BatchWriter in one round
// trip where it has one (names of hard links, written in place, one by
// one), else one push each. It returns the first error; a file that
// fails stays dirty, and report is told of each failure.
func (c *Cache) pushMany(ctx context.Context, files []*file, report func(rel string, err error)) error {
	bw, batch := c.remote.(providers.BatchWriter)
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
	if !batch {
		for _, f := range files {
			fail(f.path(), f.push(ctx, c))
		}
		return first
	}
	var jobs []*pushJob
	var writes []providers.FileWrite
	for _, f := range files {
		f.content.Lock()
		j, err := f.prepare(ctx, c)
		if j == nil || err != nil {
			f.content.Unlock()
			fail(f.path(), err)
			continue
		}
		if j.inPlace {
			fi, err := c.writeInPlace(ctx, c.abs(j.rel), j.src, j.o)
			j.src.Close()
			fail(j.rel, j.finish(c, fi, err))
			f.content.Unlock()
			continue
		}
		jobs = append(jobs, j)
		writes = append(writes, providers.FileWrite{Name: c.abs(j.rel), Data: j.src, Size: j.size, Options: j.o})
	}
	if len(jobs) == 0 {
		return first
	}
	res, err := bw.WriteFiles(ctx, writes)
	if err == nil && len(res) != len(writes) {
		err = providers.Errorf(providers.Unknown, "cache.push", "a batch of %d files answered %d results", len(writes), len(res))
	}
	for i, j := range jobs {
		j.src.Close()
		var fi providers.FileInfo
		werr := err
		if err == nil {
			fi, werr = res[i].Info, res[i].Err
		}
		fail(j.rel, j.finish(c, fi, werr))
		j.f.content.Unlock()
	}
	return first
}
