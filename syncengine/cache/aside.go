package cache

import (
	"io"
	"os"

	"github.com/boxfs/boxfs/providers"
)

// SetAside copies the host's content of rel, a file with writes the box
// has not taken, to dst (a new host file, 0600, outside the cache), and
// drops those writes: rel is neither dirty nor journaled, and the next
// lookup of it asks the box (a file the box never had is gone). It is the
// way out for a file whose push the box refuses, which FlushAll, and every
// barrier with it, would otherwise fail on for good. A file open on the
// host is refused: its writers would go on writing into the dropped copy.
func (c *Cache) SetAside(rel, dst string) error {
	const op = "cache.SetAside"
	f := c.localFile(rel)
	if f == nil {
		return providers.Errorf(providers.NotFound, op, "no writes of it are held on the host").WithPath(rel)
	}
	f.content.Lock()
	defer f.content.Unlock()
	f.mu.Lock()
	dirty, open, id := f.dirty && !f.gone, f.nopen+f.ndirect, f.id
	f.mu.Unlock()
	if !dirty {
		return providers.Errorf(providers.NotFound, op, "no writes of it are held on the host").WithPath(rel)
	}
	if open > 0 {
		return providers.Errorf(providers.Refused, op, "it is open on the host: close it first").WithPath(rel)
	}
	if err := copyOut(c.dataPath(id), dst); err != nil {
		return providers.E(providers.Unknown, op, err).WithPath(rel)
	}
	c.mu.Lock()
	if c.file(rel) == f {
		c.files.Delete(rel)
		c.news.Delete(rel)
	}
	c.mu.Unlock()
	c.Forget(rel)
	f.unlinked(c)
	return nil
}

// copyOut copies the file src to dst, which it makes (0600) and syncs.
func copyOut(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}
