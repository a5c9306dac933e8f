package cache

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// A box says how large its files are, and sends what it likes: the host
// disk the copies take is bounded by the Budget whatever it does. A fetch
// charges the budget for a file's bytes before they land (reserve, at the
// size the box claims, then chargedWriter as more come), making room by
// removing the least recently used clean copies first. A file the budget
// cannot hold beside the copies that must stay (larger than the budget,
// or while the others are open or dirty) is not copied: its opens read
// the box's file itself, through ranged reads of at most streamWindow
// bytes, kept in memory one window per open (a stream). So the host
// writes at most the budget, and holds one window per open stream.
//
// Such a file is read as the box has it at each window's read. An open
// for writing copies a file that fits the budget by itself, even past the
// bound while the other copies are open or dirty (the host is to change
// it); one larger than the whole budget is refused with TooLarge (EFBIG)
// unless the open truncates (then the host's copy starts empty and is
// charged as it grows, as any file written through the mount). What the
// host writes, a file whose writes the box lacks, is never removed and
// always counts.

// streamWindow is the most one read of a streamed file asks of the box,
// and the memory an open stream holds.
const streamWindow = 1 << 20

// errOverBudget stops a fetch the budget cannot hold: the file is then
// streamed.
var errOverBudget = errors.New("cache: file larger than the cache budget")

// stream is an open's window on the box's file.
type stream struct {
	mu  sync.Mutex
	buf []byte // the box's bytes at off
	off int64
	eof bool // the file ended at off+len(buf) when read
	// local and version are the file's when buf was read: a host change
	// since drops the window (F-own).
	local   time.Time
	version uint64
}

// reserve charges f's copy with size bytes before they arrive, removing
// least recently used copies to make room. It reports false, with f's
// charge as it was, when the budget cannot hold them beside the copies
// that stay (dirty or open ones), or, alone, when they are more than the
// whole budget (a file opened for writing is the host's to change: it is
// copied when it fits the budget by itself).
func (c *Cache) reserve(f *file, size int64, alone bool) bool {
	b := c.opts.Budget
	if b == nil || b.max <= 0 {
		return true
	}
	if size > b.max {
		return false
	}
	b.mu.Lock()
	var old int64
	if f.charge != nil {
		old = f.charge.size
	}
	b.mu.Unlock()
	c.charged(f, size)
	b.mu.Lock()
	fits := alone || b.used <= b.max
	b.mu.Unlock()
	if !fits && old > 0 {
		c.charged(f, old)
	} else if !fits {
		c.uncharged(f)
	}
	return fits
}

// chargedWriter writes a fetch's bytes to f's data file once the budget
// holds them: room is what is reserved past what was written, grown by
// reserve as the box sends more than it said.
type chargedWriter struct {
	c       *Cache
	f       *file
	w       io.Writer
	written int64
	room    int64
	alone   bool // reserve's
}

func (w *chargedWriter) Write(p []byte) (int, error) {
	if need := w.written + int64(len(p)); need > w.room {
		grow := max(need, w.room+w.room/4, w.room+streamWindow)
		if b := w.c.opts.Budget; b != nil && b.max > 0 {
			grow = min(grow, b.max)
		}
		if grow < need || !w.c.reserve(w.f, grow, w.alone) {
			return 0, errOverBudget
		}
		w.room = grow
	}
	n, err := w.w.Write(p)
	w.written += int64(n)
	return n, err
}

// openStream opens rel, which ensure found the budget cannot hold, as a
// stream: for reading only.
func (c *Cache) openStream(rel string, f *file, write bool) (*Handle, bool, error) {
	if write {
		b := c.opts.Budget
		return nil, false, providers.Errorf(providers.TooLarge, "cache.Open",
			"%s does not fit the cache budget (%d bytes): it is read from the box as it is, and written only whole (an open that truncates)",
			rel, b.max).WithBox(c.opts.Box).WithPath(c.abs(rel))
	}
	c.log.Debug("cache: streaming a file the budget cannot hold", "path", rel)
	h := &Handle{c: c, f: f}
	h.stream.Store(&stream{})
	return h, false, nil
}

// Streamed reports whether the open reads the box's file as it is, with
// no copy on the host.
func (h *Handle) Streamed() bool { return h.stream.Load() != nil }

// readStream reads a streamed file at off. ok is false when the file holds
// the host's writes now (an open that truncated it): those are read from
// the copy.
func (h *Handle) readStream(ctx context.Context, s *stream, p []byte, off int64) (n int, ok bool, err error) {
	f := h.f
	f.mu.Lock()
	dirty, local, version, rel := f.dirty, f.local, f.version, f.rel
	f.mu.Unlock()
	if dirty {
		return 0, false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.local.Equal(local) || s.version != version {
		s.buf, s.eof = s.buf[:0], false
	}
	for n < len(p) {
		o := off + int64(n)
		if end := s.off + int64(len(s.buf)); o >= s.off && o < end {
			n += copy(p[n:], s.buf[o-s.off:])
			continue
		} else if o == end && s.eof {
			break
		}
		if cap(s.buf) == 0 {
			s.buf = make([]byte, streamWindow)
		}
		m, err := h.c.remote.ReadAt(ctx, h.c.abs(rel), s.buf[:cap(s.buf)], o)
		s.buf, s.off, s.eof = s.buf[:m], o, err == io.EOF
		s.local, s.version = local, version
		if err != nil && err != io.EOF {
			s.buf = s.buf[:0]
			return n, true, err
		}
		if m == 0 {
			break
		}
	}
	return n, true, nil
}

// renew drops the window: the next read asks the box (a file that grows,
// read at its end). It reports true: the read may find more.
func (s *stream) renew() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf, s.eof = s.buf[:0], false
	return true
}

// FetchSize is what an open of a file of size bytes may copy to the host:
// no more than the budget (a larger file is streamed), whatever size the
// box claims. Deadlines that grow with a transfer's size use it.
func (c *Cache) FetchSize(size int64) int64 {
	if b := c.opts.Budget; b != nil && b.max > 0 {
		return min(size, b.max)
	}
	return size
}
