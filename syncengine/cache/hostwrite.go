package cache

import (
	"context"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// A box whose files are the host's own (providers.HostWriter: a local box)
// is written without a copy in write-through, as go-fuse's loopback
// writes: an open for writing of a file the cache holds no copy of, and
// whose other opens are of the box's file too, writes the box's file
// itself. Nothing is pushed at close, since each write(2) is in the box
// when it returns (F-through holds at once, and a crash of the daemon
// loses no acknowledged write). A reader in the box sees the writes as
// they come, as on a disk, rather than the whole file at close. While
// such an open lasts, every other open of the file reads or writes the
// box's file too, so all see one content; the cache makes no copy of it.
//
// Each write is a host change of its own (intend): the state it leaves
// is recorded, so the watch's report of it is dropped as its echo
// (F-echo), and a fetch begun before it does not undo it (F-noundo).

// hostWriter returns the remote's HostWriter while direct writes are
// taken: write-through, and the remote has not said Unsupported.
func (c *Cache) hostWriter() providers.HostWriter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.behind != nil {
		return nil
	}
	return c.hw
}

// noHostWriter notes the remote said Unsupported.
func (c *Cache) noHostWriter() {
	c.mu.Lock()
	c.hw = nil
	c.mu.Unlock()
}

// directOKLocked reports whether an open of f, counted in f.nopen, may use
// the box's file: every other open of f does, the cache holds no writes
// of f, no open copy, and the box has the file. f.mu held.
func (f *file) directOKLocked() bool {
	return f.nopen == f.ndirect+1 && !f.dirty && f.data == nil && !f.created && !f.gone && f.inBox
}

// addDirectLocked counts d as an open of f using the box's file, and
// returns whether the kernel's page cache of f may be kept (FOPEN_KEEP_CACHE):
// f's first such open compares fi, the file as opened, with what the
// kernel was last given. A copy of f on disk stops being f's content.
// f.mu held.
func (f *file) addDirectLocked(d *direct, fi providers.FileInfo) (keepCache bool) {
	if f.ndirect == 0 && (f.boxSize != fi.Size || !f.boxMtime.Equal(fi.Mtime)) {
		f.boxSize, f.boxMtime = fi.Size, fi.Mtime
		f.version++
	}
	f.ndirect++
	f.valid = false
	if d.write {
		f.writers = append(f.writers, d)
	}
	d.version = f.version
	keepCache = f.kernel == f.version
	f.kernel = f.version
	return keepCache
}

// dropDirect ends d, an open of f using the box's file. A report of f
// held while it was written (holdLocked) and not judged by a host change
// since (the close's, flushDirect, ends before the release, and the
// watch's report of the writes may come between them) is judged when the
// last writer goes: what the writes left was recorded at the close. Under
// c.mu, so that no report is taken directly before an older held one is
// judged.
func (c *Cache) dropDirect(f *file, d *direct) {
	d.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	f.mu.Lock()
	f.ndirect--
	wrote := false
	for i, w := range f.writers {
		if w == d {
			f.writers = append(f.writers[:i], f.writers[i+1:]...)
			wrote = true
			break
		}
	}
	last, rel := wrote && len(f.writers) == 0 && !f.gone, f.rel
	f.mu.Unlock()
	if last && c.file(rel) == f {
		c.judgeHeldLocked(rel)
	}
}

// judgeHeldLocked judges the report held for rel when no host change of
// rel is in flight (one that is judges it at its end): the echo of the
// state the cache recorded, which makes what the report made stale fresh
// again, or news, which it stays. c.mu held.
func (c *Cache) judgeHeldLocked(rel string) {
	h, ok := c.fm.heldIdle(rel)
	if !ok {
		return
	}
	if c.echoStateLocked(h.ch, true) {
		a, _ := c.attrGet(rel)
		a.stale = false
		c.setAttrLocked(rel, a)
		c.fm.reports.Echoes++
		return
	}
	c.fm.reports.Taken++
}

// directAttrLocked is the file's attributes from an open writing the box's
// file: its size and times move with each write. An unlinked file has
// none here (its opens answer for it). f.mu held.
func (f *file) directAttrLocked() (providers.FileInfo, bool) {
	if f.gone {
		return providers.FileInfo{}, false
	}
	for _, d := range f.writers {
		if fi, err := d.stat(); err == nil {
			_, fi.Name = split(f.rel)
			return fi, true
		}
	}
	return providers.FileInfo{}, false
}

// createDirect makes rel in the box and opens it there, when the box's
// files are the host's. ok false: create through the cache.
func (c *Cache) createDirect(ctx context.Context, rel string, flags int, perm fs.FileMode) (h *Handle, fi providers.FileInfo, ok bool, err error) {
	hw := c.hostWriter()
	if hw == nil {
		return nil, fi, false, nil
	}
	f := c.fileFor(rel)
	f.mu.Lock()
	f.nopen++
	if !f.directOKLocked() {
		f.nopen--
		f.mu.Unlock()
		return nil, fi, false, nil
	}
	f.ndirect++ // held while the box is asked: another open goes direct too
	f.mu.Unlock()
	done := c.intend(rel)
	hf, fi, err := hw.OpenHostWrite(ctx, c.abs(rel), flags&(syscall.O_ACCMODE|syscall.O_EXCL|syscall.O_TRUNC)|syscall.O_CREAT, perm)
	if err == nil {
		fi = c.made(rel, fi)
	} else if providers.CodeOf(err) != providers.Exists {
		c.forget(rel) // what the box has there is not known now
	}
	done()
	f.mu.Lock()
	f.ndirect--
	if err != nil {
		f.mu.Unlock()
		f.release(c)
		if providers.IsCode(err, providers.Unsupported) {
			c.noHostWriter()
			return nil, fi, false, nil
		}
		return nil, fi, true, err
	}
	d := &direct{f: hf, fi: fi, write: true}
	f.mode, f.base, f.inBox = fi.Mode&specialBits, fi, true
	f.addDirectLocked(d, fi)
	f.kernel = f.version // a new file: nothing of it in the kernel's cache
	f.mu.Unlock()
	return &Handle{c: c, f: f, write: true, direct: d}, fi, true, nil
}

// openDirectWrite opens rel, whose open f counts already, for writing in
// the box's file when the box's files are the host's. ok false: open
// through the cache; err is then why the box's file could not be opened,
// if it was tried.
func (c *Cache) openDirectWrite(ctx context.Context, rel string, f *file, flags int) (h *Handle, keepCache, ok bool, err error) {
	hw := c.hostWriter()
	if hw == nil {
		return nil, false, false, nil
	}
	f.mu.Lock()
	if !f.directOKLocked() {
		f.mu.Unlock()
		return nil, false, false, nil
	}
	f.ndirect++
	f.mu.Unlock()
	trunc := flags&syscall.O_TRUNC != 0
	done := func() {}
	if trunc {
		done = c.intend(rel)
	}
	hf, fi, err := hw.OpenHostWrite(ctx, c.abs(rel), flags&(syscall.O_ACCMODE|syscall.O_TRUNC), 0)
	if err == nil && trunc {
		// Recorded as any host change; what the kernel holds of the
		// file is settled when the open is counted (addDirectLocked).
		c.wroteHere(rel, nil, fi)
	}
	done()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ndirect--
	if err != nil {
		if providers.IsCode(err, providers.Unsupported) {
			c.noHostWriter()
		}
		// Through the cache, whose push replaces the box's file where it
		// may not be written in place (a hard link to a file outside the
		// box), and answers the box's error where there is one.
		return nil, false, false, err
	}
	d := &direct{f: hf, fi: fi, write: true}
	f.mode, f.base = fi.Mode&specialBits, fi
	keepCache = f.addDirectLocked(d, fi)
	return &Handle{c: c, f: f, write: true, direct: d}, keepCache, true, nil
}

// wroteHere records fi, what a host change of the box's own file left of
// rel and its other names. f is rel's content state, if it has one: when
// rel names another file now, nothing is recorded (an unlinked file is
// written on, as on a disk, with no name to show it); while f has opens
// of the box's file, fi is also what the kernel's pages of it hold.
// c.mu not held.
func (c *Cache) wroteHere(rel string, f *file, fi providers.FileInfo) {
	_, fi.Name = split(rel)
	c.mu.Lock()
	defer c.mu.Unlock()
	if f != nil {
		if c.file(rel) != f {
			return
		}
		f.mu.Lock()
		if f.ndirect > 0 {
			f.boxSize, f.boxMtime = fi.Size, fi.Mtime
		}
		f.mu.Unlock()
	}
	c.touchLocked(rel)
	c.recordLocked(rel, fi, c.now())
	c.linksChangedLocked(rel, fi, true) // the file's other names show it too
}

// changeDirect runs op, a change of the box's file through d, as a host
// change of h's path, and records what it left.
func (h *Handle) changeDirect(d *direct, op func(*os.File) error) error {
	rel := h.f.path()
	done := h.c.intend(rel)
	defer done()
	d.mu.Lock()
	hf := d.f
	d.mu.Unlock()
	if hf == nil {
		return providers.Errorf(providers.Gone, "cache.Write", "file handle is closed")
	}
	if err := op(hf); err != nil {
		return err
	}
	if fi, err := d.stat(); err == nil {
		h.c.wroteHere(rel, h.f, fi)
	}
	return nil
}

// stat is the attributes of the file d has open.
func (d *direct) stat() (providers.FileInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return providers.FileInfo{}, os.ErrClosed
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.f.Fd()), &st); err != nil {
		return providers.FileInfo{}, err
	}
	// As the box's own stat says it (providers/local).
	return providers.FileInfo{
		Mode:  providers.FileModeFromUnix(uint32(st.Mode)),
		Size:  st.Size,
		Mtime: time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)),
		Atime: time.Unix(int64(st.Atim.Sec), int64(st.Atim.Nsec)),
		Ctime: time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)),
		Ino:   st.Ino,
		Nlink: uint32(st.Nlink),
		UID:   st.Uid,
		GID:   st.Gid,
		Dev:   uint64(st.Dev),
		Rdev:  uint64(st.Rdev),
	}, nil
}

// direct reports whether an open of f uses the box's own file: then the
// box's file is f's content, and a change by path goes to the box.
func (f *file) direct() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ndirect > 0
}

// setattrDirect runs op, a change of rel's attributes in the box (chmod,
// chown, utimes: tar's after each file's writes), as a host change, when
// the box's files are the host's, and records what it left with a stat
// of the box's file: a system call here, not a round trip, and exact, so
// the watch's report of the change is its echo. ok false: the box's files
// are elsewhere (the caller records the change without a round trip).
func (c *Cache) setattrDirect(ctx context.Context, rel string, op func() error) (fi providers.FileInfo, ok bool, err error) {
	if c.hostWriter() == nil {
		return fi, false, nil
	}
	done := c.intend(rel)
	defer done()
	if err := op(); err != nil {
		return fi, true, err
	}
	fi, err = c.remote.Lstat(ctx, c.abs(rel))
	if err != nil {
		c.forget(rel)
		return fi, true, err
	}
	_, fi.Name = split(rel)
	c.wroteHere(rel, c.localFile(rel), fi)
	return fi, true, nil
}

// HostFile is the descriptor of the box's own file this open uses, and
// that file's attributes; ok false when it uses the cache's copy. The
// descriptor stays open until Release. An open for writing answers with
// the fstat it was opened with (the kernel asks at once, at its create or
// open); an open for reading, whose attributes came from before its
// open, with a new one.
func (h *Handle) HostFile() (fd int, fi providers.FileInfo, ok bool) {
	d := h.direct
	if d == nil {
		return 0, fi, false
	}
	if !d.write {
		var err error
		if fi, err = d.stat(); err != nil {
			return 0, fi, false
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return 0, fi, false
	}
	if d.write {
		fi = d.fi
	}
	return int(d.f.Fd()), fi, true
}

// InPlace reports whether this open writes the box's own file in place:
// its writes change no name, so a close changes nothing of its directory.
func (h *Handle) InPlace() bool {
	return h.direct != nil && h.direct.write
}

// flushDirect records, at a close, what the writes through d left of the
// file: with FUSE passthrough the kernel writes the box's file itself, so
// this is where the host learns of them (F-own; the watch's report of
// them is then their echo).
func (h *Handle) flushDirect(d *direct) {
	fi, err := d.stat()
	if err != nil {
		return
	}
	rel := h.f.path()
	done := h.c.intend(rel)
	defer done()
	h.c.wroteHere(rel, h.f, fi)
}
