package fs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine"
)

// This file holds what the command (cmd/boxfs) needs of the namespace
// beyond Options, New, Mount and the direct-mode methods.

// ParseSpec reads the key=value words of a `new NAME k=v ...` message (and
// of a configured environment) exactly as the root ctl does: provider=,
// image=, lifetime=, cpus=, memory=, network=, ports=, workspace=, user=,
// isolation=, snapshot=, region=, gpu=, env.K=, label.K=. Unknown keys and
// malformed values are Invalid.
func ParseSpec(pairs []string) (provider string, spec providers.Spec, err error) {
	const op = "fs.ParseSpec"
	kvs := make([]kv, 0, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return "", spec, providers.Errorf(providers.Invalid, op, "%q is not key=value", p)
		}
		kvs = append(kvs, kv{k, v})
	}
	provider, spec, err = specOf(kvs)
	if err != nil {
		return "", spec, providers.E(providers.Invalid, op, err)
	}
	return provider, spec, nil
}

// CheckName reports whether name can name a box (Invalid if not).
func CheckName(name string) error {
	if err := checkName(name); err != nil {
		return providers.E(providers.Invalid, "fs.CheckName", err)
	}
	return nil
}

// RecoverJournals connects every recorded box whose cache holds writes an
// earlier process journaled and did not push (a daemon that was killed),
// and pushes them. It returns the number of boxes it found such writes for;
// files that could not be pushed stay journaled and dirty, and the error
// names their boxes.
func (f *FS) RecoverJournals(ctx context.Context) (int, error) {
	var errs []error
	found := 0
	for _, name := range f.Names() {
		b := f.lookupBox(name)
		if b == nil {
			continue
		}
		b.mu.Lock()
		rec := b.rec
		b.mu.Unlock()
		if rec.ID == "" {
			continue // declared, never made: nothing was written to it
		}
		jdir := filepath.Join(f.opts.StateDir, "cache", safeKey(rec.Provider+"-"+rec.ID), "journal")
		ents, err := os.ReadDir(jdir)
		if err != nil || len(ents) == 0 {
			continue
		}
		found++
		if err := b.connect(ctx); err != nil {
			b.setErr(fmt.Errorf("journaled writes from an earlier run not pushed: %w", err))
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		b.mu.Lock()
		c := b.cache
		b.mu.Unlock()
		if c == nil {
			continue
		}
		if d := c.Dirty(); len(d) > 0 {
			errs = append(errs, providers.Errorf(providers.Unknown, "fs.RecoverJournals", "%s: %d journaled files not pushed yet (kept; retried at the next flush)", name, len(d)).WithBox(name))
			continue
		}
		f.log.Info("journaled writes from an earlier run pushed", "box", name)
	}
	return found, errors.Join(errs...)
}

// Progress is told how many archive bytes a seed or pull has moved so far.
// It is called from the goroutine moving them, often: keep it cheap.
type Progress func(moved int64)

// SeedProgress is Seed, telling progress the bytes moved as they go.
func (f *FS) SeedProgress(ctx context.Context, name, dir string, opts syncengine.SeedOptions, progress Progress) (syncengine.Receipt, error) {
	b, err := f.box(name)
	if err != nil {
		return syncengine.Receipt{}, err
	}
	h, err := b.handsOnly(ctx)
	if err != nil {
		return syncengine.Receipt{}, err
	}
	return syncengine.Seed(ctx, counted(h, progress), dir, h.Facts().Workspace, opts)
}

// PullProgress is Pull, telling progress the bytes moved as they go. It
// keeps its mark where Pull does, so the two continue each other.
func (f *FS) PullProgress(ctx context.Context, name, dir string, opts syncengine.PullOptions, progress Progress) (syncengine.Receipt, error) {
	b, err := f.box(name)
	if err != nil {
		return syncengine.Receipt{}, err
	}
	h, err := b.handsOnly(ctx)
	if err != nil {
		return syncengine.Receipt{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return syncengine.Receipt{}, providers.E(providers.Invalid, "fs.Pull", err)
	}
	b.mu.Lock()
	rec := b.rec
	b.mu.Unlock()
	// The mark's name is Pull's (direct.go): provider, id and host dir.
	sum := sha256.Sum256([]byte(rec.Provider + "\x00" + rec.ID + "\x00" + abs))
	markFile := filepath.Join(f.opts.StateDir, "marks", hex.EncodeToString(sum[:12])+".json")
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
			f.log.Warn("pull mark not saved; the next pull moves everything again", "err", err)
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
