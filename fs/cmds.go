package fs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
)

// execFile is NAME/exec: a write of one line starts a command, a read on the
// same open follows its output to the end. A read on an open that started
// nothing follows the box's newest command.
type execFile struct {
	gofs.Inode
	v *boxView
}

var (
	_ gofs.NodeOpener    = (*execFile)(nil)
	_ gofs.NodeGetattrer = (*execFile)(nil)
	_ gofs.NodeSetattrer = (*execFile)(nil)
)

func (e *execFile) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*execHandle); ok {
		return h.Getattr(ctx, out)
	}
	e.v.fs.own.fill(&out.Attr, syscall.S_IFREG, 0o600)
	out.Nlink = 1
	out.Blksize = maxMessage
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	return 0
}

func (e *execFile) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := controlSetattr(in); errno != 0 {
		return errno
	}
	return e.Getattr(ctx, f, out)
}

func (e *execFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	h := &execHandle{v: e.v, in: lineBuffer{op: "exec", what: "a command line", max: maxCommand + 1}}
	return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NONSEEKABLE, 0
}

// maxCommand is the longest command line: the box runs it as the one
// argument of `sh -c LINE`, and Linux's execve takes at most 128 KiB - 1
// bytes in one argument.
const maxCommand = 128<<10 - 1

type execHandle struct {
	v  *boxView
	mu sync.Mutex
	in lineBuffer // the command line, until its newline comes
	// started is made when this open's command line is taken, and closed
	// once it was acted on: then cmd is the command it started, or err
	// says why none (later reads and writes answer err).
	started chan struct{}
	cmd     *boxes.Command
	err     error
	off     int64
}

var (
	_ gofs.FileReader    = (*execHandle)(nil)
	_ gofs.FileWriter    = (*execHandle)(nil)
	_ gofs.FileGetattrer = (*execHandle)(nil)
	_ gofs.FileFlusher   = (*execHandle)(nil)
	_ gofs.FileReleaser  = (*execHandle)(nil)
)

// Getattr on an open of exec (fstat(2)) reports, once a command line was
// written to it, that command's number as the file's size: how a program
// learns which cmds/N is its own without racing other writers.
func (h *execHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	h.v.fs.own.fill(&out.Attr, syscall.S_IFREG, 0o600)
	out.Nlink = 1
	out.Blksize = maxMessage
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	h.mu.Lock()
	if h.cmd != nil {
		out.Size = uint64(h.cmd.N())
	}
	h.mu.Unlock()
	return 0
}

// Write gathers the command line, however the kernel split its write, and
// starts the command once its newline came (a line without one starts at
// the first read or at close). No lock is held while the command starts:
// a process the start forks closes its copies of open files, and a flush
// of this open must not wait behind it.
func (h *execHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	if h.started != nil {
		cmd, err := h.cmd, h.err
		h.mu.Unlock()
		if err != nil {
			return 0, toErrno(err)
		}
		what := "a command"
		if cmd != nil {
			what = fmt.Sprintf("command %d", cmd.N())
		}
		h.v.b.SetErr(providers.Errorf(providers.Refused, "exec", "this open already ran %s; open exec again for another", what))
		return 0, syscall.EBUSY
	}
	line, err := h.in.add(data)
	if err == nil && len(line) > 0 && len(h.in.buf) > 0 {
		err = providers.Errorf(providers.Invalid, "exec", "write exactly one command line")
	}
	if err == nil && len(line) == 0 {
		h.mu.Unlock()
		return uint32(len(data)), 0
	}
	h.started = make(chan struct{})
	h.mu.Unlock()
	if err != nil {
		return 0, h.done(nil, err)
	}
	if errno := h.start(ctx, line); errno != 0 {
		return 0, errno
	}
	return uint32(len(data)), 0
}

// start starts the command line (its newline optional) and records how.
func (h *execHandle) start(ctx context.Context, data []byte) syscall.Errno {
	line := strings.TrimSuffix(string(data), "\n")
	if strings.TrimSpace(line) == "" || strings.ContainsAny(line, "\n\x00") {
		return h.done(nil, providers.Errorf(providers.Invalid, "exec", "write exactly one command line"))
	}
	cmd, err := h.v.b.Commands().Start(ctx, line)
	if err != nil {
		return h.done(nil, providers.E(0, "exec", err))
	}
	return h.done(cmd, nil)
}

// done records what this open's command line came to, and err's text in
// the box's err file.
func (h *execHandle) done(cmd *boxes.Command, err error) syscall.Errno {
	h.mu.Lock()
	h.cmd, h.err = cmd, err
	close(h.started)
	h.mu.Unlock()
	if err != nil {
		h.v.b.SetErr(err)
	}
	return toErrno(err)
}

// startPending starts a command line written without its newline, if
// nothing was started yet, and returns whether it started. At a close,
// abandoned says whether the writer left the line unfinished: then it is
// dropped, not run.
func (h *execHandle) startPending(ctx context.Context, abandoned func(context.Context) string) syscall.Errno {
	h.mu.Lock()
	if h.started != nil {
		h.mu.Unlock()
		return 0
	}
	line := h.in.rest()
	if len(line) == 0 {
		h.mu.Unlock()
		return 0
	}
	h.started = make(chan struct{})
	h.mu.Unlock()
	if abandoned != nil {
		if why := abandoned(ctx); why != "" {
			h.mu.Lock()
			err := h.in.abandon(len(line), why)
			h.mu.Unlock()
			return h.done(nil, err)
		}
	}
	return h.start(ctx, line)
}

// Flush is close(2): a command line written without its newline starts
// here, and close answers whether it did; one whose writer was killed
// mid-line is dropped.
func (h *execHandle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	failed := h.in.failed
	h.mu.Unlock()
	if failed != nil {
		return toErrno(failed) // a line past the limit: close says so too
	}
	return h.startPending(ctx, abandoned)
}

// Release drops what no flush took: every close(2) and exit flushes
// first, so a line left here had no writer that closed it.
func (h *execHandle) Release(ctx context.Context) syscall.Errno {
	h.startPending(ctx, func(context.Context) string { return letGo })
	return 0
}

// Read follows the output of this open's command; on an open that wrote
// nothing, the box's newest command's; on one whose write failed, it
// answers that failure.
func (h *execHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := h.startPending(ctx, nil); errno != 0 {
		return nil, errno
	}
	h.mu.Lock()
	st := h.started
	h.mu.Unlock()
	if st != nil {
		select {
		case <-st:
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
	}
	h.mu.Lock()
	if h.err != nil {
		err := h.err
		h.mu.Unlock()
		return nil, toErrno(err)
	}
	if h.cmd == nil {
		h.cmd = h.v.b.Commands().Latest()
	}
	cmd, pos := h.cmd, h.off
	h.mu.Unlock()
	if cmd == nil {
		return fuse.ReadResultData(nil), 0
	}
	h.v.fs.unbounded(ctx) // waits for output while the command runs
	n, at, err := cmd.ReadAt(ctx, dest, pos)
	if err != nil {
		return nil, toErrno(err)
	}
	h.mu.Lock()
	h.off = at + int64(n) // past what the output cap cut, too
	h.mu.Unlock()
	return fuse.ReadResultData(dest[:n]), 0
}

// cmdsDir is NAME/cmds/: one directory per kept command, and `last`, a
// symlink to the newest.
type cmdsDir struct {
	fixedDir
	v *boxView
}

var (
	_ gofs.NodeLookuper  = (*cmdsDir)(nil)
	_ gofs.NodeReaddirer = (*cmdsDir)(nil)
	_ gofs.NodeGetattrer = (*cmdsDir)(nil)
	_ gofs.NodeGetattrer = (*cmdDir)(nil)
)

// Getattr gives cmds/ the mode and times of the box's other directories
// (without it, ls -l shows d--------- dated 1970, and a non-root user
// cannot list it).
func (d *cmdsDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.v.fs.dirAttr(&out.Attr)
	return 0
}

func cmdIno(b *boxes.Box, n int) uint64 {
	return boxDirIno(fmt.Sprintf("%s\x00cmd\x00%d", b.Name(), n))
}

func (d *cmdsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if name == "last" {
		n, _ := d.v.b.Commands().Last()
		if n == 0 {
			return nil, syscall.ENOENT
		}
		d.v.fs.own.fill(&out.Attr, syscall.S_IFLNK, 0o777)
		out.SetEntryTimeout(uncached)
		out.SetAttrTimeout(uncached)
		return d.NewInode(ctx, &gofs.MemSymlink{Data: []byte(strconv.Itoa(n))}, gofs.StableAttr{Mode: syscall.S_IFLNK}), 0
	}
	n, err := strconv.Atoi(name)
	if err != nil || d.v.b.Commands().Get(n) == nil {
		return nil, syscall.ENOENT
	}
	d.v.fs.dirAttr(&out.Attr)
	return d.NewInode(ctx, &cmdDir{v: d.v, n: n}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: cmdIno(d.v.b, n)}), 0
}

func (d *cmdsDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var ents []fuse.DirEntry
	ns := d.v.b.Commands().List()
	for _, n := range ns {
		ents = append(ents, fuse.DirEntry{Name: strconv.Itoa(n), Mode: syscall.S_IFDIR, Ino: cmdIno(d.v.b, n)})
	}
	if len(ns) > 0 {
		ents = append(ents, fuse.DirEntry{Name: "last", Mode: syscall.S_IFLNK})
	}
	return gofs.NewListDirStream(ents), 0
}

// cmdDir is cmds/N/: cmd, out, status, ctl, and cut (what the output
// cap dropped of out).
type cmdDir struct {
	fixedDir
	v *boxView
	n int
}

var _ gofs.NodeOnAdder = (*cmdDir)(nil)

// Getattr gives cmds/N/ a directory's mode; its times are the mount's.
func (d *cmdDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.v.fs.dirAttr(&out.Attr)
	return 0
}

func (d *cmdDir) OnAdd(ctx context.Context) {
	b, n := d.v.b, d.n
	get := func() (*boxes.Command, error) {
		c := b.Commands().Get(n)
		if c == nil {
			return nil, providers.Errorf(providers.NotFound, "cmds", "command %d is no longer kept", n)
		}
		return c, nil
	}
	add := func(name string, node gofs.InodeEmbedder) {
		d.AddChild(name, d.NewPersistentInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
	own := &d.v.fs.own
	add("cmd", textFile(own, func(ctx context.Context) ([]byte, error) {
		c, err := get()
		if err != nil {
			return nil, err
		}
		return []byte(c.Line() + "\n"), nil
	}))
	add("status", textFile(own, func(ctx context.Context) ([]byte, error) {
		c, err := get()
		if err != nil {
			return nil, err
		}
		return []byte(c.Status() + "\n"), nil
	}))
	add("ctl", &ctlFile{
		own:  own,
		mode: 0o600,
		read: func(ctx context.Context) ([]byte, error) {
			c, err := get()
			if err != nil {
				return nil, err
			}
			return []byte(c.Status() + "\n"), nil
		},
		write: func(ctx context.Context, data []byte) error {
			c, err := get()
			if err != nil {
				return err
			}
			for _, line := range splitMessages(string(data)) {
				if line != "kill" {
					return badMessage("cmds ctl", line, fmt.Errorf("unknown verb (takes kill)"))
				}
			}
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.v.fs.m.Options().OpTimeout)
			defer cancel()
			return c.Kill(kctx)
		},
		onErr: b.SetErr,
	})
	add("out", &outFile{fs: d.v.fs, own: own, get: get})
	add("cut", textFile(own, func(ctx context.Context) ([]byte, error) {
		c, err := get()
		if err != nil {
			return nil, err
		}
		return []byte(c.Cut()), nil
	}))
}

// outFile is cmds/N/out: the command's output, followed until it ends.
type outFile struct {
	gofs.Inode
	fs  *FS
	own *ownership
	get func() (*boxes.Command, error)
}

var (
	_ gofs.NodeOpener    = (*outFile)(nil)
	_ gofs.NodeGetattrer = (*outFile)(nil)
)

func (o *outFile) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	o.own.fill(&out.Attr, syscall.S_IFREG, 0o400)
	out.Nlink = 1
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	return 0
}

func (o *outFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if int(flags)&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	c, err := o.get()
	if err != nil {
		return nil, 0, toErrno(err)
	}
	return &outHandle{fs: o.fs, c: c.Output()}, fuse.FOPEN_DIRECT_IO, 0
}

// outHandle is one open of cmds/N/out. Where the output cap cut the
// output's head, a read skips to what is kept, and this open's later
// offsets are moved by as much: a reader going on from where the kernel
// says it is reads on, not the same bytes again.
type outHandle struct {
	fs    *FS
	c     *boxes.OutputReader
	mu    sync.Mutex
	shift int64 // added to the kernel's offsets
}

var _ gofs.FileReader = (*outHandle)(nil)

func (h *outHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.fs.unbounded(ctx) // waits for output while the command runs
	h.mu.Lock()
	shift := h.shift
	h.mu.Unlock()
	n, at, err := h.c.ReadAt(ctx, dest, off+shift)
	if err != nil {
		return nil, toErrno(err)
	}
	if at > off+shift {
		h.mu.Lock()
		h.shift = max(h.shift, at-off)
		h.mu.Unlock()
	}
	return fuse.ReadResultData(dest[:n]), 0
}
