// Package cache keeps a box's workspace on the host for the filesystem: a
// listing of what the box holds (refreshed one directory per round trip, or
// one walk after a command), a content cache of the files read, and the dirty
// files written through the mount, pushed to the box at flush and journaled
// on disk so a crash of the daemon loses nothing.
//
// Paths given to a Cache are slash-separated and relative to the workspace
// root ("" is the root itself). Box-side paths are the root joined with them.
package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/internal/pathmap"
	"github.com/boxfs/boxfs/providers"
)

// Remote is what the cache needs of a box: its files, and one listing of a
// whole tree. hands.Hands serves both for any box.
type Remote interface {
	providers.Files
	providers.Walker
}

// Options configure a Cache.
type Options struct {
	// Dir is the host directory the cache keeps its data and journal in; it
	// is created if missing. One directory per box.
	Dir string
	// ShownPath is the file the times shown of pushed files are kept in
	// across mounts (shownlog.go; default: shown.log in Dir). It is not
	// content: removing it changes the times files show, so it belongs
	// outside a directory removed to make the content cache cold.
	ShownPath string
	// Root is the box-side workspace path the cache presents.
	Root string
	// Box names the box in errors and logs.
	Box string
	// AttrTimeout is how long a listing or attribute is trusted before it is
	// asked of the box again (default 1 s).
	AttrTimeout time.Duration
	// BigDir is the entry count above which a lookup in a stale directory
	// stats the one name instead of re-listing the directory (default 2,000).
	BigDir int
	// WalkMax is the largest workspace (in entries) whose listings are all
	// renewed by one walk when one of them goes stale (default 4,000;
	// negative: never). The walk saves a round trip per directory on a small
	// tree; on a large one it would cost the whole tree once per attribute
	// timeout, so a larger tree is renewed directory by directory.
	WalkMax int
	Logger  *slog.Logger
	// Overwrote, when set, is told of each push that replaced a change the
	// box made to the file after the host read it (the later close wins;
	// the push has been logged already).
	Overwrote func(rel string)
	// WriteBehind acknowledges a close once the file's bytes are in the
	// journal, and pushes dirty files in batches (see behind.go); FlushAll
	// is the barrier. The Behind fields bound a batch: the pause after the
	// last close (DefaultBehindDelay), the longest wait of a close
	// (DefaultBehindMaxWait), and the files and bytes that send it at once
	// (DefaultBehindFiles, DefaultBehindBytes); BehindTimeout bounds one
	// batch's push (default 5 minutes).
	WriteBehind   bool
	BehindDelay   time.Duration
	BehindMaxWait time.Duration
	BehindFiles   int
	BehindBytes   int64
	BehindTimeout time.Duration
	// Budget, when set, bounds the host disk the copies of files take,
	// shared with the other caches of the mount.
	Budget *Budget
	// PushFailed, when set, is told of each push of write-behind that
	// failed (the file stays dirty and is tried again).
	// A queued remove that failed is told too, with a *RemoveError.
	PushFailed func(rel string, err error)
	// PipelineRemoves has write-through queue removes on a remote box and
	// send them in the background (behindrm.go). Not yet for mounts: a
	// create of a name whose remove is queued does not wait for it (git's
	// index.lock then fails with EEXIST).
	PipelineRemoves bool
	// Recovered, when set, is told of each file an earlier process left
	// dirty that the box changed since: the box's file kept rel, the host's
	// writes were pushed as kept (the move has been logged already).
	Recovered func(rel, kept string)
	// Now is the clock (default time.Now); tests pin it.
	Now func() time.Time
	// MaxListing is the most entries one directory's listing may hold (a
	// larger one is TooLarge, EFBIG), MaxEntries the most the listings
	// hold in all, past which the least recently used are forgotten
	// (entries.go). Defaults DefaultMaxListing, DefaultMaxEntries.
	MaxListing, MaxEntries int
	// ListingIdle is how long a listing nothing used is kept before it is
	// forgotten, its memory handed back (idle.go); default
	// DefaultListingIdle, negative: kept until MaxEntries pushes it out.
	ListingIdle time.Duration
}

// Cache is one box's workspace as the host sees it.
type Cache struct {
	remote Remote
	sw     providers.StatWriter    // remote's, answering mutations with attributes
	rs     providers.RenameStater  // remote's, when it answers renames with attributes (c.mu)
	rms    providers.RemoveStater  // remote's, when it answers unlinks with attributes (c.mu)
	sas    providers.SetattrStater // remote's, when it answers setattrs with attributes (c.mu)
	sr     providers.SmallReader   // remote's, if it has one (c.mu); nil once it said Unsupported
	cold   map[string]int          // directory -> files fetched from it (c.mu)
	ahead  *readAhead              // the read-ahead below scanned directories (prefetch.go)
	reap   *reaper                 // deletes the copies of removed files (reap.go)
	cw     providers.CappedWalker  // remote's, if it has one (c.mu); nil once it said Unsupported
	hr     providers.HostReader    // remote's, if it has one (c.mu); nil once it said Unsupported
	hw     providers.HostWriter    // likewise, for writes (hostwrite.go)

	// swept are the directories whose boxfs temporaries an earlier
	// process left were removed (recover.go), started when this one began.
	sweptMu sync.Mutex
	swept   map[string]bool
	started time.Time

	walkMu sync.Mutex // one revalidating walk at a time
	opts   Options
	log    *slog.Logger
	now    func() time.Time

	dataDir string
	jnl     *journal
	shownd  *shownLog // the times shown of files pushed, kept across mounts (shownlog.go)

	mu    sync.Mutex
	dirs  *pathmap.Map[*dirList]  // rel of a directory -> its listing
	attrs *pathmap.Map[attrEntry] // rel -> the latest stat of it
	files *pathmap.Map[*file]     // rel -> content state, for files read or written
	// links indexes the names seen with a box inode of more than one
	// link, so the other names of a hard link are found without a scan
	// of every attribute. A name kept here may have gone or changed since:
	// linkedLocked checks each against attrs and drops the stale ones.
	links  map[linkKey]map[string]bool
	nextID uint64

	// news are the files made here the box does not have yet, pdirs the
	// directories made or changed here in write-behind (pending.go); pseq
	// orders their changes (c.mu).
	news  *pathmap.Map[*file]
	pdirs *pathmap.Map[*pendingDir]
	// prms are the names removed here in write-behind that the box may
	// still have (behindrm.go); rmErr is the first remove a batch's box
	// refused since the last barrier, which that barrier returns.
	prms  *pathmap.Map[*pendingRm]
	rmErr error
	pseq  uint64
	// rmMu is held while a batch of removes is out; rmsend sends the
	// removes queued in write-through (nil: sent at once, or batched).
	rmMu   sync.Mutex
	rmsend *rmSender

	dirtyMu sync.Mutex
	dirty   map[*file]struct{} // the files holding writes the box lacks (dirtyMu)
	behind  *behind            // the write-behind queue; nil in write-through
	statfs  struct {
		v  providers.StatFS
		at time.Time
	}

	// fm is the freshness model (model.go): it orders fetches, the
	// host's changes and the watch's reports, and holds all the cache
	// keeps of them beside each path's own entry (c.mu).
	fm model
	// lists orders the listings by use, for MaxEntries (entries.go; c.mu).
	lists listingUse
	// idle forgets listings nothing used for ListingIdle (idle.go).
	idle *idleSweep
}

type dirList struct {
	entries map[string]providers.FileInfo
	fetched time.Time
	local   bool      // made here, not in the box yet: the host's listing is the truth
	trust   bool      // vouched for by the watch (model.trusted)
	used    uint64    // when last used, for MaxEntries (entries.go)
	usedAt  time.Time // the same on the clock, for ListingIdle (idle.go)
}

type attrEntry struct {
	fi    providers.FileInfo
	at    time.Time
	neg   bool // the path was found missing at `at`
	stale bool // set by a setattr here (right in what it set, not in ctime) or a change in the directory: ask the box when asked
	trust bool // vouched for by the watch (model.trusted)
}

// Open opens the cache for one box. It reads the journal of dirty files a
// previous process left; Recover pushes them.
func Open(remote Remote, opts Options) (*Cache, error) {
	const op = "cache.Open"
	if opts.AttrTimeout <= 0 {
		opts.AttrTimeout = time.Second
	}
	if opts.BigDir <= 0 {
		opts.BigDir = 2000
	}
	if opts.WalkMax == 0 {
		opts.WalkMax = 4000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.BehindDelay <= 0 {
		opts.BehindDelay = DefaultBehindDelay
	}
	if opts.BehindMaxWait <= 0 {
		opts.BehindMaxWait = DefaultBehindMaxWait
	}
	if opts.BehindFiles <= 0 {
		opts.BehindFiles = DefaultBehindFiles
	}
	if opts.BehindBytes <= 0 {
		opts.BehindBytes = DefaultBehindBytes
	}
	if opts.BehindTimeout <= 0 {
		opts.BehindTimeout = 5 * time.Minute
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxListing <= 0 {
		opts.MaxListing = DefaultMaxListing
	}
	opts.MaxListing = min(opts.MaxListing, opts.MaxEntries)
	if !strings.HasPrefix(opts.Root, "/") {
		return nil, providers.Errorf(providers.Invalid, op, "workspace root %q is not absolute", opts.Root)
	}
	rs, _ := remote.(providers.RenameStater)
	rms, _ := remote.(providers.RemoveStater)
	sas, _ := remote.(providers.SetattrStater)
	c := &Cache{
		remote:  remote,
		sw:      providers.AsStatWriter(remote),
		rs:      rs,
		rms:     rms,
		sas:     sas,
		cold:    map[string]int{},
		ahead:   newReadAhead(),
		reap:    newReaper(),
		opts:    opts,
		log:     opts.Logger.With("box", opts.Box),
		now:     opts.Now,
		dataDir: filepath.Join(opts.Dir, "data"),
		dirs:    pathmap.New[*dirList](),
		attrs:   pathmap.New[attrEntry](),
		files:   pathmap.New[*file](),
		links:   map[linkKey]map[string]bool{},
		dirty:   map[*file]struct{}{},
		news:    pathmap.New[*file](),
		pdirs:   pathmap.New[*pendingDir](),
		prms:    pathmap.New[*pendingRm](),
		fm:      newModel(),
		swept:   map[string]bool{},
	}
	c.started = c.now()
	for _, d := range []string{c.dataDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, providers.E(providers.Unknown, op, err)
		}
	}
	c.sr, _ = remote.(providers.SmallReader)
	c.cw, _ = remote.(providers.CappedWalker)
	c.hr, _ = remote.(providers.HostReader)
	if hw, ok := remote.(providers.HostWriter); ok && hw.HostFiles() {
		c.hw = hw
	}
	if err := c.loadJournal(); err != nil {
		return nil, err
	}
	shownPath := opts.ShownPath
	if shownPath == "" {
		shownPath = filepath.Join(opts.Dir, shownName)
	}
	c.shownd = openShownLog(shownPath)
	if opts.WriteBehind {
		c.behind = newBehind(c)
	} else if _, ok := remote.(providers.BatchRemover); ok && c.hw == nil && opts.PipelineRemoves {
		// A remote box answering batches of removes: rm -rf need not
		// wait a round trip per name.
		c.rmsend = newRmSender(c)
	}
	if opts.ListingIdle == 0 {
		opts.ListingIdle = DefaultListingIdle
		c.opts.ListingIdle = opts.ListingIdle
	}
	c.idle = newIdleSweep(c, opts.ListingIdle)
	return c, nil
}

// Root is the box-side workspace path.
func (c *Cache) Root() string { return c.opts.Root }

// AttrTimeout is how long the cache trusts what it has seen.
func (c *Cache) AttrTimeout() time.Duration { return c.opts.AttrTimeout }

// abs is the box-side path of rel.
func (c *Cache) abs(rel string) string {
	if rel == "" {
		return c.opts.Root
	}
	return path.Join(c.opts.Root, rel)
}

func split(rel string) (dir, name string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func (c *Cache) fresh(t time.Time) bool {
	return !t.IsZero() && c.now().Sub(t) < c.opts.AttrTimeout
}

// freshAttr reports whether a can answer without the box: within the
// attribute timeout, or trusted while the watch is (a report of a change
// makes it stale or zeroes its time). c.mu held.
func (c *Cache) freshAttr(a attrEntry) bool {
	return c.fresh(a.at) || (c.fm.vouches(a.trust) && !a.at.IsZero() && !a.stale)
}

// Trust says whether a watch of the box now reports every change it makes
// (on: it is set and healthy) or may miss some (off: it lost changes or
// ended). While on, what is fetched from the box from then on stays fresh
// past the attribute timeout until a report (BoxChanged) says otherwise:
// a listing or stat needs no round trip to be revalidated. A fetch in
// flight while a report comes is installed, but only for the timeout: its
// answer may be older than the change reported.
func (c *Cache) Trust(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fm.setHealthy(on)
}

// Lookup returns the attributes of rel, from the listing while it is fresh,
// else from the box: a stale directory is listed again in one round trip,
// which answers every other lookup in it too (git status looks up every name).
// A missing path is NotFound with ENOENT.
func (c *Cache) Lookup(ctx context.Context, rel string) (providers.FileInfo, error) {
	fi, err := c.lookup(ctx, rel)
	if err != nil {
		return fi, err
	}
	return c.shown(rel, fi), nil
}

func (c *Cache) lookup(ctx context.Context, rel string) (providers.FileInfo, error) {
	if f := c.localFile(rel); f != nil {
		if fi, ok := f.localAttr(); ok {
			return fi, nil
		}
	}
	if rel == "" {
		return c.stat(ctx, rel)
	}
	dir, name := split(rel)
	c.mu.Lock()
	if fi, ok := c.pendingAttrLocked(rel); ok {
		c.mu.Unlock()
		return fi, nil
	}
	if c.goneLocked(rel) {
		c.mu.Unlock()
		return providers.FileInfo{}, c.notFound("cache.Lookup", rel)
	}
	if a, ok := c.attrGet(rel); ok && c.freshAttr(a) {
		c.mu.Unlock()
		if a.stale {
			return c.stat(ctx, rel)
		}
		if a.neg {
			return providers.FileInfo{}, c.notFound("cache.Lookup", rel)
		}
		return a.fi, nil
	}
	d := c.dir(dir)
	if c.usable(d) {
		fi, ok := d.entries[name]
		c.mu.Unlock()
		if !ok {
			return providers.FileInfo{}, c.notFound("cache.Lookup", rel)
		}
		return fi, nil
	}
	big := d != nil && len(d.entries) > c.opts.BigDir || c.lists.tooLarge[dir]
	// A box whose files are on this host answers one name's lstat for
	// less than a listing of its directory costs.
	here := c.hw != nil
	c.mu.Unlock()
	if !big && !here {
		if list, err := c.ReadDir(ctx, dir); err == nil {
			// The listing's answer, installed or not (a gap of the watch
			// meanwhile leaves it uninstalled, and the cache's own
			// listing older).
			i, ok := slices.BinarySearchFunc(list, name, func(fi providers.FileInfo, name string) int { return strings.Compare(fi.Name, name) })
			if !ok {
				return providers.FileInfo{}, c.notFound("cache.Lookup", rel)
			}
			return list[i], nil
		} else if providers.CodeOf(err) != providers.Permission {
			return providers.FileInfo{}, err
		}
	}
	return c.stat(ctx, rel)
}

// knownAttr returns the latest attributes the cache holds of rel, fresh
// or not, without asking the box.
func (c *Cache) knownAttr(rel string) (providers.FileInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.knownAttrLocked(rel)
}

func (c *Cache) knownAttrLocked(rel string) (providers.FileInfo, bool) {
	if a, ok := c.attrGet(rel); ok && !a.neg {
		return a.fi, true
	}
	dir, name := split(rel)
	if d := c.dir(dir); d != nil {
		fi, ok := d.entries[name]
		return fi, ok
	}
	return providers.FileInfo{}, false
}

func (c *Cache) notFound(op, rel string) error {
	return providers.PathError(op, c.opts.Box, c.abs(rel), syscall.ENOENT)
}

// Getattr returns rel's attributes: the host's for a file written here and not
// yet pushed, else what the box said within the attribute timeout, else a new
// stat of the box.
func (c *Cache) Getattr(ctx context.Context, rel string) (providers.FileInfo, error) {
	fi, err := c.getattr(ctx, rel)
	if err != nil {
		return fi, err
	}
	return c.shown(rel, fi), nil
}

// shown returns fi, the box's attributes of rel, as the host reports them:
// a file the host wrote keeps the modification and change times the host
// reported while it was dirty (when it was last written here), for as long
// as the box holds the file the push made, unchanged, and its access time
// until the box reads it. The box's own times are those of the push,
// later: git records what fstat said of each file a checkout wrote, before
// the close, and takes a file whose times moved for one changed (git am
// refuses to apply to it).
func (c *Cache) shown(rel string, fi providers.FileInfo) providers.FileInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shownLocked(rel, fi)
}

func (c *Cache) shownLocked(rel string, fi providers.FileInfo) providers.FileInfo {
	if !fi.IsRegular() {
		return fi
	}
	if f := c.file(rel); f != nil {
		f.mu.Lock()
		out, ok := f.shownLocked(fi)
		f.mu.Unlock()
		if ok {
			return out
		}
	}
	// A file an earlier process pushed (a remount): the times it showed.
	return c.shownd.show(rel, fi)
}

// shownAfter is what a change of rel's attributes answers: fi, the
// attributes the change left, as shown, or err.
func (c *Cache) shownAfter(rel string, fi providers.FileInfo, err error) (providers.FileInfo, error) {
	if err != nil {
		return fi, err
	}
	return c.shown(rel, fi), nil
}

// getattr is Getattr with the box's own times: what the cache compares
// with what it holds.
func (c *Cache) getattr(ctx context.Context, rel string) (providers.FileInfo, error) {
	if f := c.localFile(rel); f != nil {
		if fi, ok := f.localAttr(); ok {
			return fi, nil
		}
	}
	c.mu.Lock()
	if fi, ok := c.pendingAttrLocked(rel); ok {
		c.mu.Unlock()
		return fi, nil
	}
	if c.goneLocked(rel) {
		c.mu.Unlock()
		return providers.FileInfo{}, c.notFound("cache.Lookup", rel)
	}
	if a, ok := c.attrGet(rel); ok && c.freshAttr(a) {
		c.mu.Unlock()
		if a.stale {
			return c.stat(ctx, rel)
		}
		if a.neg {
			return providers.FileInfo{}, c.notFound("cache.Getattr", rel)
		}
		return a.fi, nil
	}
	if rel != "" {
		dir, name := split(rel)
		if d := c.dir(dir); c.usable(d) {
			fi, ok := d.entries[name]
			c.mu.Unlock()
			if !ok {
				return providers.FileInfo{}, c.notFound("cache.Getattr", rel)
			}
			return fi, nil
		}
	}
	c.mu.Unlock()
	return c.stat(ctx, rel)
}

// stat asks the box for rel's attributes and records the answer, a missing
// path included.
func (c *Cache) stat(ctx context.Context, rel string) (providers.FileInfo, error) {
	// What a fetch brings is as old as its ask: it is fresh for the
	// attribute timeout from then (F-timeout).
	now := c.now()
	t := c.beginFetch()
	fi, err := c.remote.Lstat(ctx, c.abs(rel))
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.fm.end(t)
	if c.goneLocked(rel) {
		// Removed here; the box has not been told yet.
		c.setAttrLocked(rel, attrEntry{at: now, neg: true})
		return providers.FileInfo{}, c.notFound("cache.Lookup", rel)
	}
	v := c.fm.judge(rel, t)
	keep := v == install || v == reported
	trust := v == install && c.fm.trusted(t)
	old, known := c.attrGet(rel)
	if err != nil {
		if providers.CodeOf(err) == providers.NotFound && keep {
			c.fm.installed(rel, t)
			c.learnAttrLocked(rel, old, known, providers.FileInfo{}, false)
			c.setAttrLocked(rel, attrEntry{at: now, neg: true, trust: trust})
			if dir, name := split(rel); rel != "" {
				if d := c.dir(dir); d != nil {
					delete(d.entries, name) // the listing agrees with the newer stat
				}
			}
			if v == reported {
				c.staleLocked(rel, now)
			}
		}
		return providers.FileInfo{}, err
	}
	_, fi.Name = split(rel)
	if keep {
		c.fm.installed(rel, t)
		c.learnAttrLocked(rel, old, known, fi, true)
		c.recordLocked(rel, fi, now)
		if trust {
			a, _ := c.attrGet(rel)
			a.trust = true
			c.attrs.Set(rel, a)
		}
		if v == reported {
			c.staleLocked(rel, now)
		}
	}
	return fi, nil
}

// beginFetch notes a fetch from the box starting and returns its ticket.
// Call c.fm.end with c.mu held once its answer is judged.
func (c *Cache) beginFetch() ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fm.begin()
}

// touchLocked notes a change the host made to what the cache knows of rel.
// c.mu held.
func (c *Cache) touchLocked(rel string) {
	c.fm.hostChanged(rel)
	c.fm.noteHost(rel, c.now())
}

// overlayLocked lays the host's changes made after the fetch with ticket t
// began over its listing (attrs by path, dirs by directory) before it is
// installed: what the host knows of a changed path wins; a path it forgot
// leaves its directory's listing stale. Only the names in the directories
// in lists are considered: one, or all of them (in nil). It returns the
// paths the watch reported meanwhile, to be made stale again once the
// listing is installed (staleLocked), and the host's own entries of the
// paths it changed, to be kept as they are (stale or not). c.mu held.
func (c *Cache) overlayLocked(t ticket, attrs map[string]providers.FileInfo, dirs map[string]*dirList, in []string) (again []string, host map[string]attrEntry) {
	if in == nil {
		in = c.fm.changedDirs()
	}
	host = map[string]attrEntry{}
	for _, dir := range in {
		c.fm.changedIn(dir, t, func(name string, v verdict) {
			if v == hostWins {
				p := join(dir, name)
				if a, ok := c.attrGet(p); ok {
					host[p] = a
					if a.stale {
						// The host's entry waits for the box's word:
						// its listing does too.
						again = append(again, p)
					}
				}
				c.overlayOneLocked(dir, name, attrs, dirs)
			} else {
				again = append(again, join(dir, name))
			}
		})
	}
	return again, host
}

func (c *Cache) overlayOneLocked(dir, name string, attrs map[string]providers.FileInfo, dirs map[string]*dirList) {
	p := join(dir, name)
	a, known := c.attrGet(p)
	if known && !a.neg {
		attrs[p] = a.fi
		if d := dirs[dir]; d != nil {
			d.entries[name] = a.fi
		}
		if od := c.dir(p); od != nil && dirs[p] == nil && a.fi.IsDir() {
			dirs[p] = od
		}
		return
	}
	fetched, ok := attrs[p]
	delete(attrs, p)
	if ok && fetched.IsDir() {
		prefix := p + "/"
		for k := range attrs {
			if strings.HasPrefix(k, prefix) {
				delete(attrs, k)
			}
		}
		for k := range dirs {
			if k == p || strings.HasPrefix(k, prefix) {
				delete(dirs, k)
			}
		}
	}
	if d := dirs[dir]; d != nil {
		if !known {
			// The host's change left the path unknown (a rename of a
			// name it did not know): the listing is stale, and shows
			// what the box had when it was asked, not an absence that
			// never was.
			d.fetched = time.Time{}
			if ok && !fetched.IsDir() {
				return
			}
		}
		delete(d.entries, name)
	}
}

// transient reports whether name is a temporary file boxfs's own writers
// make beside a file they replace (the agent and the local provider's
// ".boxfs-tmp-", the scripts' and Daytona's ".boxfs-w."): a listing taken
// while a push runs may catch one; it is never shown.
func transient(name string) bool {
	return strings.HasPrefix(name, ".boxfs-tmp-") || strings.HasPrefix(name, ".boxfs-w.")
}

// record keeps a fresh stat of rel, in its directory's listing too.
func (c *Cache) record(rel string, fi providers.FileInfo, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.touchLocked(rel)
	c.recordLocked(rel, fi, at)
}

func (c *Cache) recordLocked(rel string, fi providers.FileInfo, at time.Time) {
	c.setAttrLocked(rel, attrEntry{fi: fi, at: at})
	if rel == "" {
		return
	}
	dir, name := split(rel)
	if d := c.dir(dir); d != nil {
		d.entries[name] = fi
	}
}

// dirChangedLocked notes that the box changed the directory holding rel
// (a name made, removed or renamed in it, or a push's temporary name
// renamed over a file): its mtime, ctime and link count are the box's to
// say now, so the next stat of it asks the box (rsync re-stats a directory
// after filling it, and resets its times only when they moved). c.mu held.
func (c *Cache) dirChangedLocked(rel string) {
	if rel == "" {
		return
	}
	dir, _ := split(rel)
	a, ok := c.attrGet(dir)
	if !ok || a.neg {
		if dir == "" {
			return
		}
		gp, name := split(dir)
		d := c.dir(gp)
		if d == nil {
			return
		}
		fi, ok := d.entries[name]
		if !ok {
			return
		}
		a = attrEntry{fi: fi}
	}
	a.at, a.stale = c.now(), true
	c.setAttrLocked(dir, a)
}

// dirTouchedLocked notes that the box made, replaced or removed a file in
// the directory holding rel: its times moved, its link count did not.
// They are moved here too (to the host's clock), without asking the box:
// with default_permissions the kernel checks the directory's attributes
// at every create in it, and a stale one would cost a round trip per file.
// A listing or stat of the box brings its own times back. c.mu held.
func (c *Cache) dirTouchedLocked(rel string) {
	if rel == "" {
		return
	}
	dir, _ := split(rel)
	fi, ok := c.knownAttrLocked(dir)
	if !ok {
		return
	}
	if a, _ := c.attrGet(dir); a.stale {
		return // asked of the box already
	}
	now := c.now()
	fi.Mtime, fi.Ctime = now, now
	c.recordLocked(dir, fi, now)
}

// linkKey names one box inode.
type linkKey struct{ dev, ino uint64 }

// hardLinked reports whether fi is a box file with more than one name.
func hardLinked(fi providers.FileInfo) bool {
	return fi.Ino != 0 && fi.Nlink >= 2 && !fi.IsDir()
}

// attrGet returns what the cache holds of rel's attributes. c.mu held.
func (c *Cache) attrGet(rel string) (attrEntry, bool) { return c.attrs.Get(rel) }

// dir returns rel's listing, or nil. c.mu held.
func (c *Cache) dir(rel string) *dirList {
	d, _ := c.dirs.Get(rel)
	return d
}

// file returns rel's content state, or nil. c.mu held.
func (c *Cache) file(rel string) *file {
	f, _ := c.files.Get(rel)
	return f
}

// setAttrLocked keeps e as rel's attributes, and a name of a hard link in
// the index of links. c.mu held.
func (c *Cache) setAttrLocked(rel string, e attrEntry) {
	c.attrs.Set(rel, e)
	if !e.neg && hardLinked(e.fi) {
		k := linkKey{e.fi.Dev, e.fi.Ino}
		names := c.links[k]
		if names == nil {
			names = map[string]bool{}
			c.links[k] = names
		}
		names[rel] = true
	}
}

// linkedLocked returns the other names the cache knows of the box file fi
// describes at rel: the same device and inode, with more than one link.
// Each name of a hard link is a file of its own here (its own content copy,
// its own attributes), so what changes the box file through one name is
// passed on to the others by the caller. It costs the number of names the
// inode was seen under, not the size of the cache. c.mu held.
func (c *Cache) linkedLocked(rel string, fi providers.FileInfo) []string {
	if !hardLinked(fi) {
		return nil
	}
	k := linkKey{fi.Dev, fi.Ino}
	names := c.links[k]
	var out []string
	for p := range names {
		if p == rel {
			continue
		}
		o, ok := c.knownAttrLocked(p)
		if !ok || o.Ino != fi.Ino || o.Dev != fi.Dev || o.IsDir() {
			delete(names, p) // gone, or another file now
			continue
		}
		out = append(out, p)
	}
	if len(names) == 0 {
		delete(c.links, k)
	}
	sortStrings(out)
	return out
}

// Linked returns the other names the cache knows of rel's box file when
// it has hard links (none otherwise): a write or setattr through rel
// changed them too, and the filesystem tells the kernel so.
func (c *Cache) Linked(rel string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, ok := c.knownAttrLocked(rel)
	if !ok {
		return nil
	}
	return c.linkedLocked(rel, fi)
}

// linksChangedLocked records fi, what the box said of rel's file after a
// change of its content or attributes, for the file's other names; with
// exact false (a setattr recorded without a stat) they are asked of the box
// at their next use. Their cached content then no longer matches (size and
// mtime differ), so the next open fetches what the box holds. c.mu held.
func (c *Cache) linksChangedLocked(rel string, fi providers.FileInfo, exact bool) {
	now := c.now()
	for _, p := range c.linkedLocked(rel, fi) {
		o := fi
		_, o.Name = split(p)
		if exact {
			c.touchLocked(p)
		} else {
			// What the host knows of p is a guess (the box may have
			// made another file there since): a fetch in flight is
			// kept, and p asked again, as for a report of it.
			c.fm.boxReported(p)
			c.fm.noteHost(p, now)
		}
		c.setAttrLocked(p, attrEntry{fi: o, at: now, stale: !exact})
		dir, name := split(p)
		if d := c.dir(dir); d != nil {
			d.entries[name] = o
		}
	}
}

// forget drops what the cache knows of rel (and, for a directory, below it).
func (c *Cache) forget(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(rel)
}

func (c *Cache) forgetLocked(rel string) {
	c.touchLocked(rel)
	c.attrs.Delete(rel)
	c.attrs.DeleteUnder(rel)
	c.dirs.Delete(rel)
	c.dirs.DeleteUnder(rel)
	if rel != "" {
		dir, name := split(rel)
		if d := c.dir(dir); d != nil {
			delete(d.entries, name)
		}
	}
	c.reoverlayLocked(rel)
}

// ReadDir lists a directory: from the listing while it is fresh, else with
// one round trip to the box. Entries carry full attributes (READDIRPLUS).
func (c *Cache) ReadDir(ctx context.Context, rel string) ([]providers.FileInfo, error) {
	c.mu.Lock()
	if known := c.dir(rel); c.usable(known) {
		c.touchListingLocked(known)
		out := c.entriesLocked(rel, known)
		c.mu.Unlock()
		return out, nil
	}
	// While a healthy watch vouches for the listings, a known one is stale
	// only because a report named it: it alone is asked again, not the
	// whole tree (a walk per report would cost the tree's size each time).
	named := c.dir(rel) != nil && c.fm.healthy
	c.mu.Unlock()
	if !named && c.revalidate(ctx) {
		c.mu.Lock()
		if d := c.dir(rel); c.usable(d) {
			out := c.entriesLocked(rel, d)
			c.mu.Unlock()
			return out, nil
		}
		c.mu.Unlock()
	}
	now := c.now() // what the listing brings is as old as its ask
	t := c.beginFetch()
	list, err := c.listRemote(ctx, rel)
	if err != nil {
		c.mu.Lock()
		if providers.CodeOf(err) == providers.NotFound && c.fm.judge(rel, t) != hostWins {
			c.forgetLocked(rel)
		}
		capped := errors.Is(err, errListingCapped)
		if capped {
			c.noteTooLargeLocked(rel)
		}
		c.fm.end(t)
		c.mu.Unlock()
		if capped {
			return nil, c.tooLargeCapped(rel)
		}
		return nil, err
	}
	if len(list) > c.opts.MaxListing {
		c.mu.Lock()
		c.fm.end(t)
		c.mu.Unlock()
		n := len(list)
		c.mu.Lock()
		c.noteTooLargeLocked(rel)
		c.mu.Unlock()
		if list = nil; n >= compactMin {
			freeMemory() // what the answer took
		}
		return nil, c.tooLarge(rel, n)
	}
	d := &dirList{entries: make(map[string]providers.FileInfo, len(list)), fetched: now}
	attrs := make(map[string]providers.FileInfo, len(list))
	for _, fi := range list {
		if transient(fi.Name) {
			continue
		}
		d.entries[fi.Name] = fi
		attrs[join(rel, fi.Name)] = fi
	}
	c.mu.Lock()
	if v, newer := c.fm.judge(rel, t), c.fm.listedAfter(rel, t); v == stale || v == hostWins || newer {
		// A gap of the watch, or a walk or listing begun after this
		// one was asked, came first, or the host changed the directory
		// itself meanwhile: the listing is answered, not installed
		// (F-gap, F-mono, F-noundo); the walk's or listing's, when it
		// has the directory, is the newer answer.
		if nd := c.dir(rel); nd != nil && (uint64(t) < c.fm.walkAt || newer) && c.usable(nd) {
			d = nd
		} else {
			// The box's answer, with what the host changed since it
			// was asked and what it holds unpushed laid over it.
			d = &dirList{entries: maps.Clone(d.entries), fetched: d.fetched}
			got := make(map[string]providers.FileInfo, len(d.entries))
			for name, fi := range d.entries {
				got[join(rel, name)] = fi
			}
			c.overlayLocked(t, got, map[string]*dirList{rel: d}, []string{rel})
			d = c.withPendingLocked(rel, d)
		}
		out := c.entriesLocked(rel, d)
		c.fm.end(t)
		c.mu.Unlock()
		return out, nil
	}
	again, host := c.overlayLocked(t, attrs, map[string]*dirList{rel: d}, []string{rel})
	if c.fm.judge(rel, t) == reported {
		again = append(again, rel)
	}
	d.trust = c.fm.trusted(t)
	c.learnListingLocked(rel, c.dir(rel), d)
	c.dirs.Set(rel, d)
	c.fm.dirListed(rel, t)
	// A name the listing does not have is gone: a stat of it taken
	// before does not outlive the listing (F-mono).
	var gone []string
	c.attrs.Children(rel, func(name string) {
		if _, ok := d.entries[name]; !ok {
			p := join(rel, name)
			if _, kept := host[p]; !kept {
				gone = append(gone, p)
			}
		}
	})
	for _, p := range gone {
		c.fm.installed(p, t)
		if a, _ := c.attrGet(p); !a.neg {
			c.setAttrLocked(p, attrEntry{at: now, neg: true, trust: d.trust})
		}
	}
	for p, fi := range attrs {
		c.fm.installed(p, t)
		c.setAttrLocked(p, attrEntry{fi: fi, at: now, trust: d.trust})
	}
	for p, a := range host {
		c.setAttrLocked(p, a)
	}
	c.overlayPendingLocked(rel, true)
	for _, p := range again {
		c.staleLocked(p, now)
	}
	c.fm.end(t)
	out := c.entriesLocked(rel, d)
	c.touchListingLocked(d)
	delete(c.lists.tooLarge, rel)
	free := c.boundListingsLocked(rel, len(d.entries))
	c.mu.Unlock()
	if free {
		freeMemory()
	}
	return out, nil
}

// entriesLocked renders a listing, with the host's attributes for files
// written here and not yet pushed.
func (c *Cache) entriesLocked(rel string, d *dirList) []providers.FileInfo {
	out := make([]providers.FileInfo, 0, len(d.entries))
	for name, fi := range d.entries {
		local := false
		if f := c.file(join(rel, name)); f != nil {
			if lfi, ok := f.localAttr(); ok {
				lfi.Name = name // one of two names made here (linkHere)
				fi, local = lfi, true
			}
		}
		if !local {
			fi = c.shownLocked(join(rel, name), fi)
		}
		out = append(out, fi)
	}
	sortInfos(out)
	return out
}

// Readlink returns a symlink's target, from the listing when it carries it.
func (c *Cache) Readlink(ctx context.Context, rel string) (string, error) {
	c.mu.Lock()
	a, ok := c.attrGet(rel)
	c.mu.Unlock()
	if ok && !a.neg && c.freshAttr(a) && a.fi.IsSymlink() && a.fi.Target != "" {
		return a.fi.Target, nil
	}
	return c.remote.Readlink(ctx, c.abs(rel))
}

// Statfs reports the capacity of the box's file system, asked at most once
// per attribute timeout.
func (c *Cache) Statfs(ctx context.Context) (providers.StatFS, error) {
	c.mu.Lock()
	if c.fresh(c.statfs.at) {
		v := c.statfs.v
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	v, err := c.remote.Statfs(ctx, c.opts.Root)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	c.statfs.v, c.statfs.at = v, c.now()
	c.mu.Unlock()
	return v, nil
}

// intend notes that the host is about to change rels in the box, and
// returns what to call once the change's answer is recorded (or failed).
// A host change is a fetch of its own: what it records is the box as the
// change left it, and a report of the watch naming one of rels while the
// change was in flight may be of a later box change, so it is laid over
// what the change recorded (F-watch), unless it shows the state the
// change left: the echo comes by the watch's own way and often first.
func (c *Cache) intend(rels ...string) (done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.fm.hostBegin(rels)
	begun := c.now()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		now := c.now()
		for _, rel := range rels {
			// What the change recorded is as old as its ask (F-timeout).
			if a, ok := c.attrGet(rel); ok && a.at.After(begun) {
				a.at = begun
				c.attrs.Set(rel, a)
			}
			if d := c.dir(rel); d != nil && d.fetched.After(begun) {
				d.fetched = begun
			}
			var echo uint64
			if h, ok := c.fm.heldFor(rel, t); ok {
				if c.echoStateLocked(h.ch, true) {
					// The cache holds the state the box reported:
					// what the report made stale is fresh again.
					a, _ := c.attrGet(rel)
					a.stale = false
					c.setAttrLocked(rel, a)
					c.fm.reports.Echoes++
					echo = h.tick
				} else {
					c.fm.reports.Taken++
				}
			}
			if c.fm.newsSince(rel, t, echo) {
				c.staleLocked(rel, now)
			}
		}
		c.fm.hostEnd(rels, t)
	}
}

// ReportCounts counts a watch's reports of single paths.
type ReportCounts struct {
	Taken  uint64 `json:"taken"`  // made their paths stale
	Echoes uint64 `json:"echoes"` // dropped: the box shows the path as the cache holds it
}

// Reports returns the counts of the watch's reports so far.
func (c *Cache) Reports() ReportCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fm.reports
}

// BoxChanged is Reported for reports that carry no attributes.
func (c *Cache) BoxChanged(rels []string, all bool) []string {
	return c.Reported(providers.PathChanges(rels), all)
}

// Reported takes a batch of the watch's reports (docs/design.md §6). all
// is a gap: everything is asked of the box again at its next use, and no
// fetch in flight is installed (F-gap). A report whose attributes are
// what the cache holds of its path (or that finds gone a path the cache
// holds missing) is no news: the echo of the host's own change, dropped
// with no round trip (F-echo). Any other report makes its path, its
// directory's listing and (for a directory) everything below it be asked
// again at their next use (F-watch). It returns the paths made stale.
func (c *Cache) Reported(changes []providers.Change, all bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if all {
		if c.fm.gap() {
			c.invalidateLocked()
		}
		return nil
	}
	now := c.now()
	var changed []string
	for _, ch := range changes {
		if c.holdLocked(ch) {
			// Judged when the host's change ends; the kernel asks
			// again, and the cache answers what that change records.
			changed = append(changed, ch.Path)
			continue
		}
		if c.echoLocked(ch) {
			// No news: the box shows what the cache holds. A fetch in
			// flight is not judged against it: begun before the host's
			// change, its answer is older than the echo's state, and
			// begun after, no older.
			c.fm.reports.Echoes++
			continue
		}
		c.fm.reports.Taken++
		c.boxChangedLocked(ch.Path, now)
		changed = append(changed, ch.Path)
	}
	return changed
}

// holdLocked holds a report of a file (or of a path found gone) whose
// host change is in flight (a call, or an open writing the box's own
// file): what that change leaves is not recorded yet,
// so the report is judged when it is (intend). Meanwhile the path and its
// directory's listing are asked of the box at their next use, as for any
// report (F-watch). c.mu held.
func (c *Cache) holdLocked(ch providers.Change) bool {
	if !ch.Gone && (ch.Info == nil || ch.Info.IsDir()) {
		return false
	}
	if !c.fm.hostBusy(ch.Path) && !c.writingLocked(ch.Path) {
		return false
	}
	c.fm.hold(ch)
	c.staleLocked(ch.Path, c.now())
	return true
}

// writingLocked reports whether rel has an open writing the box's own
// file (hostwrite.go): the kernel writes it with no word to the host, and
// the close records what the writes left, so a report meanwhile is a host
// change in flight. c.mu held.
func (c *Cache) writingLocked(rel string) bool {
	f := c.file(rel)
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.writers) > 0
}

// echoLocked reports whether a report carries no news: the box shows its
// path as the cache holds it. A report without attributes, of a path a
// host change of which is in flight (what it leaves is not recorded yet),
// or of a directory (a directory watched as it appeared may hold changes
// its own attributes do not show) is news. c.mu held.
func (c *Cache) echoLocked(ch providers.Change) bool {
	if ch.Info == nil && !ch.Gone || c.fm.hostBusy(ch.Path) {
		return false
	}
	return c.echoStateLocked(ch, false)
}

// echoStateLocked is echoLocked for a report with attributes, or of a
// path gone, whatever is in flight; held is a report holdLocked held
// (which made the attributes stale itself). c.mu held.
func (c *Cache) echoStateLocked(ch providers.Change, held bool) bool {
	if ch.Gone {
		if _, known := c.knownAttrLocked(ch.Path); !known && c.dir(ch.Path) == nil {
			// A name only writers make and the host never shows (an
			// O_TMPFILE's "#ino", boxfs's own temporary names).
			if _, name := split(ch.Path); transient(name) || tmpfileName(name) {
				return true
			}
		}
	}
	// Only the state the host's own change left is known to the kernel
	// too: one a fetch found (the kernel may hold an older one) is
	// news for the kernel, and the report is taken.
	a, ok := c.attrGet(ch.Path)
	if !ok || a.stale && !held || !c.fm.hostRecent(ch.Path, c.now()) {
		return false
	}
	if ch.Gone {
		return a.neg
	}
	return !a.neg && !ch.Info.IsDir() && sameState(a.fi, *ch.Info)
}

// tmpfileName reports whether name is the kernel's name of an O_TMPFILE
// file ("#" and its inode number), which inotify reports.
func tmpfileName(name string) bool {
	if len(name) < 2 || name[0] != '#' {
		return false
	}
	for _, r := range name[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// sameState reports whether two stats of a path show one state of it: a
// change of its content, attributes or names moves its change time.
func sameState(a, b providers.FileInfo) bool {
	return a.Mode == b.Mode && a.Size == b.Size && a.Mtime.Equal(b.Mtime) && a.Ctime.Equal(b.Ctime) &&
		a.Ino == b.Ino && a.Nlink == b.Nlink && !a.Ctime.IsZero()
}

// boxChangedLocked takes a report of the watch naming rel: what the
// cache holds of rel, its directory's listing and (for a directory) all
// below it are asked of the box at their next use (staleLocked). A fetch
// in flight is still installed (the refresh after a command already has
// the box's newer state), and the report is then laid over it again
// (model.judge). c.mu held.
func (c *Cache) boxChangedLocked(rel string, now time.Time) {
	c.fm.boxReported(rel)
	c.staleLocked(rel, now)
}

// staleLocked makes what the cache holds of rel, its directory's listing
// and (for a directory) everything below it stale. c.mu held.
func (c *Cache) staleLocked(rel string, now time.Time) {
	// rel's own attributes are asked of the box at their next use, whether
	// they came from a stat or a listing.
	if a, ok := c.attrGet(rel); ok {
		a.at, a.stale = now, true
		c.setAttrLocked(rel, a)
	} else if dir, name := split(rel); rel != "" && c.dir(dir) != nil {
		if fi, ok := c.dir(dir).entries[name]; ok {
			c.setAttrLocked(rel, attrEntry{fi: fi, at: now, stale: true})
		}
	}
	if rel != "" {
		dir, _ := split(rel)
		if d := c.dir(dir); d != nil {
			d.fetched = time.Time{}
		}
	}
	d := c.dir(rel)
	if a, _ := c.attrGet(rel); d == nil && !a.fi.IsDir() {
		return
	}
	if d != nil {
		d.fetched = time.Time{}
	}
	for _, p := range c.dirs.Under(rel) {
		c.dir(p).fetched = time.Time{}
	}
	for _, p := range c.attrs.Under(rel) {
		a, _ := c.attrGet(p)
		a.at = time.Time{}
		c.attrs.Set(p, a)
	}
}

// Invalidate makes every listing and attribute stale, so the next use asks
// the box again. Cached content stays and is checked against the next stat.
func (c *Cache) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.invalidateLocked()
}

func (c *Cache) invalidateLocked() {
	c.dirs.Range(func(_ string, d *dirList) bool {
		d.fetched = time.Time{}
		return true
	})
	for _, k := range c.attrs.Under("") {
		a, _ := c.attrGet(k)
		a.at = time.Time{}
		c.attrs.Set(k, a)
	}
	if a, ok := c.attrGet(""); ok {
		a.at = time.Time{}
		c.attrs.Set("", a)
	}
	c.statfs.at = time.Time{}
}

// afterMutation records what a mutation made of rel: a fresh stat of it,
// and its directory's listing kept in step.
func (c *Cache) afterMutation(ctx context.Context, rel string) (providers.FileInfo, error) {
	fi, err := c.remote.Lstat(ctx, c.abs(rel))
	if err != nil {
		c.forget(rel)
		return providers.FileInfo{}, err
	}
	_, fi.Name = split(rel)
	c.record(rel, fi, c.now())
	return fi, nil
}

// afterSetattr records what a chmod, chown or utimes made of rel without a
// round trip: the fields it set are exact; the change time (and anything
// else the box did) is not known, so the attribute is marked stale and the
// next lookup or getattr of rel asks the box, unless a fresh listing of its
// directory comes first. tar sets three of these on every file it makes.
func (c *Cache) afterSetattr(ctx context.Context, rel string, set func(*providers.FileInfo)) (providers.FileInfo, error) {
	c.mu.Lock()
	a, ok := c.attrGet(rel)
	c.mu.Unlock()
	if !ok || a.neg {
		return c.afterMutation(ctx, rel)
	}
	fi := a.fi
	set(&fi)
	fi.Ctime = c.now()
	c.mu.Lock()
	c.touchLocked(rel)
	c.setAttrLocked(rel, attrEntry{fi: fi, at: c.now(), stale: true})
	if rel != "" {
		dir, name := split(rel)
		if d := c.dir(dir); d != nil {
			d.entries[name] = fi
		}
	}
	c.linksChangedLocked(rel, fi, false)
	c.mu.Unlock()
	return fi, nil
}

// Mkdir makes a directory in the box.
func (c *Cache) Mkdir(ctx context.Context, rel string, perm fs.FileMode) (providers.FileInfo, error) {
	if fi, ok := c.mkdirHere(rel, perm); ok {
		return fi, nil
	}
	if err := c.settle(ctx, rel); err != nil {
		return providers.FileInfo{}, err
	}
	defer c.intend(rel)()
	fi, err := c.sw.MkdirStat(ctx, c.abs(rel), perm)
	if err != nil {
		return providers.FileInfo{}, err
	}
	c.mu.Lock()
	c.dirs.Set(rel, &dirList{entries: map[string]providers.FileInfo{}, fetched: c.now()})
	c.mu.Unlock()
	return c.made(rel, fi), nil
}

// made records what a mutation that answered with attributes made of rel.
func (c *Cache) made(rel string, fi providers.FileInfo) providers.FileInfo {
	_, fi.Name = split(rel)
	c.mu.Lock()
	c.touchLocked(rel)
	c.recordLocked(rel, fi, c.now())
	if fi.IsDir() {
		c.dirChangedLocked(rel) // one link more on the directory
	} else {
		c.dirTouchedLocked(rel)
	}
	c.mu.Unlock()
	return fi
}

// Symlink makes a symbolic link rel pointing at target.
func (c *Cache) Symlink(ctx context.Context, target, rel string) (providers.FileInfo, error) {
	if err := c.settle(ctx, rel); err != nil {
		return providers.FileInfo{}, err
	}
	defer c.intend(rel)()
	if err := c.remote.Symlink(ctx, target, c.abs(rel)); err != nil {
		return providers.FileInfo{}, err
	}
	fi, err := c.afterMutation(ctx, rel)
	if err == nil && fi.Target == "" {
		fi.Target = target
		c.record(rel, fi, c.now())
	}
	c.mu.Lock()
	c.dirChangedLocked(rel)
	c.mu.Unlock()
	return fi, err
}

// Link makes newrel a hard link to oldrel.
func (c *Cache) Link(ctx context.Context, oldrel, newrel string) (providers.FileInfo, error) {
	if fi, done, err := c.linkHere(oldrel, newrel); done {
		return fi, err
	}
	if f := c.localFile(newrel); c.behind != nil && f != nil && f.isDirty() {
		// The host shows its queued write of newrel (F-dirty), also when
		// the box removed the file meanwhile, and link(2) never replaces
		// a file: the box, which may lack it, is not asked.
		return providers.FileInfo{}, providers.PathError("cache.Link", c.opts.Box, c.abs(newrel), syscall.EEXIST)
	}
	if f := c.localFile(oldrel); f != nil {
		if err := f.push(ctx, c); err != nil {
			return providers.FileInfo{}, err
		}
	}
	if err := c.settle(ctx, oldrel, newrel); err != nil {
		return providers.FileInfo{}, err
	}
	defer c.intend(oldrel, newrel)()
	before, known := c.knownAttr(oldrel)
	if err := c.remote.Link(ctx, c.abs(oldrel), c.abs(newrel)); err != nil {
		return providers.FileInfo{}, err
	}
	fi, err := c.afterMutation(ctx, newrel)
	c.mu.Lock()
	c.dirChangedLocked(newrel)
	if err == nil {
		c.linksChangedLocked(newrel, fi, true) // one link more, on every name
	}
	c.mu.Unlock()
	switch {
	case err == nil && known && before.Ino == fi.Ino && before.Dev == fi.Dev:
		// One inode under two names: oldrel's link count changed the same
		// way, with no second round trip (git links every object it writes).
		old := fi
		_, old.Name = split(oldrel)
		c.record(oldrel, old, c.now())
		// The kernel takes the answer for the one inode of both names:
		// the times oldrel is shown with.
		fi = c.shown(oldrel, fi)
	case err == nil:
		// Another inode (a file the box made at newrel since the link),
		// or oldrel's not known: oldrel is asked at its next use.
		c.mu.Lock()
		c.staleLocked(oldrel, c.now())
		c.mu.Unlock()
	default:
		c.forget(oldrel)
	}
	return fi, err
}

// Remove unlinks a file. Its cached content goes too (an open handle keeps
// reading it until it is released).
func (c *Cache) Remove(ctx context.Context, rel string) error {
	if c.removeHere(rel) || c.removeBehind(rel) {
		return nil
	}
	// A file the host knows under other names keeps them, with one link
	// fewer and a new change time: where the remote answers the unlink
	// with those, they are recorded, and a report of another name while
	// the unlink is in flight is judged against them (F-echo).
	c.mu.Lock()
	rels := []string{rel}
	if fi, ok := c.knownAttrLocked(rel); ok && c.rms != nil {
		rels = append(rels, c.linkedLocked(rel, fi)...)
	}
	c.mu.Unlock()
	defer c.intend(rels...)()
	left, err := c.removeStat(ctx, rel, len(rels) > 1)
	if err != nil {
		return err
	}
	c.shownd.drop(rel)
	c.mu.Lock()
	var others []string
	if fi, ok := c.knownAttrLocked(rel); ok {
		others = c.linkedLocked(rel, fi)
		if left != nil && left.Nlink > 0 && left.Ino == fi.Ino && left.Dev == fi.Dev {
			// The other names, as the unlink left them.
			now := c.now()
			for _, p := range others {
				o := *left
				_, o.Name = split(p)
				c.touchLocked(p)
				c.recordLocked(p, o, now)
			}
		} else {
			c.linksChangedLocked(rel, fi, false) // one link fewer: asked of the box
		}
	}
	f := c.file(rel)
	c.files.Delete(rel)
	// The file lives on under another name of a hard link: an open of the
	// removed name writes into it there, as on a disk.
	heir, dropped := c.heirLocked(f, others)
	c.forgetLocked(rel)
	c.setAttrLocked(rel, attrEntry{at: c.now(), neg: true})
	c.dirTouchedLocked(rel)
	c.mu.Unlock()
	if dropped != nil {
		dropped.unlinked(c)
	}
	switch {
	case f != nil && heir != "":
		f.setRel(heir)
		f.rewriteJournal(c)
	case f != nil:
		f.unlinked(c)
	}
	return nil
}

// removeStat unlinks rel in the box and, when withStat is set and the
// remote answers an unlink with what it left (providers.RemoveStater),
// returns the attributes the file keeps under its other names.
func (c *Cache) removeStat(ctx context.Context, rel string, withStat bool) (*providers.FileInfo, error) {
	c.mu.Lock()
	rs := c.rms
	c.mu.Unlock()
	if withStat && rs != nil {
		fi, err := rs.RemoveStat(ctx, c.abs(rel))
		if err == nil {
			return &fi, nil
		}
		if !providers.IsCode(err, providers.Unsupported) {
			return nil, err
		}
		c.mu.Lock()
		c.rms = nil
		c.mu.Unlock()
	}
	return nil, c.remote.Remove(ctx, c.abs(rel))
}

// heirLocked hands f, the copy of a name of a hard link that went away,
// on to another of its names (others), and returns that name ("" if none):
// the file lives on there, and an open of the name that went writes into
// it, as on a disk. A name whose own copy is not in use gives that copy up
// (returned as dropped, to be let go once c.mu is free): the opens through
// it may share f (openFileFor). c.mu held.
func (c *Cache) heirLocked(f *file, others []string) (heir string, dropped *file) {
	if f == nil {
		return "", nil
	}
	for _, o := range others {
		of := c.file(o)
		if of != nil {
			of.mu.Lock()
			busy := of.inUseLocked()
			of.mu.Unlock()
			if busy {
				continue
			}
		}
		c.files.Set(o, f)
		return o, of
	}
	return "", nil
}

// Rmdir removes an empty directory.
func (c *Cache) Rmdir(ctx context.Context, rel string) error {
	if c.rmdirBehind(rel) {
		return nil
	}
	if err := c.settle(ctx, rel); err != nil {
		return err
	}
	defer c.intend(rel)()
	if err := c.remote.Rmdir(ctx, c.abs(rel)); err != nil {
		return err
	}
	c.mu.Lock()
	c.forgetLocked(rel)
	c.setAttrLocked(rel, attrEntry{at: c.now(), neg: true})
	c.dirChangedLocked(rel)
	c.mu.Unlock()
	return nil
}

// Rename moves oldrel to newrel in the box, replacing newrel, as rename(2).
// Dirty content moves with the name: it is pushed to the new path.
func (c *Cache) Rename(ctx context.Context, oldrel, newrel string) error {
	c.mu.Lock()
	ofi, ook := c.knownAttrLocked(oldrel)
	nfi, nok := c.knownAttrLocked(newrel)
	c.mu.Unlock()
	if ook && !ofi.IsDir() && c.renameHere(oldrel, newrel) {
		return nil
	}
	if err := c.settle(ctx, oldrel, newrel); err != nil {
		return err
	}
	// A replaced file's dirty data must not be pushed over the moved one.
	defer c.intend(oldrel, newrel)()
	left, dirsLeft, err := c.renameStat(ctx, oldrel, newrel)
	if err != nil {
		return err
	}
	if left == nil && !c.knowsMoved(oldrel) {
		// What moved is not known here (its attributes are old or a
		// report made them stale) and the box did not say: asked now,
		// before the rename is recorded, so that a listing asked before
		// the rename and answered after it cannot show what the box had
		// under the new name before (the listing keeps a name the host
		// changed only where the host knows what the change left).
		if fi, err := c.remote.Lstat(ctx, c.abs(newrel)); err == nil {
			left = &fi
		}
	}
	if ook && nok && ofi.Ino != 0 && ofi.Ino == nfi.Ino && ofi.Dev == nfi.Dev && !ofi.IsDir() {
		// Two names of one file: rename(2) does nothing and both stay.
		// Asked of the box, as what the cache knew may be old.
		if _, err := c.remote.Lstat(ctx, c.abs(oldrel)); err == nil {
			return nil
		}
	}
	c.shownd.move(oldrel, newrel)
	c.mu.Lock()
	var others []string
	if nok && (nfi.Ino != ofi.Ino || nfi.Dev != ofi.Dev) {
		// A replaced file with hard links lives on under its other
		// names, one link fewer: asked of the box.
		others = c.linkedLocked(newrel, nfi)
		c.linksChangedLocked(newrel, nfi, false)
	}
	var dropped []*file
	var heir string
	var inherited *file
	// Files at or under the target are replaced.
	for _, k := range append(c.files.Under(newrel), newrel) {
		if f := c.file(k); f != nil {
			c.files.Delete(k)
			c.news.Delete(k)
			if k == newrel && len(others) > 0 {
				var gave *file
				if heir, gave = c.heirLocked(f, others); heir != "" {
					inherited = f
					if gave != nil {
						dropped = append(dropped, gave)
					}
					continue
				}
			}
			dropped = append(dropped, f)
		}
	}
	moved := map[string]*file{}
	for _, k := range append(c.files.Under(oldrel), oldrel) {
		if f := c.file(k); f != nil {
			moved[newrel+k[len(oldrel):]] = f
			c.files.Delete(k)
		}
	}
	for k, f := range moved {
		c.files.Set(k, f)
		f.setRel(k)
	}
	// Listings under either name are rebuilt on next use.
	c.forgetLocked(newrel)
	var kept providers.FileInfo
	var haveKept bool
	if a, ok := c.attrGet(oldrel); ok && !a.neg && !a.stale && c.freshAttr(a) {
		// What the host knows of the moved file, unless it is old or a
		// report or a setattr made it stale: then the new name is asked
		// of the box.
		kept, haveKept = a.fi, true
	}
	c.forgetLocked(oldrel)
	now := c.now()
	c.setAttrLocked(oldrel, attrEntry{at: now, neg: true})
	switch {
	case left != nil:
		// What the rename left, as the box answered it.
		c.recordLocked(newrel, *left, now)
	case haveKept:
		_, kept.Name = split(newrel)
		// rename(2) moved the file's change time: asked of the box.
		c.setAttrLocked(newrel, attrEntry{fi: kept, at: now, stale: true})
		dir, name := split(newrel)
		if d := c.dir(dir); d != nil {
			d.entries[name] = kept
		}
	default:
		// The cache holds nothing fresh of the old name, so what moved
		// is not known: the new name is asked of the box, not taken
		// for missing.
		dir, _ := split(newrel)
		if d := c.dir(dir); d != nil {
			d.fetched = time.Time{}
		}
	}
	// The directories' times, as the box answered them, else asked of it.
	newDir, _ := split(newrel)
	oldDir, _ := split(oldrel)
	dirLeft := map[string]providers.FileInfo{}
	if len(dirsLeft) > 0 {
		dirLeft[newDir] = dirsLeft[0]
	}
	if len(dirsLeft) > 1 && oldDir != newDir {
		dirLeft[oldDir] = dirsLeft[1]
	}
	for _, rel := range []string{oldrel, newrel} {
		dir, _ := split(rel)
		if fi, ok := dirLeft[dir]; ok {
			_, fi.Name = split(dir)
			c.recordLocked(dir, fi, now)
			continue
		}
		c.dirChangedLocked(rel)
	}
	c.mu.Unlock()
	for _, f := range dropped {
		f.unlinked(c)
	}
	if inherited != nil {
		inherited.setRel(heir)
		inherited.rewriteJournal(c)
	}
	for _, f := range moved {
		f.rewriteJournal(c)
	}
	return nil
}

// knowsMoved reports whether the host knows what a rename of rel moves:
// fresh attributes of it, or a copy of its content.
func (c *Cache) knowsMoved(rel string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file(rel) != nil {
		return true
	}
	a, ok := c.attrGet(rel)
	return ok && !a.neg && !a.stale && c.freshAttr(a)
}

// renameStat renames oldrel to newrel in the box and, where the remote
// answers a rename with what it left (providers.RenameStater), returns the
// new name's attributes and its directories' (newrel's first).
func (c *Cache) renameStat(ctx context.Context, oldrel, newrel string) (*providers.FileInfo, []providers.FileInfo, error) {
	c.mu.Lock()
	rs := c.rs
	c.mu.Unlock()
	if rs != nil {
		fi, dirs, err := rs.RenameStat(ctx, c.abs(oldrel), c.abs(newrel))
		if err == nil {
			_, fi.Name = split(newrel)
			return &fi, dirs, nil
		}
		if !providers.IsCode(err, providers.Unsupported) {
			return nil, nil, err
		}
		c.mu.Lock()
		c.rs = nil
		c.mu.Unlock()
	}
	return nil, nil, c.remote.Rename(ctx, c.abs(oldrel), c.abs(newrel))
}

// Chmod sets rel's mode bits in the box at once. Like Chown, Utimes and
// Truncate, it answers with rel's attributes as Getattr shows them (see
// shown): the kernel keeps the answer as the file's attributes, and a
// file the host wrote must not seem to have a new modification time
// because its mode changed.
func (c *Cache) Chmod(ctx context.Context, rel string, mode fs.FileMode) (providers.FileInfo, error) {
	fi, err := c.chmod(ctx, rel, mode)
	return c.shownAfter(rel, fi, err)
}

func (c *Cache) chmod(ctx context.Context, rel string, mode fs.FileMode) (providers.FileInfo, error) {
	if f := c.localFile(rel); f != nil {
		if f.deferMode(c, mode) {
			// Pushed with the content: tar's fchmod before close costs no
			// round trip of its own.
			fi, _ := f.localAttr()
			return fi, nil
		}
		f.setMode(mode)
		if !f.existsInBox() {
			fi, _ := f.localAttr()
			return fi, nil
		}
	}
	if fi, ok, err := c.setattrDirect(ctx, rel, func() error { return c.remote.Chmod(ctx, c.abs(rel), mode) }); ok {
		return fi, err
	}
	if fi, ok := c.setDirHere(rel, func(fi *providers.FileInfo, o *providers.WriteOptions) {
		fi.Mode = fi.Mode&^specialBits | mode&specialBits
		o.Perm, o.ForceMode = mode&specialBits, true
	}); ok {
		return fi, nil
	}
	if fi, ok, err := c.setattrStat(ctx, rel, func(ss providers.SetattrStater) (providers.FileInfo, error) {
		return ss.ChmodStat(ctx, c.abs(rel), mode)
	}); ok {
		return fi, err
	}
	defer c.intend(rel)()
	if err := c.remote.Chmod(ctx, c.abs(rel), mode); err != nil {
		return providers.FileInfo{}, err
	}
	return c.afterSetattr(ctx, rel, func(fi *providers.FileInfo) {
		fi.Mode = fi.Mode&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) | mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
	})
}

// Chown sets rel's owner in the box at once (-1 leaves one unchanged).
func (c *Cache) Chown(ctx context.Context, rel string, uid, gid int) (providers.FileInfo, error) {
	fi, err := c.chown(ctx, rel, uid, gid)
	return c.shownAfter(rel, fi, err)
}

func (c *Cache) chown(ctx context.Context, rel string, uid, gid int) (providers.FileInfo, error) {
	if f := c.localFile(rel); f != nil && f.deferOwner(c, uid, gid) {
		fi, _ := f.localAttr()
		return fi, nil
	}
	if fi, ok, err := c.setattrDirect(ctx, rel, func() error { return c.remote.Chown(ctx, c.abs(rel), uid, gid) }); ok {
		return fi, err
	}
	if fi, ok := c.setDirHere(rel, func(fi *providers.FileInfo, o *providers.WriteOptions) {
		if !o.Chown {
			o.UID, o.GID = -1, -1
		}
		o.Chown = true
		if uid >= 0 {
			fi.UID, o.UID = uint32(uid), uid
		}
		if gid >= 0 {
			fi.GID, o.GID = uint32(gid), gid
		}
	}); ok {
		return fi, nil
	}
	if fi, ok, err := c.setattrStat(ctx, rel, func(ss providers.SetattrStater) (providers.FileInfo, error) {
		return ss.ChownStat(ctx, c.abs(rel), uid, gid)
	}); ok {
		return fi, err
	}
	defer c.intend(rel)()
	if err := c.remote.Chown(ctx, c.abs(rel), uid, gid); err != nil {
		return providers.FileInfo{}, err
	}
	return c.afterSetattr(ctx, rel, func(fi *providers.FileInfo) {
		if uid >= 0 {
			fi.UID = uint32(uid)
		}
		if gid >= 0 {
			fi.GID = uint32(gid)
		}
	})
}

// Utimes sets rel's times. For a file with unpushed writes the times are
// applied right after the push, so the push does not undo them (cp -p, tar).
func (c *Cache) Utimes(ctx context.Context, rel string, atime, mtime time.Time) (providers.FileInfo, error) {
	fi, err := c.utimes(ctx, rel, atime, mtime)
	return c.shownAfter(rel, fi, err)
}

func (c *Cache) utimes(ctx context.Context, rel string, atime, mtime time.Time) (providers.FileInfo, error) {
	if f := c.localFile(rel); f != nil && f.deferTimes(c, atime, mtime) {
		fi, _ := f.localAttr()
		return fi, nil
	}
	if fi, ok, err := c.setattrDirect(ctx, rel, func() error { return c.remote.Utimes(ctx, c.abs(rel), atime, mtime) }); ok {
		return fi, err
	}
	if fi, ok := c.setDirHere(rel, func(fi *providers.FileInfo, o *providers.WriteOptions) {
		if !atime.IsZero() {
			fi.Atime, o.Atime = atime, atime
		}
		if !mtime.IsZero() {
			fi.Mtime, o.Mtime = mtime, mtime
		}
	}); ok {
		return fi, nil
	}
	fi, ok, err := c.setattrStat(ctx, rel, func(ss providers.SetattrStater) (providers.FileInfo, error) {
		return ss.UtimesStat(ctx, c.abs(rel), atime, mtime)
	})
	if !ok {
		fi, err = c.utimesRemote(ctx, rel, atime, mtime)
	}
	if f := c.localFile(rel); f != nil && err == nil {
		f.boxTimesChanged(fi.Mtime)
	}
	return fi, err
}

// utimesRemote sets rel's times in the box and records what it set
// without a round trip (afterSetattr).
func (c *Cache) utimesRemote(ctx context.Context, rel string, atime, mtime time.Time) (providers.FileInfo, error) {
	defer c.intend(rel)()
	if err := c.remote.Utimes(ctx, c.abs(rel), atime, mtime); err != nil {
		return providers.FileInfo{}, err
	}
	return c.afterSetattr(ctx, rel, func(fi *providers.FileInfo) {
		if !atime.IsZero() {
			fi.Atime = atime
		}
		if !mtime.IsZero() {
			fi.Mtime = mtime
		}
	})
}

// setattrStat runs op, a change of rel's attributes in the box that
// answers with the attributes it left (providers.SetattrStater), as a host
// change, and records them, change time and all, for rel and its other
// names: the watch's report of the change is then its echo (F-echo), where
// afterSetattr's guess of the change time never matches it. ok false: the
// remote cannot answer so (the caller changes and records it the old way).
func (c *Cache) setattrStat(ctx context.Context, rel string, op func(providers.SetattrStater) (providers.FileInfo, error)) (fi providers.FileInfo, ok bool, err error) {
	c.mu.Lock()
	ss := c.sas
	c.mu.Unlock()
	if ss == nil {
		return fi, false, nil
	}
	done := c.intend(rel)
	defer done()
	fi, err = op(ss)
	if providers.IsCode(err, providers.Unsupported) {
		c.mu.Lock()
		c.sas = nil
		c.mu.Unlock()
		return providers.FileInfo{}, false, nil
	}
	if err != nil {
		return fi, true, err
	}
	c.wroteHere(rel, c.localFile(rel), fi)
	return fi, true, nil
}

// Truncate sets rel's size. A file with cached content is truncated here and
// pushed at the next flush; any other file is truncated in the box at once.
func (c *Cache) Truncate(ctx context.Context, rel string, size int64) (providers.FileInfo, error) {
	fi, err := c.truncate(ctx, rel, size)
	return c.shownAfter(rel, fi, err)
}

func (c *Cache) truncate(ctx context.Context, rel string, size int64) (providers.FileInfo, error) {
	// A file the host holds (open, or with writes the box lacks) is cut
	// in its copy, which is what reaches the box: at the close of an open
	// that holds it (open(O_TRUNC)'s own truncate comes so, by name, after
	// the open), with its batch in write-behind, else now, in
	// write-through, as a close would push it (the opens that hold it
	// were all closed, their releases still on the way).
	if f := c.localFile(rel); f != nil && !f.direct() && (f.opens() > 0 || !f.existsInBox() || f.isDirty()) {
		if err := f.truncate(c, size); err != nil {
			return providers.FileInfo{}, err
		}
		if c.behind == nil && f.existsInBox() && f.unflushedOpens() == 0 {
			if err := f.push(ctx, c); err != nil {
				return providers.FileInfo{}, err
			}
		}
		if fi, ok := f.localAttr(); ok {
			return fi, nil
		}
		return c.Getattr(ctx, rel)
	}
	defer c.intend(rel)()
	if err := c.remote.Truncate(ctx, c.abs(rel), size); err != nil {
		return providers.FileInfo{}, err
	}
	fi, err := c.afterMutation(ctx, rel)
	if err == nil {
		c.mu.Lock()
		c.linksChangedLocked(rel, fi, true)
		c.mu.Unlock()
	}
	return fi, err
}

// localFile returns the content state of rel, if the cache has any.
func (c *Cache) localFile(rel string) *file {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.file(rel)
}

// Dirty returns the paths with writes not yet in the box.
func (c *Cache) Dirty() []string {
	var out []string
	for _, f := range c.dirtyFiles() {
		out = append(out, f.path())
	}
	sortStrings(out)
	return out
}

// PendingRemoves returns the names removed on the host whose removes the
// box has not answered yet (behindrm.go), sorted.
func (c *Cache) PendingRemoves() []string {
	c.mu.Lock()
	out := c.prms.Under("")
	c.mu.Unlock()
	sortStrings(out)
	return out
}

// PushErrors returns the last push error of each dirty file whose push
// failed, by path.
func (c *Cache) PushErrors() map[string]error {
	out := map[string]error{}
	for _, f := range c.dirtyFiles() {
		f.mu.Lock()
		if f.pushErr != nil {
			out[f.rel] = f.pushErr
		}
		f.mu.Unlock()
	}
	return out
}

// FlushAll pushes every dirty file (in batches where the remote takes
// them): the barrier. It tries them all and returns the first error; a
// file that fails stays dirty.
func (c *Cache) FlushAll(ctx context.Context) error {
	err := c.pushAll(ctx, c.dirtyFiles(), nil)
	c.mu.Lock()
	if err == nil {
		err = c.rmErr
	}
	c.rmErr = nil
	c.mu.Unlock()
	return err
}

// Recover pushes the dirty files a previous process journaled and did not
// push. Files that fail stay dirty, journaled, and are tried again at the
// next flush.
func (c *Cache) Recover(ctx context.Context) error {
	err := c.FlushAll(ctx)
	if err != nil {
		c.log.Warn("journaled writes not pushed yet", "err", err, "dirty", len(c.Dirty()))
	}
	return err
}

func (c *Cache) newID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	return c.nextID
}

func (c *Cache) dataPath(id uint64) string {
	return filepath.Join(c.dataDir, fmt.Sprintf("%d", id))
}
