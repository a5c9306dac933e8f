package cache

import (
	"context"
	"io"
	"os"
	"sync"

	"github.com/boxfs/boxfs/providers"
)

// A box whose files are the host's own (providers.HostReader: a local box)
// is read without a copy: a read-only open of a file the cache holds no
// copy of, and that nothing else has open, reads the box's file itself.
// When the cache comes to hold a copy meanwhile (another open fetched it,
// a writer changed it), reads go to the copy, as every other open's do,
// so that all opens of the file see one content. grep -r, an indexer or a
// build reading sources cost an open, not a copy of every file.

// direct is a read-only open reading the box's file itself.
type direct struct {
	mu      sync.Mutex
	f       *os.File
	fi      providers.FileInfo // the box file as it was opened
	version uint64             // the file's version then: a later one is the cache's copy
	write   bool               // opened for writing (hostwrite.go)
}

// hostReader returns the remote's HostReader while it serves reads.
func (c *Cache) hostReader() providers.HostReader {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hr
}

// openDirect opens rel for reading from the box's own file, when the
// cache holds no copy and f has no other open (f.nopen counts this one).
// ok false: read through the cache; err is then why the box's file could
// not be opened, if it was tried.
func (c *Cache) openDirect(ctx context.Context, rel string, f *file) (h *Handle, keepCache, ok bool, err error) {
	hr := c.hostReader()
	if hr == nil {
		return nil, false, false, nil
	}
	f.mu.Lock()
	// Alone, or beside opens of the box's file only (a writer's).
	alone := f.nopen == f.ndirect+1 && !f.dirty && (!f.valid || f.ndirect > 0) && f.data == nil
	f.mu.Unlock()
	if !alone {
		return nil, false, false, nil
	}
	fi, err := c.getattr(ctx, rel)
	if err != nil {
		return nil, false, false, err
	}
	if !fi.IsRegular() {
		return nil, false, false, nil
	}
	hf, err := hr.OpenHost(ctx, c.abs(rel))
	if providers.IsCode(err, providers.Unsupported) {
		c.mu.Lock()
		c.hr = nil
		c.mu.Unlock()
	}
	if err != nil {
		return nil, false, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nopen != f.ndirect+1 || f.dirty || f.data != nil {
		// A copy came meanwhile: read it, as every other open does.
		hf.Close()
		return nil, false, false, nil
	}
	d := &direct{f: hf, fi: fi}
	keepCache = f.addDirectLocked(d, fi)
	return &Handle{c: c, f: f, direct: d}, keepCache, true, nil
}

// readDirect reads through d while the cache holds no copy of the file;
// ok false: read the copy.
func (h *Handle) readDirect(p []byte, off int64) (n int, ok bool, err error) {
	d, f := h.direct, h.f
	f.mu.Lock()
	use := f.data == nil && !f.dirty && f.version == d.version
	f.mu.Unlock()
	if !use {
		return 0, false, nil
	}
	d.mu.Lock()
	hf := d.f
	d.mu.Unlock()
	n, err = hf.ReadAt(p, off)
	if err == io.EOF {
		err = nil
	}
	return n, true, err
}

// renewDirect opens the box's file again when what its name holds is no
// longer the file d reads (replaced by a rename): tail -f of a file the
// box rewrites. It reports whether it did.
func (h *Handle) renewDirect(ctx context.Context) (bool, error) {
	d := h.direct
	fi, err := h.c.getattr(ctx, h.f.path())
	if err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if fi.Ino == d.fi.Ino && fi.Dev == d.fi.Dev {
		return false, nil // the same file: appends show through the open
	}
	hf, err := h.c.hostReader().OpenHost(ctx, h.c.abs(h.f.path()))
	if err != nil {
		return false, err
	}
	d.f.Close()
	d.f, d.fi = hf, fi
	return true, nil
}

func (d *direct) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
}
