package boxes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// Bounds of the command output kept on the host, whether or not anyone
// reads it: a box's commands cannot fill the host's disk.
const (
	// DefaultOutputCap is how much of one command's output is kept: its
	// last bytes.
	DefaultOutputCap = 64 << 20
	// DefaultBoxOutputCap is how much output of a box's commands is kept
	// in all; the oldest commands' output goes first.
	DefaultBoxOutputCap = 512 << 20
)

func (m *Manager) outputCaps() (perCmd, perBox int64) {
	perCmd, perBox = m.opts.OutputCap, m.opts.BoxOutputCap
	if perCmd <= 0 {
		perCmd = DefaultOutputCap
	}
	if perBox <= 0 {
		perBox = DefaultBoxOutputCap
	}
	return perCmd, perBox
}

func (c *Command) cutPath() string { return filepath.Join(c.dir, fmt.Sprintf("%d.cut", c.n)) }

// loadOutput finds the size of a kept command's output and where what is
// kept of it starts.
func (c *Command) loadOutput() {
	if fi, err := os.Stat(c.outPath()); err == nil {
		c.size = fi.Size()
	}
	if b, err := os.ReadFile(c.cutPath()); err == nil {
		kind, off, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		n, err := strconv.ParseInt(off, 10, 64)
		switch {
		case err != nil || n < 0:
		case kind == "tail":
			c.start = min(n, c.size)
		case kind == "head":
			c.full, c.size = true, min(n, c.size)
		}
	}
	c.t.kept.Add(c.size - c.start)
}

// forgetOutput takes a command no longer kept out of the box's total.
func (c *Command) forgetOutput() {
	c.mu.Lock()
	c.t.kept.Add(-(c.size - c.start))
	c.start = c.size
	c.mu.Unlock()
}

// output is a command's stdout and stderr, kept interleaved as they come.
type output struct{ c *Command }

// Write appends to the command's output, then keeps the command's and the
// box's output within their caps.
func (o output) Write(p []byte) (int, error) {
	c := o.c
	perCmd, perBox := c.t.b.m.outputCaps()
	c.mu.Lock()
	if c.out == nil {
		c.mu.Unlock()
		return 0, os.ErrClosed
	}
	if c.full {
		c.mu.Unlock()
		return len(p), nil // the head is kept; the rest goes
	}
	n, err := c.out.WriteAt(p, c.size)
	c.size += int64(n)
	c.t.kept.Add(int64(n))
	if c.size-c.start > perCmd {
		c.cutLocked(c.size - perCmd + perCmd/16) // in steps: not a syscall per write
	}
	if n > 0 {
		close(c.grow)
		c.grow = make(chan struct{})
	}
	c.mu.Unlock()
	if c.t.kept.Load() > perBox {
		c.t.trimOutput(c, perBox)
	}
	return n, err
}

// cutLocked drops the command's output before offset to: its blocks are
// freed (a hole punched), offsets stay what they were, and readers skip to
// what is kept. Where the file system cannot punch holes, a running
// command keeps its head instead and drops what comes after; an ended one
// drops all.
func (c *Command) cutLocked(to int64) {
	to = min(to, c.size)
	if to <= c.start {
		return
	}
	err := c.punch(c.start, to)
	switch {
	case err == nil:
		c.t.kept.Add(-(to - c.start))
		c.start = to
		c.saveCut("tail", c.start)
	case c.out != nil:
		c.full = true
		c.saveCut("head", c.size)
	default:
		if os.Truncate(c.outPath(), 0) == nil {
			c.t.kept.Add(-(c.size - c.start))
			c.start = c.size
			c.saveCut("tail", c.start)
		}
	}
}

// punch frees the blocks of the output file from off to end.
func (c *Command) punch(off, end int64) error {
	f := c.out
	if f == nil {
		var err error
		if f, err = os.OpenFile(c.outPath(), os.O_WRONLY, 0); err != nil {
			return err
		}
		defer f.Close()
	}
	return punchHole(f, off, end-off)
}

// saveCut records where what is kept starts ("tail OFF") or ends ("head
// END"), for a later run of boxfs.
func (c *Command) saveCut(kind string, off int64) {
	os.WriteFile(c.cutPath(), fmt.Appendf(nil, "%s %d\n", kind, off), 0o600)
}

// trimOutput brings the box's kept output under perBox: the oldest
// commands' output goes whole first, then the head of the writer's own.
func (t *Commands) trimOutput(writer *Command, perBox int64) {
	t.mu.Lock()
	order := make([]*Command, 0, len(t.order))
	for _, n := range t.order {
		if c := t.cmds[n]; c != nil && c != writer {
			order = append(order, c)
		}
	}
	t.mu.Unlock()
	for _, c := range order {
		if t.kept.Load() <= perBox {
			return
		}
		c.mu.Lock()
		c.cutLocked(c.size)
		c.mu.Unlock()
	}
	if over := t.kept.Load() - perBox; over > 0 {
		writer.mu.Lock()
		writer.cutLocked(writer.start + over)
		writer.mu.Unlock()
	}
}

// Cut says how much of the command's output was dropped to keep within the
// caps; "" when none was.
func (c *Command) Cut() string {
	perCmd, perBox := c.t.b.m.outputCaps()
	c.mu.Lock()
	start, size, full := c.start, c.size, c.full
	c.mu.Unlock()
	caps := fmt.Sprintf("the host keeps %s of a command's output and %s of a box's", sizeText(perCmd), sizeText(perBox))
	switch {
	case full:
		return fmt.Sprintf("its output after the first %d bytes was dropped (%s; this file system cannot drop a file's head)\n", size, caps)
	case start > 0:
		return fmt.Sprintf("the first %d bytes of its output were dropped (%s)\n", start, caps)
	}
	return ""
}

func sizeText(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ReadAt reads the command's output at off, waiting for more while the
// command runs; it returns 0 bytes at the end of a finished command's
// output. What was cut is skipped: the bytes come from at, the first kept
// offset at or after off.
func (c *Command) ReadAt(ctx context.Context, p []byte, off int64) (n int, at int64, err error) {
	for {
		c.mu.Lock()
		size, start, grow, done := c.size, c.start, c.grow, c.status != StatusRunning
		c.mu.Unlock()
		at = max(off, start)
		if at < size {
			f, err := os.Open(c.outPath())
			if err != nil {
				return 0, at, providers.E(providers.Unknown, "boxes.Command.ReadAt", err)
			}
			want := p
			if int64(len(want)) > size-at {
				want = want[:size-at]
			}
			n, err := f.ReadAt(want, at)
			f.Close()
			if n > 0 {
				return n, at, nil
			}
			if err != nil {
				return 0, at, providers.E(providers.Unknown, "boxes.Command.ReadAt", err)
			}
		}
		if done {
			return 0, at, nil
		}
		select {
		case <-grow:
		case <-ctx.Done():
			return 0, at, ctx.Err()
		}
	}
}
