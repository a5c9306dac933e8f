package fs

import (
	"bytes"
	"context"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/providers"
)

// ctlFile is a control file: its content is rendered once per open (so reads
// at any offset see one snapshot) and a write is a message handled at once,
// its error the write's errno with the text kept for the err file. Control
// files use direct I/O: no page cache, sizes shown as 0.
type ctlFile struct {
	gofs.Inode
	own   *ownership
	mode  uint32                                       // the owner's bits
	read  func(ctx context.Context) ([]byte, error)    // nil: not readable
	write func(ctx context.Context, data []byte) error // nil: not writable
	onErr func(error)                                  // keeps the error's text
}

var (
	_ gofs.NodeOpener    = (*ctlFile)(nil)
	_ gofs.NodeGetattrer = (*ctlFile)(nil)
	_ gofs.NodeSetattrer = (*ctlFile)(nil)
)

var started = time.Now()

// uncached is the attribute and entry timeout of what changes without the
// kernel knowing (control files, box names): as good as none. Zero would be
// replaced by the mount's default.
const uncached = time.Nanosecond

func (c *ctlFile) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	c.own.fill(&out.Attr, syscall.S_IFREG, c.mode)
	out.Nlink = 1
	out.Blksize = maxMessage // stdio hands a whole message to one write(2)
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	return 0
}

// Setattr takes the size change of `echo msg > ctl` (O_TRUNC) and nothing else.
func (c *ctlFile) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := controlSetattr(in); errno != 0 {
		return errno
	}
	if _, ok := in.GetSize(); ok && c.write == nil {
		return syscall.EACCES
	}
	return c.Getattr(ctx, f, out)
}

// controlSetattr refuses a chmod or chown of a control file (EPERM): its
// mode and owner are the namespace's, and an answer of success would say
// a change was made that was not. The size change of an O_TRUNC open and
// times (touch) are taken and change nothing.
func controlSetattr(in *fuse.SetAttrIn) syscall.Errno {
	_, mode := in.GetMode()
	_, uid := in.GetUID()
	_, gid := in.GetGID()
	if mode || uid || gid {
		return syscall.EPERM
	}
	return 0
}

func (c *ctlFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	acc := int(flags) & syscall.O_ACCMODE
	if acc != syscall.O_RDONLY && c.write == nil {
		return nil, 0, syscall.EACCES
	}
	if acc != syscall.O_WRONLY && c.read == nil {
		return nil, 0, syscall.EACCES
	}
	h := &ctlHandle{c: c, in: lineBuffer{op: "ctl", what: "a message", max: maxMessage}}
	if acc != syscall.O_WRONLY {
		data, err := c.read(ctx)
		if err != nil {
			if c.onErr != nil {
				c.onErr(err)
			}
			return nil, 0, toErrno(err)
		}
		h.data = data
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

type ctlHandle struct {
	c    *ctlFile
	mu   sync.Mutex
	data []byte
	in   lineBuffer // what writes sent and no message has taken yet
}

var (
	_ gofs.FileReader   = (*ctlHandle)(nil)
	_ gofs.FileWriter   = (*ctlHandle)(nil)
	_ gofs.FileFlusher  = (*ctlHandle)(nil)
	_ gofs.FileReleaser = (*ctlHandle)(nil)
)

func (h *ctlHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := off + int64(len(dest))
	if end > int64(len(h.data)) {
		end = int64(len(h.data))
	}
	return fuse.ReadResultData(h.data[off:end]), 0
}

// Write takes the messages the bytes written so far complete: one write(2)
// can reach the daemon in several pieces (stdio writes in st_blksize
// pieces, the kernel splits direct I/O at max_write and at page
// boundaries), so a message is acted on once its newline came, and a
// last one without its newline at close, unless its writer was killed
// (see Flush). Blank lines and comments alone
// are nothing to do. No lock is held while messages
// run: a process they fork closes its copies of open files, and a flush
// of this open must not wait behind them.
func (h *ctlHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.c.write == nil {
		return 0, syscall.EACCES
	}
	h.mu.Lock()
	lines, err := h.in.add(data)
	h.mu.Unlock()
	if err == nil && len(splitMessages(string(lines))) > 0 {
		err = h.c.write(ctx, lines)
	}
	if err != nil {
		return 0, h.fail(err)
	}
	return uint32(len(data)), 0
}

// Flush is close(2): a last message written without its newline is acted
// on here, and its error is close's; but a fragment whose writer was
// killed mid-message (abandoned) is dropped, nothing of it done, and the
// open takes no more writes.
func (h *ctlHandle) Flush(ctx context.Context) syscall.Errno {
	return h.close(ctx, abandoned)
}

// Release drops what no flush took: every close(2) and exit flushes
// first, so what is left had no writer that closed it.
func (h *ctlHandle) Release(ctx context.Context) syscall.Errno {
	h.close(ctx, func(context.Context) string { return letGo })
	return 0
}

// letGo is how a writer that left a line to a release ended.
const letGo = "let the file go without closing it"

// close acts on the last message written without its newline, unless
// abandoned says its writer did not finish it.
func (h *ctlHandle) close(ctx context.Context, abandoned func(context.Context) string) syscall.Errno {
	if h.c.write == nil {
		return 0
	}
	h.mu.Lock()
	failed := h.in.failed
	rest := h.in.rest()
	h.mu.Unlock()
	if failed != nil {
		return toErrno(failed) // a writer that stopped at a short count hears it at close
	}
	if len(splitMessages(string(rest))) == 0 {
		return 0
	}
	if why := abandoned(ctx); why != "" {
		h.mu.Lock()
		err := h.in.abandon(len(rest), why)
		h.mu.Unlock()
		return h.fail(err)
	}
	if err := h.c.write(ctx, rest); err != nil {
		return h.fail(err)
	}
	return 0
}

// fail keeps err's text and answers its errno.
func (h *ctlHandle) fail(err error) syscall.Errno {
	if h.c.onErr != nil {
		h.c.onErr(err)
	}
	return toErrno(err)
}

// maxMessage is the longest control message, newline included: a longer
// one is refused whole (E2BIG), never acted on in part.
const maxMessage = 1 << 20

// lineBuffer gathers the bytes the writes of one open sent, in the order
// they came, until they make whole lines.
type lineBuffer struct {
	op, what string // the error's op, and what a line is, for its text
	max      int    // the longest line, newline included
	buf      []byte
	failed   error // a line was too long: this open takes no more
}

// add appends p and returns the whole lines the buffer now holds (up to
// and including the last newline), or an error (TooLarge, answered as
// E2BIG) once a line passes the limit; from then on every add fails, so
// no tail of the line runs as a message of its own.
func (l *lineBuffer) add(p []byte) ([]byte, error) {
	if l.failed != nil {
		return nil, l.failed
	}
	max := l.max
	l.buf = append(l.buf, p...)
	i := bytes.LastIndexByte(l.buf, '\n')
	var lines []byte
	if i >= 0 {
		lines = l.buf[:i+1]
		l.buf = append([]byte(nil), l.buf[i+1:]...)
	}
	long := len(l.buf) >= max // no room left for its newline
	for rest := lines; !long && len(rest) > 0; {
		j := bytes.IndexByte(rest, '\n')
		long = j+1 > max
		rest = rest[j+1:]
	}
	if long {
		l.buf = nil
		l.failed = providers.Errorf(providers.TooLarge, l.op, "%s longer than %d bytes (newline included) is refused whole; nothing of it was done (%w)", l.what, max, syscall.E2BIG)
		return nil, l.failed
	}
	return lines, nil
}

// abandon fails the open for an unfinished last line of n bytes (already
// taken by rest) that its writer left as why says: nothing of it is done,
// and from then on every add fails, so no tail written through another
// copy of the open runs as a line of its own.
func (l *lineBuffer) abandon(n int, why string) error {
	l.buf = nil
	l.failed = providers.Errorf(providers.Aborted, l.op, "%s without its newline (%d bytes) was dropped at close: its writer %s; nothing of it was done (end a line with a newline)", l.what, n, why)
	return l.failed
}

// rest returns the bytes of an unfinished last line, and forgets them.
func (l *lineBuffer) rest() []byte {
	r := l.buf
	l.buf = nil
	return r
}

// textFile is a read-only control file with fixed rendering, 0400.
func textFile(own *ownership, read func(ctx context.Context) ([]byte, error)) *ctlFile {
	return &ctlFile{own: own, mode: 0o400, read: read}
}
