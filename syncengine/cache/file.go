package cache

import (
	"context"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// file is the host-side state of one box file that was read or written:
// its content in a data file, what box version that content is, and whether
// it holds writes the box does not have yet.
type file struct {
	id uint64

	// content guards the data file's content: readers and writers share it,
	// a fetch, a push or a truncate holds it alone.
	content sync.RWMutex

	mu       sync.Mutex // guards the fields below
	rel      string
	data     *os.File // open while the file has opens or is dirty
	valid    bool     // data holds the box's content as of boxSize/boxMtime, or newer local writes
	boxSize  int64
	boxMtime time.Time
	dirty    bool
	gone     bool // unlinked or replaced: never pushed again
	inBox    bool // the path exists in the box (false only between a failed create and nothing)
	mode     fs.FileMode
	base     providers.FileInfo // the box's last attributes (owner, inode, links)
	atime    time.Time          // deferred times, applied with the next push
	mtime    time.Time
	force    bool // mode was set while dirty: the push sets it exactly
	chown    bool // the owner was set while dirty: the push sets uid, gid
	uid, gid int
	local    time.Time // when the host last changed the content
	size     int64     // local size while dirty
	nopen    int
	// flushedOpens counts the opens whose close has come and whose
	// release has not: the others will push the file when they close.
	flushedOpens int
	version      uint64 // bumped whenever data is refilled from the box
	kernel       uint64 // the version the kernel's page cache was last filled from
	pushErr      error
	journal      bool // the journal holds the file as dirty
	// created: the host made the file and the box has not had it yet
	// (inBox false), or had nothing under its name when the writes began;
	// excl: made with O_EXCL, so its push must not replace a file the box
	// made meanwhile.
	created, excl bool
	// alias is a second name the host gave the file while the box did not
	// have it (linkHere): the push makes it there after the file.
	alias string
	// started is the box file the dirty content started from, when known:
	// a recovery after a crash checks that the box did not change it since.
	started *providers.FileInfo
	// recovered: the journal of an earlier process left the file dirty;
	// its first push checks started first.
	recovered bool
	// charge is what the file's copy counts against the Budget (its mu).
	charge *charge
	// ndirect counts the opens using the box's own file (hostread.go,
	// hostwrite.go); writers are those of them open for writing.
	ndirect int
	writers []*direct
	// shownAtime, shownMtime and shownCtime are the times the host
	// reported of the file while it was dirty, and boxTimes what the box
	// answered to the push: while the box reports that same file
	// unchanged, the host keeps reporting its own times (see Cache.shown).
	shownAtime, shownMtime, shownCtime time.Time
	boxTimes                           providers.FileInfo
}

// Handle is one open of a work/ file.
type Handle struct {
	c       *Cache
	f       *file
	write   bool
	done    bool
	flushed bool    // its close came (f.mu)
	direct  *direct // a read-only open of a host box's own file (hostread.go)
	// stream is set for an open of a file the budget cannot hold
	// (stream.go), from the open or from the Renew that found it so.
	stream atomic.Pointer[stream]
}

// OpenFile opens rel for reading and/or writing with open(2) flags. Reading
// fetches the whole file into the cache unless the cached copy still matches
// the box (same size and nanosecond mtime); a write-only truncating open
// fetches nothing. keepCache tells the filesystem the kernel's page cache of
// the file is still right (FOPEN_KEEP_CACHE).
func (c *Cache) OpenFile(ctx context.Context, rel string, flags int) (h *Handle, keepCache bool, err error) {
	acc := flags & syscall.O_ACCMODE
	write := acc == syscall.O_WRONLY || acc == syscall.O_RDWR
	trunc := write && flags&syscall.O_TRUNC != 0

	f := c.openFileFor(rel)
	defer func() {
		if err != nil {
			f.release(c)
		}
	}()

	var h0 *Handle
	var ok bool
	var derr error
	if !write {
		h0, keepCache, ok, derr = c.openDirect(ctx, rel, f)
	} else {
		h0, keepCache, ok, derr = c.openDirectWrite(ctx, rel, f, flags)
	}
	if ok {
		return h0, keepCache, derr
	}
	if errno, _ := providers.ErrnoOf(derr); errno == syscall.ELOOP || providers.IsCode(derr, providers.NotFound) {
		// The name is a symbolic link now, or gone: so is it for a copy.
		return nil, false, derr
	}
	if f.direct() {
		// Its content is the box's file, which this open could not use
		// (it was replaced or removed meanwhile): a copy would not see
		// the other opens' writes.
		if derr == nil {
			derr = providers.PathError("cache.Open", "", rel, syscall.ESTALE)
		}
		return nil, false, derr
	}
	var streamed bool
	if trunc {
		if fi, ok := c.knownAttr(rel); ok && fi.IsRegular() {
			f.noteStart(fi)
		}
		if err := f.truncate(c, 0); err != nil {
			return nil, false, err
		}
	} else if streamed, err = f.ensure(ctx, c, write); err != nil {
		return nil, false, err
	}
	if streamed {
		return c.openStream(rel, f, write)
	}
	f.mu.Lock()
	keepCache = f.kernel == f.version
	f.kernel = f.version
	f.mu.Unlock()
	return &Handle{c: c, f: f, write: write}, keepCache, nil
}

// Create makes rel (exclusive or truncating, as O_CREAT|O_EXCL or
// O_CREAT|O_TRUNC) and opens it: on the host only when its directory's
// fresh listing says the name is free (the push at close makes it in the
// box), else in the box at once.
func (c *Cache) Create(ctx context.Context, rel string, flags int, perm fs.FileMode) (*Handle, providers.FileInfo, error) {
	excl := flags&syscall.O_EXCL != 0
	if h, fi, ok, err := c.createDirect(ctx, rel, flags, perm); ok {
		return h, fi, err
	}
	if h, fi, made, err := c.createHere(rel, excl, perm); made {
		return h, fi, err
	}
	// A remove of the name still queued goes first: the box must not
	// find the removed file there (O_EXCL), nor remove the new one.
	if err := c.settleRms(ctx, rel); err != nil {
		return nil, providers.FileInfo{}, err
	}
	defer c.intend(rel)()
	fi, err := c.sw.CreateStat(ctx, c.abs(rel), perm, excl)
	if err != nil {
		if providers.CodeOf(err) != providers.Exists {
			c.forget(rel) // what the box has there is not known now
		}
		return nil, providers.FileInfo{}, err
	}
	fi = c.made(rel, fi)
	f := c.fileFor(rel)
	f.content.Lock()
	f.mu.Lock()
	f.nopen++
	err = f.openDataLocked(c, true)
	if err == nil {
		f.valid, f.boxSize, f.boxMtime = true, fi.Size, fi.Mtime
		f.size, f.mode, f.inBox, f.base = fi.Size, fi.Mode&specialBits, true, fi
		f.version++
		f.kernel = f.version
	}
	f.mu.Unlock()
	f.content.Unlock()
	if err != nil {
		f.release(c)
		return nil, providers.FileInfo{}, err
	}
	return &Handle{c: c, f: f, write: true}, fi, nil
}

// fileFor returns rel's content state, making an empty one if it has none.
func (c *Cache) fileFor(rel string) *file {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.file(rel); f != nil {
		return f
	}
	c.nextID++
	f := &file{id: c.nextID, rel: rel, inBox: true}
	c.files.Set(rel, f)
	return f
}

// openFileFor returns the content state an open of rel uses, with the
// open counted: rel's own, or that of another name of the same box file
// (a hard link) whose copy is in use (open, or holding writes the box
// does not have). The kernel holds one inode for all the names of a file
// (fs/ino.go), so the writes through each name are of one file: with a
// copy per name, an O_APPEND write through the second name would land at
// the kernel's size in a copy that lacks the first name's writes, and the
// later push would undo the earlier one.
func (c *Cache) openFileFor(rel string) *file {
	c.mu.Lock()
	defer c.mu.Unlock()
	own := c.file(rel)
	if own != nil {
		own.mu.Lock()
		live := own.inUseLocked()
		if live {
			own.nopen++
		}
		own.mu.Unlock()
		if live {
			return own
		}
	}
	if fi, ok := c.knownAttrLocked(rel); ok && fi.IsRegular() {
		for _, o := range c.linkedLocked(rel, fi) {
			f := c.file(o)
			if f == nil {
				continue
			}
			f.mu.Lock()
			live := f.inUseLocked() && f.ndirect == 0
			if live {
				f.nopen++
			}
			f.mu.Unlock()
			if live {
				return f
			}
		}
	}
	if own == nil {
		c.nextID++
		own = &file{id: c.nextID, rel: rel, inBox: true}
		c.files.Set(rel, own)
	}
	own.mu.Lock()
	own.nopen++
	own.mu.Unlock()
	return own
}

// inUseLocked reports whether f's copy is open or holds writes the box
// does not have, and its name is still there. f.mu held.
func (f *file) inUseLocked() bool {
	return !f.gone && (f.nopen > 0 || f.dirty)
}

// noteStart records fi, the box file as the cache knows it, as where the
// writes about to begin (a truncating open) start from, unless the file is
// dirty already.
func (f *file) noteStart(fi providers.FileInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirty && !f.created {
		f.started = &fi
	}
}

// openDataLocked opens (and with trunc empties) the data file. f.mu held.
func (f *file) openDataLocked(c *Cache, trunc bool) error {
	if f.data != nil {
		if trunc {
			return f.data.Truncate(0)
		}
		return nil
	}
	flags := unix.O_RDWR | unix.O_CREAT | unix.O_CLOEXEC
	if trunc {
		flags |= unix.O_TRUNC
	}
	// Opened as a plain descriptor: os.OpenFile would try, and fail, to
	// add a regular file to the poller, a few syscalls per file made.
	p := c.dataPath(f.id)
	fd, err := unix.Open(p, flags, 0o600)
	if err != nil {
		return providers.E(providers.Unknown, "cache.data", &os.PathError{Op: "open", Path: p, Err: err})
	}
	f.data = os.NewFile(uintptr(fd), p)
	return nil
}

// ensure makes the data file hold the box's current content (or the host's
// newer writes), fetching it when the cached copy is missing or stale. It
// reports streamed, with nothing fetched, for a file the budget cannot
// hold (stream.go); for an open for writing (write), one larger than the
// whole budget.
func (f *file) ensure(ctx context.Context, c *Cache, write bool) (streamed bool, err error) {
	f.mu.Lock()
	if f.dirty {
		err := f.openDataLocked(c, false)
		f.mu.Unlock()
		return false, err
	}
	rel := f.rel
	f.mu.Unlock()

	// One stat (often answered by a fresh listing) says whether the cache
	// is still the box's content.
	fi, err := c.getattr(ctx, rel)
	if err != nil {
		return false, err
	}
	if !fi.IsRegular() {
		if fi.IsDir() {
			return false, providers.PathError("cache.Open", c.opts.Box, c.abs(rel), syscall.EISDIR)
		}
		return false, providers.PathError("cache.Open", c.opts.Box, c.abs(rel), syscall.EINVAL)
	}
	if fi.Size <= prefetchFileMax && !f.holds(fi) && c.coldFetch(rel) {
		c.prefetch(ctx, rel)
	}
	f.content.Lock()
	defer f.content.Unlock()
	f.mu.Lock()
	if f.holdsLocked(fi) {
		err := f.openDataLocked(c, false)
		if !f.dirty {
			f.mode, f.base = fi.Mode&specialBits, fi
		}
		f.mu.Unlock()
		c.used(f)
		return false, err
	}
	f.mu.Unlock()
	// The budget is charged before the bytes land (stream.go); a file it
	// cannot hold is not fetched, and a copy the opens hold stays.
	if !c.reserve(f, fi.Size, write) {
		return true, nil
	}
	f.mu.Lock()
	if err := f.openDataLocked(c, false); err != nil {
		f.mu.Unlock()
		return false, err
	}
	d := f.data
	f.valid = false // the data file is refilled now
	f.mu.Unlock()

	// Fetch into the data file. The content lock keeps readers and writers
	// out; f.mu is free for attribute calls meanwhile.
	n, err := fetch(ctx, c, rel, fi.Size, d, f, write)
	if err != nil {
		d.Truncate(0)
		c.uncharged(f)
		if err == errOverBudget {
			return true, nil
		}
		if providers.CodeOf(err) == providers.NotFound {
			// Gone since the stat: no later stat shows it still there
			// (F-mono).
			c.mu.Lock()
			c.boxChangedLocked(rel, c.now()) // as a report: a fetch in flight is older
			c.mu.Unlock()
		}
		return false, err
	}
	f.mu.Lock()
	f.valid, f.boxSize, f.boxMtime, f.size = true, n, fi.Mtime, n
	f.mode, f.base = fi.Mode&specialBits, fi
	f.version++
	f.mu.Unlock()
	c.charged(f, n)
	if n != fi.Size {
		// It changed while we read it; what we hold is newer than the stat,
		// and the next open stats again and sees the difference. The
		// attributes the cache holds are older than these bytes: they are
		// asked again too (F-mono: no stat after this read shows the
		// older size).
		f.mu.Lock()
		f.boxMtime = time.Time{}
		f.mu.Unlock()
		c.mu.Lock()
		c.boxChangedLocked(rel, c.now()) // as a report: a fetch in flight is older
		c.mu.Unlock()
	}
	return false, nil
}

// fetch copies the box's file rel, size bytes as the box last said, into
// d, f's data file, charging the budget for each byte before it lands: past
// what the budget can hold (alone: the whole budget) it stops with
// errOverBudget.
func fetch(ctx context.Context, c *Cache, rel string, size int64, d *os.File, f *file, alone bool) (int64, error) {
	var r io.ReadCloser
	var err error
	if sr, ok := c.remote.(providers.SizedReader); ok {
		r, err = sr.ReadFileSized(ctx, c.abs(rel), size)
	} else {
		r, err = c.remote.ReadFile(ctx, c.abs(rel))
	}
	if err != nil {
		return 0, err
	}
	defer r.Close()
	if err := d.Truncate(0); err != nil {
		return 0, providers.E(providers.Unknown, "cache.fetch", err)
	}
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return 0, providers.E(providers.Unknown, "cache.fetch", err)
	}
	n, err := io.Copy(&chargedWriter{c: c, f: f, w: d, room: size, alone: alone}, ctxReader{ctx, r})
	if err == errOverBudget {
		return 0, err
	}
	if err != nil {
		return 0, providers.E(0, "cache.fetch", err).WithPath(c.abs(rel))
	}
	return n, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// ReadAt is Read with no deadline of its own.
func (h *Handle) ReadAt(p []byte, off int64) (int, error) {
	return h.Read(context.Background(), p, off)
}

// Read reads the cached content, or, for a file the budget cannot hold,
// the box's (stream.go).
func (h *Handle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	if s := h.stream.Load(); s != nil {
		if n, ok, err := h.readStream(ctx, s, p, off); ok {
			return n, err
		}
	}
	f := h.f
	f.content.RLock()
	defer f.content.RUnlock()
	if h.direct != nil {
		if n, ok, err := h.readDirect(p, off); ok {
			return n, err
		}
	}
	f.mu.Lock()
	d := f.data
	f.mu.Unlock()
	if d == nil {
		return 0, providers.Errorf(providers.Gone, "cache.Read", "file handle is closed")
	}
	n, err := d.ReadAt(p, off)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// Renew makes an open file's content the box's again if the box's file
// changed since it was fetched (a command in the box appended to it), and
// reports whether it fetched it. A read that comes up short of what it
// asked calls it: tail -f keeps the file open, sees its size grow and reads
// at the old end, which the cached copy does not have. The attributes decide
// (fresh ones are trusted, else one stat); a file holding the host's writes,
// or unlinked, is the host's and is left alone.
func (h *Handle) Renew(ctx context.Context) (bool, error) {
	f := h.f
	if h.direct != nil && h.direct.write {
		return false, nil // the box's file itself: nothing to renew
	}
	if h.direct != nil {
		f.mu.Lock()
		// A file unlinked or replaced is read as it is: its name is
		// another file's now.
		reading := f.data == nil && !f.dirty && !f.gone && f.version == h.direct.version
		f.mu.Unlock()
		if reading {
			return h.renewDirect(ctx)
		}
	}
	if s := h.stream.Load(); s != nil {
		return s.renew(), nil
	}
	f.mu.Lock()
	skip := f.dirty || f.gone || f.data == nil
	v := f.version
	f.mu.Unlock()
	if skip {
		return false, nil
	}
	streamed, err := f.ensure(ctx, h.c, h.write)
	if err != nil {
		return false, err
	}
	if streamed && !h.write {
		// Grown past what the budget holds: the open reads the box's
		// file from now on.
		h.stream.Store(&stream{})
		return true, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version != v, nil
}

// WriteAt writes into the cached content and marks the file dirty; the box
// gets it at the next flush.
func (h *Handle) WriteAt(p []byte, off int64) (n int, err error) {
	if d := h.direct; d != nil {
		err = h.changeDirect(d, func(hf *os.File) error {
			n, err = hf.WriteAt(p, off)
			return err
		})
		if err != nil {
			return n, providers.E(providers.Unknown, "cache.Write", err)
		}
		return n, nil
	}
	f := h.f
	f.content.RLock()
	defer f.content.RUnlock()
	f.mu.Lock()
	d := f.data
	lost := !f.valid && !f.dirty
	f.mu.Unlock()
	if d == nil {
		return 0, providers.Errorf(providers.Gone, "cache.Write", "file handle is closed")
	}
	if lost {
		// A refetch failed, or stopped at the budget: what the copy
		// holds is not the file, and a write into it would push that.
		return 0, providers.PathError("cache.Write", h.c.opts.Box, h.c.abs(f.path()), syscall.ESTALE)
	}
	n, err = d.WriteAt(p, off)
	if err != nil {
		return n, providers.E(providers.Unknown, "cache.Write", err)
	}
	f.mu.Lock()
	if end := off + int64(n); end > f.size {
		f.size = end
	}
	f.local = h.c.now()
	f.markDirtyLocked(h.c)
	f.mu.Unlock()
	return n, nil
}

// Truncate sets the file's size through this handle.
func (h *Handle) Truncate(size int64) error {
	if d := h.direct; d != nil && d.write {
		err := h.changeDirect(d, func(hf *os.File) error { return hf.Truncate(size) })
		if err != nil {
			return providers.E(providers.Unknown, "cache.Truncate", err)
		}
		return nil
	}
	return h.f.truncate(h.c, size)
}

// Attr is the file's attributes as the host now sees them through this
// open: the host's own while it holds writes the box lacks, and, for an
// open of the box's own file, that file's (fstat), whatever its name
// holds by now, unlinked or not.
func (h *Handle) Attr() (providers.FileInfo, bool) {
	if d := h.direct; d != nil {
		if fi, err := d.stat(); err == nil {
			_, fi.Name = split(h.f.path())
			return fi, true // links 0 once unlinked, as fstat says
		}
	}
	return h.f.localAttr()
}

// Opened is the box file this open reads, as the open found it: Attr's
// answer when it has one, else the attributes its copy was fetched or
// checked with, with the copy's size. A stat of the name taken before the
// open may have found another file there (a symbolic link renamed over
// it, then a file again): these are the attributes of the file the copy
// holds. ok is false when the cache holds no copy (a streamed read).
func (h *Handle) Opened() (providers.FileInfo, bool) {
	if fi, ok := h.Attr(); ok {
		return fi, true
	}
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.valid || f.base.Mtime.IsZero() || !f.base.IsRegular() {
		return providers.FileInfo{}, false
	}
	fi := f.base
	_, fi.Name = split(f.rel)
	fi.Size = f.boxSize
	return fi, true
}

// Holds reports whether the file holds changes made through the mount
// that the box's other views of it must hear of at its close: writes not
// pushed yet, or writes made in the box's own file.
func (h *Handle) Holds() bool {
	if d := h.direct; d != nil && d.write {
		// The box's file, written here: while d is open it holds writes
		// until its name goes, with no fstat to ask (localAttr's answer).
		d.mu.Lock()
		open := d.f != nil
		d.mu.Unlock()
		if open {
			h.f.mu.Lock()
			defer h.f.mu.Unlock()
			return !h.f.gone
		}
	}
	_, ok := h.f.localAttr()
	return ok
}

// Flush pushes the file to the box if it holds writes the box lacks, and
// returns the push's error: this is what close(2) reports. A file already
// pushed (a dup'd descriptor's close) is not pushed again. In write-behind
// it queues the file for its batch and returns at once: its bytes are in
// the journal.
func (h *Handle) Flush(ctx context.Context) error {
	h.f.mu.Lock()
	if !h.flushed {
		h.flushed = true
		h.f.flushedOpens++
	}
	h.f.mu.Unlock()
	if d := h.direct; d != nil {
		if d.write {
			h.flushDirect(d) // each write is in the box already
		}
		return nil
	}
	if b := h.c.behind; b != nil {
		if h.f.isDirty() {
			b.closed(h.f)
		}
		return nil
	}
	return h.f.push(ctx, h.c)
}

// Fsync pushes like Flush and then asks the box to sync the file. In
// write-behind it is a barrier: every dirty file is pushed first.
func (h *Handle) Fsync(ctx context.Context) error {
	if d := h.direct; d != nil && d.write {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.f == nil {
			return providers.Errorf(providers.Gone, "cache.Fsync", "file handle is closed")
		}
		if err := d.f.Sync(); err != nil {
			return providers.E(providers.Unknown, "cache.Fsync", err)
		}
		return nil
	}
	push := func(ctx context.Context) error { return h.f.push(ctx, h.c) }
	if h.c.behind != nil {
		push = h.c.FlushAll
	}
	if err := push(ctx); err != nil {
		return err
	}
	h.f.mu.Lock()
	rel, gone := h.f.rel, h.f.gone
	h.f.mu.Unlock()
	if gone {
		return nil
	}
	return h.c.remote.Fsync(ctx, h.c.abs(rel))
}

// Release ends this open. A file that still holds writes after its last
// close (a shared mmap writes back after close) is pushed now; a failure
// keeps it dirty and journaled, to be pushed at the next flush or recover.
func (h *Handle) Release(ctx context.Context) {
	if h.done {
		return
	}
	h.done = true
	if h.direct != nil {
		h.c.dropDirect(h.f, h.direct)
	}
	h.f.mu.Lock()
	if h.flushed {
		h.f.flushedOpens--
	}
	h.f.mu.Unlock()
	h.f.release(h.c)
	if h.f.isDirty() && h.f.opens() == 0 && h.c.behind != nil {
		h.c.behind.closed(h.f)
	} else if h.f.isDirty() && h.f.opens() == 0 {
		if err := h.f.push(ctx, h.c); err != nil {
			h.c.log.Warn("push after last close failed; kept dirty", "path", h.f.path(), "err", err)
		}
	}
}

func (f *file) release(c *Cache) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nopen--
	if f.nopen == 0 && !f.dirty && f.data != nil {
		f.data.Close()
		f.data = nil
	}
	if f.nopen == 0 && f.gone {
		c.reap.remove(c.dataPath(f.id)) // its name went while it was open
	}
}

// unflushedOpens counts the opens whose close has not come: each pushes
// the file when it does.
func (f *file) unflushedOpens() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nopen - f.flushedOpens
}

func (f *file) opens() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nopen
}

func (f *file) path() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rel
}

func (f *file) setRel(rel string) {
	f.mu.Lock()
	f.rel = rel
	f.mu.Unlock()
}

func (f *file) isDirty() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dirty && !f.gone
}

func (f *file) existsInBox() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inBox
}

// setMode records a mode the box was given, special bits and all: the
// host's view of the file (localAttr) reports it while it is dirty, and
// a set-group-ID bit a write then drops must show in it to be dropped.
func (f *file) setMode(mode fs.FileMode) {
	f.mu.Lock()
	f.mode = mode & specialBits
	f.mu.Unlock()
}

// boxTimesChanged notes that the box file's mtime was set to mtime here: a
// cached copy still holds its content.
func (f *file) boxTimesChanged(mtime time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.valid && !f.dirty && !mtime.IsZero() {
		f.boxMtime = mtime
	}
}

// deferTimes keeps times for the next push to set, when one is pending.
func (f *file) deferTimes(c *Cache, atime, mtime time.Time) bool {
	return f.deferAttr(c, func() {
		if !atime.IsZero() {
			f.atime = atime
		}
		if !mtime.IsZero() {
			f.mtime = mtime
		}
	})
}

// deferMode keeps a chmod for the next push, when one is pending.
func (f *file) deferMode(c *Cache, mode fs.FileMode) bool {
	return f.deferAttr(c, func() {
		f.mode = mode & specialBits
		f.force = true
	})
}

// deferOwner keeps a chown for the next push, when one is pending.
func (f *file) deferOwner(c *Cache, uid, gid int) bool {
	return f.deferAttr(c, func() {
		if !f.chown {
			f.uid, f.gid = -1, -1
		}
		if uid >= 0 {
			f.uid = uid
		}
		if gid >= 0 {
			f.gid = gid
		}
		f.chown = true
	})
}

// deferAttr applies set to the attributes the next push gives the file,
// when the file has writes to push; else it reports false and the caller
// sets the attribute in the box itself. It waits for a push under way, so
// that a push never ends by dropping what was set while it ran.
func (f *file) deferAttr(c *Cache, set func()) bool {
	f.content.RLock()
	defer f.content.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirty || f.gone {
		return false
	}
	set()
	if f.journal {
		f.journalLocked(c)
	}
	return true
}

// localAttr returns the host's view of a file it holds writes for.
func (f *file) localAttr() (providers.FileInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.localAttrLocked()
}

func (f *file) localAttrLocked() (providers.FileInfo, bool) {
	if len(f.writers) > 0 {
		return f.directAttrLocked()
	}
	if !f.dirty || f.gone {
		return providers.FileInfo{}, false
	}
	fi := f.base
	_, fi.Name = split(f.rel)
	fi.Mode = f.mode
	fi.Size = f.size
	fi.Mtime, fi.Ctime = f.local, f.local
	if !f.mtime.IsZero() {
		fi.Mtime = f.mtime
	}
	if !f.atime.IsZero() {
		fi.Atime = f.atime
	} else {
		fi.Atime = fi.Mtime
	}
	if f.chown {
		if f.uid >= 0 {
			fi.UID = uint32(f.uid)
		}
		if f.gid >= 0 {
			fi.GID = uint32(f.gid)
		}
	}
	if fi.Nlink == 0 {
		fi.Nlink = 1
	}
	return fi, true
}

// shownLocked returns fi, the box's attributes of the file, with the
// times the host reported of it while it was dirty when fi is the file the
// push made with its content unchanged since (showTimes); ok says it was.
// f.mu held.
func (f *file) shownLocked(fi providers.FileInfo) (providers.FileInfo, bool) {
	return showTimes(fi, f.boxTimes, f.shownMtime, f.shownCtime, f.shownAtime)
}

// markDirtyLocked notes unpushed writes and journals them once. f.mu held.
func (f *file) markDirtyLocked(c *Cache) {
	if f.dirty || f.gone {
		return
	}
	f.dirty = true
	c.dirtied(f)
	if f.local.IsZero() {
		f.local = c.now()
	}
	if f.started == nil && !f.created && f.valid && !f.boxMtime.IsZero() {
		f.started = &providers.FileInfo{Size: f.boxSize, Mtime: f.boxMtime, Ino: f.base.Ino, Nlink: f.base.Nlink}
	}
	f.journalLocked(c)
}

func (f *file) truncate(c *Cache, size int64) error {
	f.content.Lock()
	defer f.content.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.openDataLocked(c, false); err != nil {
		return err
	}
	if !f.valid && size > 0 {
		// Keeping the first size bytes needs the content, which only an
		// open fetches; callers truncate through an open file or the box.
		return providers.Errorf(providers.Invalid, "cache.Truncate", "content of %s is not cached", f.rel)
	}
	if err := f.data.Truncate(size); err != nil {
		return providers.E(providers.Unknown, "cache.Truncate", err)
	}
	f.valid = true
	f.size = size
	f.local = c.now()
	f.markDirtyLocked(c)
	return nil
}

// writeInPlace writes src over the box file abs, which exists, then cuts
// it to src's length, sets o's attributes and returns the file's.
func (c *Cache) writeInPlace(ctx context.Context, abs string, src *os.File, o providers.WriteOptions) (providers.FileInfo, error) {
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, rerr := src.ReadAt(buf, off)
		if n > 0 {
			if _, err := c.remote.WriteAt(ctx, abs, buf[:n], off); err != nil {
				return providers.FileInfo{}, err
			}
			off += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return providers.FileInfo{}, providers.E(providers.Unknown, "cache.push", rerr)
		}
	}
	if err := c.remote.Truncate(ctx, abs, off); err != nil {
		return providers.FileInfo{}, err
	}
	return providers.SetAttrs(ctx, c.remote, abs, o)
}

// unlinked drops a file whose name went away: no push, no journal.
func (f *file) unlinked(c *Cache) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone = true
	f.dirty = false
	c.clean(f)
	c.uncharged(f)
	f.unjournalLocked(c)
	if f.nopen == 0 && f.data != nil {
		f.data.Close()
		f.data = nil
	}
	if f.nopen == 0 {
		c.reap.remove(c.dataPath(f.id))
	}
}

// Close closes the cache's data files and journal, and stops the
// write-behind pusher. Dirty files stay journaled.
func (c *Cache) Close() error {
	c.idle.stop()
	c.ahead.stop()
	defer c.reap.stop()
	if c.behind != nil {
		c.behind.close()
	}
	if c.rmsend != nil {
		c.rmsend.close()
	}
	if b := c.opts.Budget; b != nil {
		b.forgetCache(c)
	}
	defer c.jnl.close()
	defer c.shownd.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.files.Range(func(_ string, f *file) bool {
		f.mu.Lock()
		if f.data != nil {
			f.data.Close()
			f.data = nil
		}
		f.mu.Unlock()
		return true
	})
	return nil
}

// PushError returns the last push error of rel, if it is dirty because a
// push failed.
func (c *Cache) PushError(rel string) error {
	f := c.localFile(rel)
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pushErr
}

func sortInfos(s []providers.FileInfo) {
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
}

func sortStrings(s []string) { sort.Strings(s) }
