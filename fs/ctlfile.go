package fs

import (
	"context"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ctlFile is a control file: its content is rendered once per open (so reads
// at any offset see one snapshot) and a write is a message handled at once,
// its error the write's errno with the text kept for the err file. Control
// files use direct I/O: no page cache, sizes shown as 0.
type ctlFile struct {
	gofs.Inode
	mode  uint32
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
	out.Mode = syscall.S_IFREG | c.mode
	out.Nlink = 1
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	return 0
}

// Setattr takes the size change of `echo msg > ctl` (O_TRUNC) and nothing else.
func (c *ctlFile) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok && c.write == nil {
		return syscall.EACCES
	}
	return c.Getattr(ctx, f, out)
}

func (c *ctlFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	acc := int(flags) & syscall.O_ACCMODE
	if acc != syscall.O_RDONLY && c.write == nil {
		return nil, 0, syscall.EACCES
	}
	if acc != syscall.O_WRONLY && c.read == nil {
		return nil, 0, syscall.EACCES
	}
	h := &ctlHandle{c: c}
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
}

var (
	_ gofs.FileReader = (*ctlHandle)(nil)
	_ gofs.FileWriter = (*ctlHandle)(nil)
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

func (h *ctlHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.c.write == nil {
		return 0, syscall.EACCES
	}
	if err := h.c.write(ctx, data); err != nil {
		if h.c.onErr != nil {
			h.c.onErr(err)
		}
		return 0, toErrno(err)
	}
	return uint32(len(data)), 0
}

// textFile is a read-only control file with fixed rendering.
func textFile(mode uint32, read func(ctx context.Context) ([]byte, error)) *ctlFile {
	return &ctlFile{mode: mode, read: read}
}
