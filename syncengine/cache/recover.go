package cache

import (
	"bytes"
	"context"
	"io"
	"os"
	"path"
	"strconv"

	"github.com/boxfs/boxfs/providers"
)

// maxRecoveredNames bounds the search for a free NAME.boxfs-recovered-N.
const maxRecoveredNames = 1000

// recoverCheck runs before the first push of a file an earlier process
// journaled and did not push: if the box changed the file since the host's
// writes began (another content, or a file where the host made a new one,
// or none where there was one), the box's file keeps its name and the
// host's copy goes beside it as NAME.boxfs-recovered-N, said through
// Options.Recovered and the log. A file whose start is not known (a journal
// of an earlier version) is pushed as it always was. With scans (a batch's
// push), what the box has is read from one listing of each directory, not
// a stat of each file. f.content held.
func (c *Cache) recoverCheck(ctx context.Context, f *file, scans dirScans) error {
	f.mu.Lock()
	rel, started, created, check := f.rel, f.started, f.created, f.recovered
	f.mu.Unlock()
	if !check {
		return nil
	}
	d := scans.of(ctx, c, rel)
	fi, err := d.lstat(ctx, c, rel)
	missing := providers.IsCode(err, providers.NotFound)
	if err != nil && !missing {
		return err
	}
	var changed bool
	switch {
	case missing:
		changed = !created && started != nil // removed in the box since
	case created:
		changed = true // the box made a file under the name since
	case started == nil:
		changed = false
	default:
		changed = fi.Size != started.Size || !fi.Mtime.Equal(started.Mtime) ||
			(started.Ino != 0 && fi.Ino != 0 && fi.Ino != started.Ino)
	}
	if changed && !missing && fi.IsRegular() && c.sameContent(ctx, f, fi) {
		// The push landed before the daemon died (it was killed between
		// the box's answer and the journal's note of it).
		return (&pushJob{f: f, rel: rel}).finish(ctx, c, fi, nil)
	}
	if !changed {
		if missing && created && d.mayLack() {
			// Made here, in a directory made here that the daemon died
			// before sending (directories are not journaled): it is made
			// now, as it was.
			if err := c.makeParents(ctx, rel); err != nil {
				return err
			}
			d.made()
		}
		f.mu.Lock()
		f.recovered = false
		f.mu.Unlock()
		return nil
	}
	kept, err := c.recoveredName(ctx, rel)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.file(rel) == f {
		c.files.Delete(rel)
		c.news.Delete(rel)
	}
	c.files.Set(kept, f)
	c.news.Set(kept, f)
	c.mu.Unlock()
	f.mu.Lock()
	f.rel, f.inBox, f.created, f.excl, f.started, f.recovered = kept, false, true, true, nil, false
	f.base = providers.FileInfo{}
	f.journalLocked(c)
	f.mu.Unlock()
	c.log.Warn("the box changed a file after the host's unpushed writes to it were journaled; the box's file keeps its name, the host's writes go beside it",
		"path", rel, "host_copy", kept, "box_exists", !missing)
	if c.opts.Recovered != nil {
		c.opts.Recovered(rel, kept)
	}
	return nil
}

// recoveredName returns the first NAME.boxfs-recovered-N the box does not
// have.
func (c *Cache) recoveredName(ctx context.Context, rel string) (string, error) {
	for n := 1; n <= maxRecoveredNames; n++ {
		p := rel + ".boxfs-recovered-" + strconv.Itoa(n)
		_, err := c.remote.Lstat(ctx, c.abs(p))
		if providers.IsCode(err, providers.NotFound) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", providers.Errorf(providers.Exists, "cache.Recover", "no free name for the host's copy of %s (%d recovered copies there)", rel, maxRecoveredNames).
		WithBox(c.opts.Box).WithPath(c.abs(rel))
}

// makeParents makes the missing directories above rel in the box.
func (c *Cache) makeParents(ctx context.Context, rel string) error {
	dir, _ := split(rel)
	if dir == "" {
		return nil
	}
	_, err := c.remote.Lstat(ctx, c.abs(dir))
	if !providers.IsCode(err, providers.NotFound) {
		return err
	}
	if err := c.makeParents(ctx, dir); err != nil {
		return err
	}
	c.log.Warn("a directory the host made was not in the box after a crash; made again", "path", dir)
	if err := c.remote.Mkdir(ctx, c.abs(dir), 0o755); err != nil && !providers.IsCode(err, providers.Exists) {
		return err
	}
	return nil
}

// sameContent reports whether the box's file fi holds f's content here.
// f.content held.
func (c *Cache) sameContent(ctx context.Context, f *file, fi providers.FileInfo) bool {
	f.mu.Lock()
	rel, id := f.rel, f.id
	f.mu.Unlock()
	local, err := os.Open(c.dataPath(id))
	if err != nil {
		return false
	}
	defer local.Close()
	if st, err := local.Stat(); err != nil || st.Size() != fi.Size {
		return false
	}
	r, err := c.remote.ReadFile(ctx, c.abs(rel))
	if err != nil {
		return false
	}
	defer r.Close()
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		n, err := io.ReadFull(r, a)
		if m, _ := io.ReadFull(local, b[:n]); m != n || !bytes.Equal(a[:n], b[:n]) {
			return false
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			var one [1]byte
			k, _ := local.Read(one[:])
			return k == 0
		}
		if err != nil {
			return false
		}
	}
}

// exactLister is a remote whose listings say of each entry exactly what
// its Lstat says (the agent's: both are the box's lstat(2)).
type exactLister interface{ ExactListings() bool }

// dirScans are the listings of the directories of the journaled files one
// push checks (recoverCheck), taken once per directory; nil for a push of
// one file, which stats it.
type dirScans map[string]*dirScan

// dirScan is what one listing said of a directory.
type dirScan struct {
	ents    map[string]providers.FileInfo // by name; nil when not listed
	missing bool                          // the box has no such directory (yet)
	failed  bool                          // the listing failed: each file is stat'd
}

// of returns the scan of rel's directory, listing it the first time (and
// removing the stale temporaries in it, sweepTemps). Without scans it
// sweeps only, and returns nil: each file is stat'd.
func (s dirScans) of(ctx context.Context, c *Cache, rel string) *dirScan {
	dir, _ := split(rel)
	if s == nil {
		c.sweepTemps(ctx, dir, nil)
		return nil
	}
	if d, ok := s[dir]; ok {
		return d
	}
	d := &dirScan{}
	entries, err := c.remote.ReadDir(ctx, c.abs(dir))
	switch {
	case providers.IsCode(err, providers.NotFound):
		d.missing = true
		c.sweepTemps(ctx, dir, []providers.FileInfo{})
	case err != nil:
		d.failed = true
		c.sweepTemps(ctx, dir, nil)
	default:
		d.ents = make(map[string]providers.FileInfo, len(entries))
		for _, e := range entries {
			d.ents[e.Name] = e
		}
		if entries == nil {
			entries = []providers.FileInfo{} // listed, and empty
		}
		c.sweepTemps(ctx, dir, entries)
	}
	s[dir] = d
	return d
}

// lstat is the box's attributes of rel: from the scan of its directory
// where there is one, else a stat.
func (d *dirScan) lstat(ctx context.Context, c *Cache, rel string) (providers.FileInfo, error) {
	if d == nil || d.failed {
		return c.remote.Lstat(ctx, c.abs(rel))
	}
	_, name := split(rel)
	if fi, ok := d.ents[name]; ok {
		return fi, nil
	}
	return providers.FileInfo{}, providers.Errorf(providers.NotFound, "cache.Recover", "not in the box's listing of its directory").
		WithBox(c.opts.Box).WithPath(c.abs(rel))
}

// mayLack reports whether the directory may be missing in the box.
func (d *dirScan) mayLack() bool { return d == nil || d.failed || d.missing }

// made notes that the directory is in the box now (makeParents).
func (d *dirScan) made() {
	if d != nil && d.missing {
		d.missing = false
		d.ents = map[string]providers.FileInfo{}
	}
}

// sweepTemps removes, once per directory, the temporary files boxfs's
// writers make beside a file they replace (transient names) that are older
// than this process: an earlier daemon killed during a push leaves its
// temporary behind, and nothing else would ever remove it. A temporary
// written since this process began may be another writer's, in flight,
// and is left alone. entries is dir's listing when the caller has it (nil:
// it is listed here). Failures are logged: the push goes on.
func (c *Cache) sweepTemps(ctx context.Context, dir string, entries []providers.FileInfo) {
	c.sweptMu.Lock()
	done := c.swept[dir]
	c.swept[dir] = true
	c.sweptMu.Unlock()
	if done {
		return
	}
	if entries == nil {
		var err error
		entries, err = c.remote.ReadDir(ctx, c.abs(dir))
		if err != nil {
			if !providers.IsCode(err, providers.NotFound) {
				c.log.Warn("listing a journaled file's directory for stale temporaries", "dir", dir, "err", err)
			}
			return
		}
	}
	for _, e := range entries {
		if !transient(e.Name) || !e.IsRegular() || !e.Mtime.Before(c.started) {
			continue
		}
		p := path.Join(dir, e.Name)
		if err := c.remote.Remove(ctx, c.abs(p)); err != nil && !providers.IsCode(err, providers.NotFound) {
			c.log.Warn("removing a temporary an earlier process left", "path", p, "err", err)
			continue
		}
		c.log.Info("removed a temporary an earlier process left", "path", p)
	}
}
