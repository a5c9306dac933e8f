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
	return &execHandle{v: e.v}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NONSEEKABLE, 0
}

type execHandle struct {
	v   *boxView
	mu  sync.Mutex
	cmd *boxes.Command
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
		out.Size = uint64(h.cmd.N())
	}
	h.mu.Unlock()
	return 0
}

func (h *execHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		err := providers.Errorf(providers.Refused, "exec", "this open already ran command %d; open exec again for another", h.cmd.N())
		h.v.b.SetErr(err)
		return 0, syscall.EBUSY
	}
	line := strings.TrimSuffix(string(data), "\n")
	if strings.TrimSpace(line) == "" || strings.ContainsAny(line, "\n\x00") {
		err := providers.Errorf(providers.Invalid, "exec", "write exactly one command line")
		h.v.b.SetErr(err)
		return 0, syscall.EINVAL
	}
	cmd, err := h.v.b.Commands().Start(ctx, line)
	if err != nil {
		h.v.b.SetErr(providers.E(0, "exec", err))
		return 0, toErrno(err)
	}
	h.cmd = cmd
	return uint32(len(data)), 0
}

func (h *execHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	if h.cmd == nil {
		h.cmd = h.v.b.Commands().Latest()
	}
	cmd, pos := h.cmd, h.off
	h.mu.Unlock()
	if cmd == nil {
		return fuse.ReadResultData(nil), 0
	}
	n, err := cmd.ReadAt(ctx, dest, pos)
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
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	out.SetTimes(nil, &started, &started)
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
		out.Mode = syscall.S_IFLNK | 0o777
		out.SetEntryTimeout(uncached)
		out.SetAttrTimeout(uncached)
		return d.NewInode(ctx, &gofs.MemSymlink{Data: []byte(strconv.Itoa(n))}, gofs.StableAttr{Mode: syscall.S_IFLNK}), 0
	}
	n, err := strconv.Atoi(name)
	if err != nil || d.v.b.Commands().Get(n) == nil {
		return nil, syscall.ENOENT
	}
	out.Mode = syscall.S_IFDIR | 0o755
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

// cmdDir is cmds/N/: cmd, out, status, ctl.
type cmdDir struct {
	gofs.Inode
	v *boxView
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
	add("cmd", textFile(0o444, func(ctx context.Context) ([]byte, error) {
		c, err := get()
		if err != nil {
			return nil, err
		}
		return []byte(c.Line() + "\n"), nil
	}))
	add("status", textFile(0o444, func(ctx context.Context) ([]byte, error) {
		c, err := get()
		if err != nil {
			return nil, err
		}
		return []byte(c.Status() + "\n"), nil
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
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.v.fs.m.Options().OpTimeout)
			defer cancel()
			return c.Kill(kctx)
		},
		onErr: b.SetErr,
	})
	add("out", &outFile{get: get})
}

// outFile is cmds/N/out: the command's output, followed until it ends.
type outFile struct {
	gofs.Inode
	get func() (*boxes.Command, error)
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
	return &outHandle{c: c.Output()}, fuse.FOPEN_DIRECT_IO, 0
}

type outHandle struct{ c *boxes.OutputReader }

var _ gofs.FileReader = (*outHandle)(nil)

func (h *outHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.c.ReadAt(ctx, dest, off)
	if err != nil {
		return nil, toErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}
