package boxes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine"
)

// The methods in this file move whole trees between the host and a box in
// one archive each way, without a box's cache.

// Progress is told how many archive bytes a seed or pull has moved so far.
// It is called from the goroutine moving them, often: keep it cheap.
type Progress func(moved int64)

// Seed copies the host directory dir into the box's workspace in one tar.
func (m *Manager) Seed(ctx context.Context, name, dir string, opts syncengine.SeedOptions) (syncengine.Receipt, error) {
	return m.SeedProgress(ctx, name, dir, opts, nil)
}

// Pull brings the box's workspace into the host directory dir:
// incrementally since the last pull into the same directory (its mark is
// kept in the state directory), in one tar.
func (m *Manager) Pull(ctx context.Context, name, dir string, opts syncengine.PullOptions) (syncengine.Receipt, error) {
	return m.PullProgress(ctx, name, dir, opts, nil)
}

// SeedProgress is Seed, telling progress the bytes moved as they go.
func (m *Manager) SeedProgress(ctx context.Context, name, dir string, opts syncengine.SeedOptions, progress Progress) (syncengine.Receipt, error) {
	_, h, err := m.hands(ctx, name)
	if err != nil {
		return syncengine.Receipt{}, err
	}
	return syncengine.Seed(ctx, counted(h, progress), dir, h.Facts().Workspace, opts)
}

// PullProgress is Pull, telling progress the bytes moved as they go. It
// keeps its mark where Pull does, so the two continue each other.
func (m *Manager) PullProgress(ctx context.Context, name, dir string, opts syncengine.PullOptions, progress Progress) (syncengine.Receipt, error) {
	b, h, err := m.hands(ctx, name)
	if err != nil {
		return syncengine.Receipt{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return syncengine.Receipt{}, providers.E(providers.Invalid, "boxes.Pull", err)
	}
	rec := b.record()
	// A mark is named by the box's provider and id and the host dir.
	sum := sha256.Sum256([]byte(rec.Provider + "\x00" + rec.ID + "\x00" + abs))
	markFile := filepath.Join(m.opts.StateDir, "marks", hex.EncodeToString(sum[:12])+".json")
	var since *syncengine.Mark
	if m, err := syncengine.LoadMark(markFile); err == nil {
		since = &m
	}
	rc, mark, err := syncengine.Pull(ctx, counted(h, progress), h.Facts().Workspace, abs, since, opts)
	if err != nil {
		return rc, err
	}
	if err := os.MkdirAll(filepath.Dir(markFile), 0o700); err == nil {
		if err := mark.Save(markFile); err != nil {
			m.log.Warn("pull mark not saved; the next pull moves everything again", "err", err)
		}
	}
	return rc, nil
}

// counted wraps a box's I/O so that the archives it moves are counted.
func counted(box syncengine.BoxIO, progress Progress) syncengine.BoxIO {
	if progress == nil {
		return box
	}
	c := &countingIO{BoxIO: box, progress: progress}
	if m, ok := box.(syncengine.MultiArchiver); ok {
		return &countingMulti{countingIO: c, multi: m}
	}
	return c
}

type countingIO struct {
	syncengine.BoxIO
	progress Progress
	n        atomic.Int64
}

func (c *countingIO) add(n int) {
	if n > 0 {
		c.progress(c.n.Add(int64(n)))
	}
}

func (c *countingIO) PutArchive(ctx context.Context, dir string, tar io.Reader) error {
	return c.BoxIO.PutArchive(ctx, dir, &countReader{r: tar, c: c})
}

func (c *countingIO) GetArchive(ctx context.Context, path string) (io.ReadCloser, error) {
	rc, err := c.BoxIO.GetArchive(ctx, path)
	if err != nil {
		return nil, err
	}
	return &countReadCloser{countReader{r: rc, c: c}, rc}, nil
}

type countingMulti struct {
	*countingIO
	multi syncengine.MultiArchiver
}

func (c *countingMulti) GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	rc, err := c.multi.GetFiles(ctx, root, paths)
	if err != nil {
		return nil, err
	}
	return &countReadCloser{countReader{r: rc, c: c.countingIO}, rc}, nil
}

type countReader struct {
	r io.Reader
	c *countingIO
}

func (r *countReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.c.add(n)
	return n, err
}

type countReadCloser struct {
	countReader
	io.Closer
}
