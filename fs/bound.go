package fs

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// DefaultRequestBound is how long the kernel waits for the answer to one
// request of the namespace when MountOptions leave it zero: the longest
// bound the namespace documents for one request (a root ctl `new`, 5
// minutes), far past the box's own operation and liveness bounds, so it
// only catches a request those did not end.
const DefaultRequestBound = 5 * time.Minute

// DefaultDumpEvery is the shortest time between two goroutine dumps
// written to the log for requests that passed their bound.
const DefaultDumpEvery = time.Minute

// bounded is the raw file system the kernel talks to: the namespace's own
// (go-fuse's node bridge) with a deadline on every request. A request that
// passes its bound is answered ETIMEDOUT at once, and the daemon's
// goroutines go to the log (at most once per dumpEvery, so a storm of stuck
// requests cannot flood it); the work behind it goes on, on a goroutine of
// its own, and is tidied when it ends (a node or file handle the kernel
// never learned of is forgotten or released).
//
// The work gets private copies of everything the request's buffers hold,
// since go-fuse reuses those once the answer is written: the input and
// output structs, the data of a write, the buffer of a read or a listing.
// What it answers in time is copied back.
//
// A write or a flush that passes its bound answers ETIMEDOUT, never
// success: the caller learns that its bytes may not have landed. A flush
// or fsync of a handle with such a write still running waits for it first
// (within its own bound), so close(2) cannot report success over a write
// that has not ended; a release of such a handle is held until the
// handle's work ends.
type bounded struct {
	fuse.RawFileSystem // Init, Forget, xattrs, ioctl and the rest: passed on
	bound              time.Duration
	dumpEvery          time.Duration
	log                *slog.Logger

	mu       sync.Mutex
	reqs     map[<-chan struct{}]*request // by the cancel channel the work gets
	lastDump time.Time
	handles  map[uint64]*handleWork // handles with work past its bound, by Fh
}

// request is one request being answered.
type request struct {
	op      string
	bound   time.Duration // 0: none
	changed chan struct{} // bound changed
	done    chan struct{} // closed when its work ends
}

// handleWork is what runs past its bound on one file handle.
type handleWork struct {
	running map[chan struct{}]bool // the done channels of that work
	release func()                 // a release held until it all ended
}

func newBounded(inner fuse.RawFileSystem, bound, dumpEvery time.Duration, log *slog.Logger) *bounded {
	if bound <= 0 {
		bound = DefaultRequestBound
	}
	if dumpEvery <= 0 {
		dumpEvery = DefaultDumpEvery
	}
	return &bounded{RawFileSystem: inner, bound: bound, dumpEvery: dumpEvery, log: log,
		reqs: map[<-chan struct{}]*request{}, handles: map[uint64]*handleWork{}}
}

// setBound gives the request ctx stands for the bound d (0: none) from
// now on. ctx must be the one the node's method was given (its Done
// channel names the request); anything else is ignored, as is a nil b.
func (b *bounded) setBound(ctx interface{ Done() <-chan struct{} }, d time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	r := b.reqs[ctx.Done()]
	if r != nil {
		r.bound = d
	}
	b.mu.Unlock()
	if r != nil {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

// extend gives the request ctx stands for extra time past the mount's
// bound, for work documented to take that much longer.
func (b *bounded) extend(ctx interface{ Done() <-chan struct{} }, extra time.Duration) {
	if b != nil {
		b.setBound(ctx, b.bound+extra)
	}
}

// run does work on a goroutine of its own and waits for it within the
// request's bound. It reports work's status and true if work ended in
// time, or ETIMEDOUT and false; then late, if not nil, runs once work has
// ended, with its status. A kernel interrupt of the request reaches work
// while the request is answered. fh, when not 0, is the file handle work
// uses: a flush, fsync or release of it waits for work that passed its
// bound.
func (b *bounded) run(op string, hp *fuse.InHeader, fh uint64, kcancel <-chan struct{}, work func(cancel <-chan struct{}) fuse.Status, late func(fuse.Status)) (fuse.Status, bool) {
	h := *hp // the request's buffer is reused once it is answered
	cancel := make(chan struct{})
	done := make(chan struct{})
	r := &request{op: op, bound: b.bound, changed: make(chan struct{}, 1), done: done}
	b.mu.Lock()
	b.reqs[cancel] = r
	b.mu.Unlock()

	var st fuse.Status
	var answered bool // under b.mu: the kernel was told ETIMEDOUT
	go func() {
		st = work(cancel)
		b.mu.Lock()
		delete(b.reqs, cancel)
		timedOut := answered
		b.mu.Unlock()
		close(done)
		if timedOut {
			if late != nil {
				late(st)
			}
			b.log.Warn("request past its bound ended", "op", op, "node", h.NodeId, "status", st)
			b.handleDone(fh, done)
		}
	}()

	start := time.Now()
	timer := time.NewTimer(b.bound)
	defer timer.Stop()
	for {
		select {
		case <-done:
			return st, true
		case <-kcancel:
			close(cancel)
			kcancel = nil
		case <-r.changed:
			b.mu.Lock()
			d := r.bound
			b.mu.Unlock()
			timer.Stop()
			if d > 0 {
				timer.Reset(max(d-time.Since(start), 0))
			}
		case <-timer.C:
			b.mu.Lock()
			select {
			case <-done:
				b.mu.Unlock()
				return st, true
			default:
			}
			answered = true
			if fh != 0 {
				b.handleBusyLocked(fh, done)
			}
			b.mu.Unlock()
			b.timedOut(r, &h, time.Since(start))
			return fuse.Status(syscall.ETIMEDOUT), false
		}
	}
}

// timedOut logs a request that passed its bound, with the daemon's
// goroutines unless they were written less than dumpEvery ago.
func (b *bounded) timedOut(r *request, h *fuse.InHeader, waited time.Duration) {
	attrs := []any{"op", r.op, "node", h.NodeId, "pid", h.Pid, "uid", h.Uid, "waited", waited.Round(time.Millisecond)}
	b.mu.Lock()
	now := time.Now()
	dump := b.lastDump.IsZero() || now.Sub(b.lastDump) >= b.dumpEvery
	if dump {
		b.lastDump = now
	}
	last := b.lastDump
	b.mu.Unlock()
	if !dump {
		b.log.Error("request passed its bound: answered ETIMEDOUT; its work goes on", append(attrs, "goroutines", "written at "+last.Format(time.RFC3339))...)
		return
	}
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	b.log.Error("request passed its bound: answered ETIMEDOUT; its work goes on", append(attrs, "goroutines", buf.String())...)
}

// handleBusyLocked notes work past its bound on fh, done when it ends.
func (b *bounded) handleBusyLocked(fh uint64, done chan struct{}) {
	w := b.handles[fh]
	if w == nil {
		w = &handleWork{running: map[chan struct{}]bool{}}
		b.handles[fh] = w
	}
	w.running[done] = true
}

// handleDone notes that work on fh past its bound ended, and does a
// release held for it once none is left.
func (b *bounded) handleDone(fh uint64, done chan struct{}) {
	if fh == 0 {
		return
	}
	b.mu.Lock()
	w := b.handles[fh]
	var release func()
	if w != nil {
		delete(w.running, done)
		if len(w.running) == 0 {
			delete(b.handles, fh)
			release = w.release
		}
	}
	b.mu.Unlock()
	if release != nil {
		release()
	}
}

// settle waits for the work past its bound on fh, other than the
// request's own (cancel names it), to end.
func (b *bounded) settle(fh uint64, cancel <-chan struct{}) {
	b.mu.Lock()
	var self chan struct{}
	if r := b.reqs[cancel]; r != nil {
		self = r.done
	}
	var wait []chan struct{}
	if w := b.handles[fh]; w != nil {
		for d := range w.running {
			if d != self {
				wait = append(wait, d)
			}
		}
	}
	b.mu.Unlock()
	for _, d := range wait {
		<-d
	}
}

// holdRelease keeps release for when work past its bound on fh ends, and
// reports whether it did (else the caller releases now).
func (b *bounded) holdRelease(fh uint64, release func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.handles[fh]
	if w == nil {
		return false
	}
	w.release = release
	return true
}

// forget gives back the kernel reference a late success took for a node
// the kernel was never told of.
func (b *bounded) forget(st fuse.Status, out *fuse.EntryOut) {
	if st.Ok() && out.NodeId != 0 {
		b.RawFileSystem.Forget(out.NodeId, 1)
	}
}

func (b *bounded) Lookup(kc <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	hc, o := *h, *out
	st, ok := b.run("LOOKUP", h, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Lookup(c, &hc, name, &o) },
		func(st fuse.Status) { b.forget(st, &o) })
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) GetAttr(kc <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("GETATTR", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.GetAttr(c, &ic, &o) }, nil)
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) SetAttr(kc <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("SETATTR", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.SetAttr(c, &ic, &o) }, nil)
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) Mknod(kc <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("MKNOD", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Mknod(c, &ic, name, &o) },
		func(st fuse.Status) { b.forget(st, &o) })
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) Mkdir(kc <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("MKDIR", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Mkdir(c, &ic, name, &o) },
		func(st fuse.Status) { b.forget(st, &o) })
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) Unlink(kc <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	hc := *h
	st, _ := b.run("UNLINK", h, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Unlink(c, &hc, name) }, nil)
	return st
}

func (b *bounded) Rmdir(kc <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	hc := *h
	st, _ := b.run("RMDIR", h, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Rmdir(c, &hc, name) }, nil)
	return st
}

func (b *bounded) Rename(kc <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	ic := *in
	st, _ := b.run("RENAME", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Rename(c, &ic, oldName, newName) }, nil)
	return st
}

func (b *bounded) Link(kc <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("LINK", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Link(c, &ic, name, &o) },
		func(st fuse.Status) { b.forget(st, &o) })
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) Symlink(kc <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	hc, o := *h, *out
	st, ok := b.run("SYMLINK", h, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Symlink(c, &hc, target, name, &o) },
		func(st fuse.Status) { b.forget(st, &o) })
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) Readlink(kc <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	hc := *h
	var target []byte
	st, _ := b.run("READLINK", h, 0, kc, func(c <-chan struct{}) fuse.Status {
		var st fuse.Status
		target, st = b.RawFileSystem.Readlink(c, &hc)
		return st
	}, nil)
	if !st.Ok() {
		return nil, st
	}
	return target, st
}

func (b *bounded) Access(kc <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	ic := *in
	st, _ := b.run("ACCESS", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Access(c, &ic) }, nil)
	return st
}

// create is Create and Tmpfile: a late success gives back the node and
// releases the handle the kernel never learned of.
func (b *bounded) create(op string, in *fuse.CreateIn, out *fuse.CreateOut, do func(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status, kc <-chan struct{}) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run(op, &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return do(c, &ic, &o) },
		func(st fuse.Status) {
			if !st.Ok() {
				return
			}
			if o.Fh != 0 || o.NodeId != 0 {
				rel := fuse.ReleaseIn{InHeader: ic.InHeader, Fh: o.Fh, Flags: ic.Flags}
				rel.NodeId = o.NodeId
				b.RawFileSystem.Release(nil, &rel)
			}
			b.forget(st, &o.EntryOut)
		})
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) Create(kc <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return b.create("CREATE", in, out, func(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
		return b.RawFileSystem.Create(c, in, name, out)
	}, kc)
}

func (b *bounded) Tmpfile(kc <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return b.create("TMPFILE", in, out, b.RawFileSystem.Tmpfile, kc)
}

func (b *bounded) Open(kc <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("OPEN", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Open(c, &ic, &o) },
		func(st fuse.Status) {
			if st.Ok() {
				b.RawFileSystem.Release(nil, &fuse.ReleaseIn{InHeader: ic.InHeader, Fh: o.Fh, Flags: ic.Flags})
			}
		})
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) OpenDir(kc <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("OPENDIR", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.OpenDir(c, &ic, &o) },
		func(st fuse.Status) {
			if st.Ok() {
				b.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: ic.InHeader, Fh: o.Fh, Flags: ic.Flags})
			}
		})
	if ok {
		*out = o
	}
	return st
}

// readBufs keeps read buffers of the largest read (MaxWrite, 1 MiB) for
// reuse: a read's work gets a private one.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// pooled is a read's answer in a private buffer, given back once the
// answer is sent.
type pooled struct {
	fuse.ReadResult
	buf *[]byte
}

func (p pooled) Done() {
	p.ReadResult.Done()
	readBufs.Put(p.buf)
}

func (b *bounded) Read(kc <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	ic := *in
	var priv *[]byte
	if len(buf) <= 1<<20 {
		priv = readBufs.Get().(*[]byte)
	} else {
		p := make([]byte, len(buf))
		priv = &p
	}
	var res fuse.ReadResult
	st, ok := b.run("READ", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status {
		var st fuse.Status
		res, st = b.RawFileSystem.Read(c, &ic, (*priv)[:len(buf)])
		return st
	}, func(fuse.Status) {
		if res != nil {
			res.Done()
		}
	})
	if !ok {
		return nil, st // the late work keeps priv; the collector takes it
	}
	if res == nil {
		readBufs.Put(priv)
		return nil, st
	}
	if !st.Ok() {
		res.Done()
		readBufs.Put(priv)
		return nil, st
	}
	return pooled{res, priv}, st
}

func (b *bounded) Lseek(kc <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("LSEEK", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Lseek(c, &ic, &o) }, nil)
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) GetLk(kc <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("GETLK", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.GetLk(c, &ic, &o) }, nil)
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) SetLk(kc <-chan struct{}, in *fuse.LkIn) fuse.Status {
	ic := *in
	st, _ := b.run("SETLK", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.SetLk(c, &ic) }, nil)
	return st
}

// SetLkw waits for a lock as long as its holder keeps it, as on a local
// disk: it is passed on unbounded (the kernel keeps host locks itself; a
// file system that implements none answers at once).
func (b *bounded) SetLkw(kc <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return b.RawFileSystem.SetLkw(kc, in)
}

// Release is answered at once when work on the handle passed its bound
// (the kernel ignores a release's answer); the handle is released when
// that work ends.
func (b *bounded) Release(kc <-chan struct{}, in *fuse.ReleaseIn) {
	ic := *in
	release := func() { b.RawFileSystem.Release(nil, &ic) }
	if b.holdRelease(in.Fh, release) {
		return
	}
	b.run("RELEASE", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status {
		b.RawFileSystem.Release(c, &ic)
		return fuse.OK
	}, nil)
}

func (b *bounded) ReleaseDir(in *fuse.ReleaseIn) {
	ic := *in
	release := func() { b.RawFileSystem.ReleaseDir(&ic) }
	if b.holdRelease(in.Fh, release) {
		return
	}
	b.run("RELEASEDIR", &in.InHeader, in.Fh, nil, func(<-chan struct{}) fuse.Status {
		b.RawFileSystem.ReleaseDir(&ic)
		return fuse.OK
	}, nil)
}

func (b *bounded) Write(kc <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	ic := *in
	priv := bytes.Clone(data)
	var n uint32
	st, ok := b.run("WRITE", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status {
		var st fuse.Status
		n, st = b.RawFileSystem.Write(c, &ic, priv)
		return st
	}, nil)
	if !ok {
		return 0, st
	}
	return n, st
}

func (b *bounded) Writev(kc <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	return b.Write(kc, in, bytes.Join(data, nil))
}

func (b *bounded) CopyFileRange(kc <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	ic := *in
	var n uint32
	st, ok := b.run("COPY_FILE_RANGE", &in.InHeader, in.FhOut, kc, func(c <-chan struct{}) fuse.Status {
		var st fuse.Status
		n, st = b.RawFileSystem.CopyFileRange(c, &ic)
		return st
	}, nil)
	if !ok {
		return 0, st
	}
	return n, st
}

func (b *bounded) Flush(kc <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	ic := *in
	st, _ := b.run("FLUSH", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status {
		b.settle(ic.Fh, c)
		return b.RawFileSystem.Flush(c, &ic)
	}, nil)
	return st
}

func (b *bounded) Fsync(kc <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	ic := *in
	st, _ := b.run("FSYNC", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status {
		b.settle(ic.Fh, c)
		return b.RawFileSystem.Fsync(c, &ic)
	}, nil)
	return st
}

func (b *bounded) Fallocate(kc <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	ic := *in
	st, _ := b.run("FALLOCATE", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Fallocate(c, &ic) }, nil)
	return st
}

func (b *bounded) ReadDir(kc <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return b.readDir("READDIR", kc, in, out, false)
}

func (b *bounded) ReadDirPlus(kc <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return b.readDir("READDIRPLUS", kc, in, out, true)
}

// readDir lists into a private buffer of the kernel's size, and copies
// what fit into the kernel's list when it ends in time. Entries of a late
// READDIRPLUS give back the nodes they took.
func (b *bounded) readDir(op string, kc <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	ic := *in
	priv := make([]byte, in.Size)
	l := fuse.NewDirEntryList(priv, out.Offset)
	st, ok := b.run(op, &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status {
		if plus {
			return b.RawFileSystem.ReadDirPlus(c, &ic, l)
		}
		return b.RawFileSystem.ReadDir(c, &ic, l)
	}, func(st fuse.Status) {
		if !plus {
			return
		}
		_, outs, _ := fuse.ParseDirLookupEntries(priv[:direntsLen(priv, plus)])
		for i := range outs {
			b.forget(fuse.OK, &outs[i])
		}
	})
	if !ok {
		return st
	}
	used := priv[:direntsLen(priv, plus)]
	if plus {
		ents, outs, err := fuse.ParseDirLookupEntries(used)
		if err != nil {
			return fuse.EIO
		}
		for i, e := range ents {
			eo := out.AddDirLookupEntry(e)
			if eo == nil {
				break
			}
			*eo = outs[i]
		}
	} else {
		ents, err := fuse.ParseDirEntries(used)
		if err != nil {
			return fuse.EIO
		}
		for _, e := range ents {
			if !out.AddDirEntry(e) {
				break
			}
		}
	}
	return st
}

// The layout of a listing's entries (fuse_dirent): ino, off, namelen,
// type, then the name padded to 8 bytes; a READDIRPLUS entry is preceded
// by its fuse_entry_out.
const (
	direntHeader   = 24
	direntNameLen  = 16
	entryOutLength = 128
)

// direntsLen is how many bytes of buf (zeroed past them) the entries a
// list added take: an entry's name is never empty, so a zero length ends
// them.
func direntsLen(buf []byte, plus bool) int {
	n := 0
	for {
		d := n
		if plus {
			d += entryOutLength
		}
		if d+direntHeader > len(buf) {
			return n
		}
		nameLen := int(binary.NativeEndian.Uint32(buf[d+direntNameLen:]))
		if nameLen == 0 {
			return n
		}
		end := (d + direntHeader + nameLen + 7) &^ 7
		if end > len(buf) {
			return n
		}
		n = end
	}
}

func (b *bounded) FsyncDir(kc <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	ic := *in
	st, _ := b.run("FSYNCDIR", &in.InHeader, in.Fh, kc, func(c <-chan struct{}) fuse.Status {
		b.settle(ic.Fh, c)
		return b.RawFileSystem.FsyncDir(c, &ic)
	}, nil)
	return st
}

func (b *bounded) StatFs(kc <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	hc, o := *h, *out
	st, ok := b.run("STATFS", h, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.StatFs(c, &hc, &o) }, nil)
	if ok {
		*out = o
	}
	return st
}

func (b *bounded) Statx(kc <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	ic, o := *in, *out
	st, ok := b.run("STATX", &in.InHeader, 0, kc, func(c <-chan struct{}) fuse.Status { return b.RawFileSystem.Statx(c, &ic, &o) }, nil)
	if ok {
		*out = o
	}
	return st
}
