package boxes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
)

// keepCmds is how many ended commands each box keeps.
const keepCmds = 100

// Command statuses besides "exit N".
const (
	StatusRunning = "running"
	StatusKilled  = "killed" // killed through boxfs, or by the box
	StatusLost    = "lost"   // its channel broke, or its process ended
)

// Commands are a box's commands: the running ones and the last keepCmds
// ended ones, their output kept in host files so a reader can follow it.
type Commands struct {
	b    *Box
	dir  string
	kept atomic.Int64 // bytes of output kept on disk, all commands

	mu    sync.Mutex
	next  int
	cmds  map[int]*Command
	order []int
}

// Command is one command run in a box through Commands.Start.
type Command struct {
	t       *Commands
	n       int
	line    string
	started time.Time
	dir     string

	mu     sync.Mutex
	out    *os.File
	size   int64         // the output's length, what was cut included
	start  int64         // the offset of the first byte kept: what is before was cut
	full   bool          // the head is kept and later output dropped (no holes here)
	grow   chan struct{} // closed and replaced whenever output grows or the command ends
	status string
	proc   providers.Process
	killed bool
	ended  time.Time
	atEnd  bool // the box gives a command's output only when it ends
}

// newCommands finds the commands kept in dir; "" is a box not made yet,
// whose commands are kept where Start finds they belong.
func newCommands(b *Box, dir string) *Commands {
	t := &Commands{b: b, dir: dir, next: 1, cmds: map[int]*Command{}}
	if dir != "" {
		t.load()
	}
	return t
}

// place returns the directory the box's commands are kept in.
func (t *Commands) place() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir == "" {
		t.dir = t.b.m.cmdsDir(t.b.record())
	}
	return t.dir
}

// drop forgets every command and removes their records: the box is gone
// or forgotten.
func (t *Commands) drop() {
	t.mu.Lock()
	dir := t.dir
	t.cmds, t.order = map[int]*Command{}, nil
	t.kept.Store(0)
	t.mu.Unlock()
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			t.b.m.log.Warn("command records of a box not removed", "box", t.b.name, "err", err)
		}
	}
}

// load finds the commands an earlier run of boxfs kept: a command without
// its status file was running when that process ended, and is lost.
func (t *Commands) load() {
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
		if err != nil || st == "" || st == StatusRunning {
			st = StatusLost
		}
		c := &Command{t: t, n: n, line: strings.TrimSuffix(string(line), "\n"), dir: t.dir, status: st, grow: make(chan struct{})}
		c.loadOutput()
		close(c.grow)
		t.cmds[n] = c
		t.order = append(t.order, n)
		if n >= t.next {
			t.next = n + 1
		}
	}
	t.trimLocked()
}

// N returns the command's number in its box.
func (c *Command) N() int { return c.n }

// Line returns the command line.
func (c *Command) Line() string { return c.line }

func (c *Command) outPath() string { return filepath.Join(c.dir, fmt.Sprintf("%d.out", c.n)) }

// Start runs line in the box with the box's shell: files written on the
// host and not yet pushed go first, so the command sees them. The command
// outlives ctx: it ends when it exits or is killed.
func (t *Commands) Start(ctx context.Context, line string) (*Command, error) {
	b := t.b
	b.startMu.RLock()
	defer b.startMu.RUnlock()
	h, c, err := b.Parts(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.Do(ctx, true, 0, c.FlushAll); err != nil {
		b.SetErr(fmt.Errorf("dirty files not pushed before the command: %w", err))
		if c.WriteBehind() {
			// The command would not see what close(2) acknowledged.
			return nil, err
		}
	}
	dir := t.place()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, providers.E(providers.Unknown, "boxes.Start", err)
	}
	t.mu.Lock()
	n := t.next
	t.next++
	t.mu.Unlock()
	cmd := &Command{t: t, n: n, line: line, started: time.Now(), dir: dir, status: StatusRunning, grow: make(chan struct{}), atEnd: outputAtEnd(h.Facts())}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.cmd", n)), []byte(line+"\n"), 0o600); err != nil {
		return nil, providers.E(providers.Unknown, "boxes.Start", err)
	}
	out, err := os.OpenFile(cmd.outPath(), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, providers.E(providers.Unknown, "boxes.Start", err)
	}
	cmd.out = out
	// The command outlives this request: it ends when it exits or is
	// killed, never because the writer went away.
	proc, err := h.Run(context.Background(), hands.Command{Line: line, Stdout: output{cmd}, Stderr: output{cmd}})
	if err != nil {
		out.Close()
		os.Remove(cmd.outPath())
		os.Remove(filepath.Join(dir, fmt.Sprintf("%d.cmd", n)))
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
	// The line may hold secrets: only a debug log has it.
	b.m.log.Info("command started", "box", b.name, "n", n)
	b.m.log.Debug("command line", "box", b.name, "n", n, "cmd", line)
	guard.Go(func() { t.wait(cmd) }, t.b.panicked)
	return cmd, nil
}

// wait records how the command ended, then brings the box's changes into
// view before a reader sees the end of its output: a file opened after the
// command ended shows what the command wrote.
func (t *Commands) wait(cmd *Command) {
	code, err := cmd.proc.Wait()
	cmd.mu.Lock()
	killed := cmd.killed
	cmd.mu.Unlock()
	var status string
	switch {
	case err == nil && killed:
		status = StatusKilled
	case err == nil:
		status = fmt.Sprintf("exit %d", code)
	case killed || providers.CodeOf(err) == providers.Aborted:
		status = StatusKilled
	default:
		status = StatusLost
		t.b.SetErr(fmt.Errorf("command %d lost: %w", cmd.n, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.b.m.opts.OpTimeout)
	var rerr error
	if perr := guard.Run(func() { rerr = t.b.Refresh(ctx) }); perr != nil {
		t.b.panicked(perr)
		rerr = perr
	}
	if rerr != nil {
		t.b.m.log.Warn("listing after a command not refreshed", "box", t.b.name, "err", rerr)
	}
	cancel()
	if cmd.end(status) {
		t.b.m.log.Info("command ended", "box", t.b.name, "n", cmd.n, "status", status)
	}
}

// end records how the command ended, once: its status (also in the state
// directory) and the end of its output, so its readers reach EOF. It
// reports whether it did; false when the command had ended already.
func (c *Command) end(status string) bool {
	c.mu.Lock()
	if c.status != StatusRunning {
		c.mu.Unlock()
		return false
	}
	os.WriteFile(filepath.Join(c.dir, fmt.Sprintf("%d.status", c.n)), []byte(status+"\n"), 0o600)
	c.status = status
	c.ended = time.Now()
	if c.out != nil {
		c.out.Close()
		c.out = nil
	}
	close(c.grow)
	c.mu.Unlock()
	return true
}

// trimLocked keeps the last keepCmds commands (running ones always).
func (t *Commands) trimLocked() {
	for len(t.order) > keepCmds {
		n := t.order[0]
		c := t.cmds[n]
		if c != nil && c.Running() {
			break
		}
		t.order = t.order[1:]
		delete(t.cmds, n)
		if c != nil {
			c.forgetOutput()
		}
		for _, ext := range []string{"cmd", "out", "status", "cut"} {
			os.Remove(filepath.Join(t.dir, fmt.Sprintf("%d.%s", n, ext)))
		}
	}
}

// Get returns command n, or nil when it is not kept.
func (t *Commands) Get(n int) *Command {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cmds[n]
}

// List returns the kept commands' numbers, oldest first.
func (t *Commands) List() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]int(nil), t.order...)
}

// Count returns how many commands are kept.
func (t *Commands) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.order)
}

// Last returns the newest command's number and status (0 if none).
func (t *Commands) Last() (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.order) == 0 {
		return 0, ""
	}
	c := t.cmds[t.order[len(t.order)-1]]
	return c.n, c.Status()
}

// Latest returns the newest command, or nil.
func (t *Commands) Latest() *Command {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.order) == 0 {
		return nil
	}
	return t.cmds[t.order[len(t.order)-1]]
}

// killers is how many kills KillAll has under way at once.
const killers = 16

// KillAll kills every running command and waits for each to be confirmed:
// several at once, each within the operation bound (and all within ctx),
// so that many commands do not share one bound.
func (t *Commands) KillAll(ctx context.Context) error {
	t.mu.Lock()
	var run []*Command
	for _, c := range t.cmds {
		if c.Running() {
			run = append(run, c)
		}
	}
	t.mu.Unlock()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		slots = make(chan struct{}, killers)
	)
	for _, c := range run {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			kctx, cancel := context.WithTimeout(ctx, t.b.m.opts.OpTimeout)
			defer cancel()
			var err error
			if perr := guard.Run(func() { err = c.Kill(kctx) }); perr != nil {
				t.b.panicked(perr)
				err = perr
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// Running reports whether the command still runs.
func (c *Command) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status == StatusRunning
}

// Status returns "running", "exit N", "killed" or "lost".
func (c *Command) Status() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Kill ends the command's whole process group in the box, confirmed.
func (c *Command) Kill(ctx context.Context) error {
	c.mu.Lock()
	if c.status != StatusRunning || c.proc == nil {
		c.mu.Unlock()
		return nil
	}
	c.killed = true
	p := c.proc
	c.mu.Unlock()
	return p.Kill(ctx)
}

// AtEndNote is the line an open of cmds/N/out starts with while the
// command runs on a box that gives a command's output only when it ends.
const AtEndNote = "[boxfs: this box gives a command's output when the command ends; it follows this line then]\n"

// outputAtEnd reports whether a box's facts say a command's output
// arrives only when it ends: no process lives past its own call.
func outputAtEnd(f providers.Facts) bool {
	return f.LiveProcesses != nil && !*f.LiveProcesses
}

// OutputReader reads a command's output for one open of cmds/N/out.
type OutputReader struct {
	c    *Command
	note string
}

// Output returns a reader of the command's output for one open. Opened
// while the command runs on a box whose output arrives when it ends, its
// reads start with AtEndNote, so that a reader following the command
// sees why nothing comes yet; the output follows the note, its offsets
// moved by the note's length.
func (c *Command) Output() *OutputReader {
	r := &OutputReader{c: c}
	if c.atEnd && c.Running() {
		r.note = AtEndNote
	}
	return r
}

// ReadAt reads at off as Command.ReadAt does, the note (if any) first;
// at is in the same offsets as off.
func (r *OutputReader) ReadAt(ctx context.Context, p []byte, off int64) (n int, at int64, err error) {
	size := int64(len(r.note))
	if off < size {
		return copy(p, r.note[off:]), off, nil
	}
	n, at, err = r.c.ReadAt(ctx, p, off-size)
	return n, at + size, err
}
