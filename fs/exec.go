package fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
)

// keepCmds is how many commands each box keeps under cmds/.
const keepCmds = 100

// Command statuses, as cmds/N/status shows them.
const (
	statusRunning = "running"
	statusKilled  = "killed"
	statusLost    = "lost"
)

// cmdTable is a box's commands: the running ones and the last keepCmds
// ended ones, their output kept in host files so a reader can follow it.
type cmdTable struct {
	b   *boxState
	dir string

	mu    sync.Mutex
	next  int
	cmds  map[int]*command
	order []int
}

// command is one command run through exec.
type command struct {
	n       int
	line    string
	started time.Time
	dir     string

	mu     sync.Mutex
	out    *os.File
	size   int64
	grow   chan struct{} // closed and replaced whenever output grows or the command ends
	status string
	proc   providers.Process
	killed bool
	ended  time.Time
}

func newCmdTable(b *boxState, dir string) *cmdTable {
	t := &cmdTable{b: b, dir: dir, next: 1, cmds: map[int]*command{}}
	t.load()
	return t
}

// load finds the commands an earlier run of boxfs kept: a command without
// its status file was running when that process ended, and is lost.
func (t *cmdTable) load() {
	ents, err := os.ReadDir(t.dir)
	if err != nil {
		return
	}
	seen := map[int]bool{}
	for _, e := range ents {
		base, _, _ := strings.Cut(e.Name(), ".")
		n, err := strconv.Atoi(base)
		if err == nil && n > 0 {
			seen[n] = true
		}
	}
	var ns []int
	for n := range seen {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	for _, n := range ns {
		line, _ := os.ReadFile(filepath.Join(t.dir, fmt.Sprintf("%d.cmd", n)))
		status, err := os.ReadFile(filepath.Join(t.dir, fmt.Sprintf("%d.status", n)))
		st := strings.TrimSpace(string(status))
		if err != nil || st == "" || st == statusRunning {
			st = statusLost
		}
		c := &command{n: n, line: strings.TrimSuffix(string(line), "\n"), dir: t.dir, status: st, grow: make(chan struct{})}
		if fi, err := os.Stat(c.outPath()); err == nil {
			c.size = fi.Size()
		}
		close(c.grow)
		t.cmds[n] = c
		t.order = append(t.order, n)
		if n >= t.next {
			t.next = n + 1
		}
	}
	t.trimLocked()
}

func (c *command) outPath() string { return filepath.Join(c.dir, fmt.Sprintf("%d.out", c.n)) }

// start runs line in the box: files written through work/ and not yet
// pushed go first, so the command sees them.
func (t *cmdTable) start(ctx context.Context, line string) (*command, error) {
	b := t.b
	h, c, err := b.parts(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.do(ctx, true, 0, c.FlushAll); err != nil {
		b.setErr(fmt.Errorf("dirty files not pushed before the command: %w", err))
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return nil, providers.E(providers.Unknown, "fs.exec", err)
	}
	t.mu.Lock()
	n := t.next
	t.next++
	t.mu.Unlock()
	cmd := &command{n: n, line: line, started: time.Now(), dir: t.dir, status: statusRunning, grow: make(chan struct{})}
	if err := os.WriteFile(filepath.Join(t.dir, fmt.Sprintf("%d.cmd", n)), []byte(line+"\n"), 0o600); err != nil {
		return nil, providers.E(providers.Unknown, "fs.exec", err)
	}
	out, err := os.OpenFile(cmd.outPath(), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, providers.E(providers.Unknown, "fs.exec", err)
	}
	cmd.out = out
	// The command outlives this request: it ends when it exits or is
	// killed, never because the writer went away.
	proc, err := h.Run(context.Background(), hands.Command{Line: line, Stdout: cmd, Stderr: cmd})
	if err != nil {
		out.Close()
		os.Remove(cmd.outPath())
		os.Remove(filepath.Join(t.dir, fmt.Sprintf("%d.cmd", n)))
		return nil, err
	}
	cmd.mu.Lock()
	cmd.proc = proc
	cmd.mu.Unlock()
	t.mu.Lock()
	t.cmds[n] = cmd
	t.order = append(t.order, n)
	t.trimLocked()
	t.mu.Unlock()
	b.fs.log.Info("command started", "box", b.name, "n", n, "cmd", line)
	go t.wait(cmd)
	return cmd, nil
}

// wait records how the command ended, then brings the box's changes into
// view before a reader sees the end of its output: a file opened after the
// command ended shows what the command wrote.
func (t *cmdTable) wait(cmd *command) {
	code, err := cmd.proc.Wait()
	cmd.mu.Lock()
	killed := cmd.killed
	cmd.mu.Unlock()
	var status string
	switch {
	case err == nil && killed:
		status = statusKilled
	case err == nil:
		status = fmt.Sprintf("exit %d", code)
	case killed || providers.CodeOf(err) == providers.Aborted:
		status = statusKilled
	default:
		status = statusLost
		t.b.setErr(fmt.Errorf("command %d lost: %w", cmd.n, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.b.fs.opts.OpTimeout)
	if rerr := t.b.refresh(ctx); rerr != nil {
		t.b.fs.log.Warn("listing after a command not refreshed", "box", t.b.name, "err", rerr)
	}
	cancel()
	os.WriteFile(filepath.Join(t.dir, fmt.Sprintf("%d.status", cmd.n)), []byte(status+"\n"), 0o600)
	cmd.mu.Lock()
	cmd.status = status
	cmd.ended = time.Now()
	cmd.out.Close()
	cmd.out = nil
	close(cmd.grow)
	cmd.mu.Unlock()
	t.b.fs.log.Info("command ended", "box", t.b.name, "n", cmd.n, "status", status)
}

// trimLocked keeps the last keepCmds commands (running ones always).
func (t *cmdTable) trimLocked() {
	for len(t.order) > keepCmds {
		n := t.order[0]
		c := t.cmds[n]
		if c != nil && c.running() {
			break
		}
		t.order = t.order[1:]
		delete(t.cmds, n)
		for _, ext := range []string{"cmd", "out", "status"} {
			os.Remove(filepath.Join(t.dir, fmt.Sprintf("%d.%s", n, ext)))
		}
	}
}

func (t *cmdTable) get(n int) *command {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cmds[n]
}

func (t *cmdTable) list() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]int(nil), t.order...)
}

func (t *cmdTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.order)
}

// last returns the newest command's number and status (0 if none).
func (t *cmdTable) last() (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.order) == 0 {
		return 0, ""
	}
	c := t.cmds[t.order[len(t.order)-1]]
	return c.n, c.statusText()
}

func (t *cmdTable) latest() *command {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.order) == 0 {
		return nil
	}
	return t.cmds[t.order[len(t.order)-1]]
}

// killAll kills every running command and waits for each to be confirmed.
func (t *cmdTable) killAll(ctx context.Context) error {
	t.mu.Lock()
	var run []*command
	for _, c := range t.cmds {
		if c.running() {
			run = append(run, c)
		}
	}
	t.mu.Unlock()
	var first error
	for _, c := range run {
		if err := c.kill(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// detach forgets nothing: commands keep running in the box and their
// waiters keep recording them.
func (t *cmdTable) detach() {}

func (c *command) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status == statusRunning
}

func (c *command) statusText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// kill ends the command's whole process group in the box.
func (c *command) kill(ctx context.Context) error {
	c.mu.Lock()
	if c.status != statusRunning || c.proc == nil {
		c.mu.Unlock()
		return nil
	}
	c.killed = true
	p := c.proc
	c.mu.Unlock()
	return p.Kill(ctx)
}

// Write appends output (stdout and stderr interleaved as they come).
func (c *command) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		return 0, os.ErrClosed
	}
	n, err := c.out.WriteAt(p, c.size)
	c.size += int64(n)
	if n > 0 {
		close(c.grow)
		c.grow = make(chan struct{})
	}
	return n, err
}

// readAt reads output at off, waiting for more while the command runs. It
// returns 0 bytes at the end of a finished command's output.
func (c *command) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	for {
		c.mu.Lock()
		size, grow, done := c.size, c.grow, c.status != statusRunning
		c.mu.Unlock()
		if off < size {
			f, err := os.Open(c.outPath())
			if err != nil {
				return 0, providers.E(providers.Unknown, "fs.exec.read", err)
			}
			want := p
			if int64(len(want)) > size-off {
				want = want[:size-off]
			}
			n, err := f.ReadAt(want, off)
			f.Close()
			if n > 0 {
				return n, nil
			}
			if err != nil {
				return 0, providers.E(providers.Unknown, "fs.exec.read", err)
			}
		}
		if done {
			return 0, nil
		}
		select {
		case <-grow:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// execFile is NAME/exec: a write of one line starts a command, a read on the
// same open follows its output to the end. A read on an open that started
// nothing follows the box's newest command.
type execFile struct {
	gofs.Inode
	b *boxState
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
	out.Mode = syscall.S_IFREG | 0o644
	out.Nlink = 1
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	return 0
}

func (e *execFile) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return e.Getattr(ctx, f, out)
}

func (e *execFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &execHandle{b: e.b}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NONSEEKABLE, 0
}

type execHandle struct {
	b   *boxState
	mu  sync.Mutex
	cmd *command
	off int64
}

var (
	_ gofs.FileReader    = (*execHandle)(nil)
	_ gofs.FileWriter    = (*execHandle)(nil)
	_ gofs.FileGetattrer = (*execHandle)(nil)
)

// Getattr on an open of exec (fstat(2)) reports, once a command line was
// written to it, that command's number as the file's size: how a program
// learns which cmds/N is its own without racing other writers.
func (h *execHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Nlink = 1
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	h.mu.Lock()
	if h.cmd != nil {
		out.Size = uint64(h.cmd.n)
	}
	h.mu.Unlock()
	return 0
}

func (h *execHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		err := providers.Errorf(providers.Refused, "exec", "this open already ran command %d; open exec again for another", h.cmd.n)
		h.b.setErr(err)
		return 0, syscall.EBUSY
	}
	line := strings.TrimSuffix(string(data), "\n")
	if strings.TrimSpace(line) == "" || strings.ContainsAny(line, "\n\x00") {
		err := providers.Errorf(providers.Invalid, "exec", "write exactly one command line")
		h.b.setErr(err)
		return 0, syscall.EINVAL
	}
	cmd, err := h.b.cmds.start(ctx, line)
	if err != nil {
		h.b.setErr(providers.E(0, "exec", err))
		return 0, toErrno(err)
	}
	h.cmd = cmd
	return uint32(len(data)), 0
}

func (h *execHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	if h.cmd == nil {
		h.cmd = h.b.cmds.latest()
	}
	cmd, pos := h.cmd, h.off
	h.mu.Unlock()
	if cmd == nil {
		return fuse.ReadResultData(nil), 0
	}
	n, err := cmd.readAt(ctx, dest, pos)
	if err != nil {
		return nil, toErrno(err)
	}
	h.mu.Lock()
	h.off += int64(n)
	h.mu.Unlock()
	return fuse.ReadResultData(dest[:n]), 0
}

// cmdsDir is NAME/cmds/: one directory per kept command, and `last`, a
// symlink to the newest.
type cmdsDir struct {
	gofs.Inode
	b *boxState
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
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	out.SetTimes(nil, &started, &started)
	return 0
}

func cmdIno(b *boxState, n int) uint64 {
	return boxDirIno(fmt.Sprintf("%s\x00cmd\x00%d", b.name, n))
}

func (d *cmdsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if name == "last" {
		n, _ := d.b.cmds.last()
		if n == 0 {
			return nil, syscall.ENOENT
		}
		out.Mode = syscall.S_IFLNK | 0o777
		out.SetEntryTimeout(uncached)
		out.SetAttrTimeout(uncached)
		return d.NewInode(ctx, &gofs.MemSymlink{Data: []byte(strconv.Itoa(n))}, gofs.StableAttr{Mode: syscall.S_IFLNK}), 0
	}
	n, err := strconv.Atoi(name)
	if err != nil || d.b.cmds.get(n) == nil {
		return nil, syscall.ENOENT
	}
	out.Mode = syscall.S_IFDIR | 0o755
	return d.NewInode(ctx, &cmdDir{b: d.b, n: n}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: cmdIno(d.b, n)}), 0
}

func (d *cmdsDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var ents []fuse.DirEntry
	ns := d.b.cmds.list()
	for _, n := range ns {
		ents = append(ents, fuse.DirEntry{Name: strconv.Itoa(n), Mode: syscall.S_IFDIR, Ino: cmdIno(d.b, n)})
	}
	if len(ns) > 0 {
		ents = append(ents, fuse.DirEntry{Name: "last", Mode: syscall.S_IFLNK})
	}
	return gofs.NewListDirStream(ents), 0
}

// cmdDir is cmds/N/: cmd, out, status, ctl.
type cmdDir struct {
	gofs.Inode
	b *boxState
	n int
}

var _ gofs.NodeOnAdder = (*cmdDir)(nil)

// Getattr gives cmds/N/ a directory's mode; its times are the mount's.
func (d *cmdDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	out.SetTimes(nil, &started, &started)
	return 0
}

func (d *cmdDir) OnAdd(ctx context.Context) {
	b, n := d.b, d.n
	get := func() (*command, error) {
		c := b.cmds.get(n)
		if c == nil {
			return nil, providers.Errorf(providers.NotFound, "cmds", "command %d is no longer kept", n)
		}
		return c, nil
	}
	add := func(name string, node gofs.InodeEmbedder) {
		d.AddChild(name, d.NewPersistentInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
	add("cmd", textFile(0o444, func(ctx context.Context) ([]byte, error) {
		c, err := get()
		if err != nil {
			return nil, err
		}
		return []byte(c.line + "\n"), nil
	}))
	add("status", textFile(0o444, func(ctx context.Context) ([]byte, error) {
		c, err := get()
		if err != nil {
			return nil, err
		}
		return []byte(c.statusText() + "\n"), nil
	}))
	add("ctl", &ctlFile{
		mode: 0o200,
		write: func(ctx context.Context, data []byte) error {
			c, err := get()
			if err != nil {
				return err
			}
			for _, line := range splitMessages(string(data)) {
				if line != "kill" {
					return providers.Errorf(providers.Invalid, "cmds ctl", "unknown verb %q (takes kill)", line)
				}
			}
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.fs.opts.OpTimeout)
			defer cancel()
			return c.kill(kctx)
		},
		onErr: b.setErr,
	})
	add("out", &outFile{get: get})
}

// outFile is cmds/N/out: the command's output, followed until it ends.
type outFile struct {
	gofs.Inode
	get func() (*command, error)
}

var (
	_ gofs.NodeOpener    = (*outFile)(nil)
	_ gofs.NodeGetattrer = (*outFile)(nil)
)

func (o *outFile) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
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
	return &outHandle{c: c}, fuse.FOPEN_DIRECT_IO, 0
}

type outHandle struct{ c *command }

var _ gofs.FileReader = (*outHandle)(nil)

func (h *outHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.c.readAt(ctx, dest, off)
	if err != nil {
		return nil, toErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}
