package boxes

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
)

// ShellRun is a run of the box's shell started by Box.Shell: a command
// whose streams belong to its caller (boxfs sh), not kept under cmds/.
type ShellRun struct {
	b    *Box
	proc providers.Process
	done chan struct{}
	code int
	err  error
}

// Shell runs the box's shell (bash if it has one, else sh) with args, in
// the box directory dir (relative to the workspace, "" for the
// workspace), with cmd's streams and environment; cmd's Line, Argv and Dir
// are set here. As for Commands.Start, the files written on the host and
// not yet pushed go first (the barrier), so the command sees them; in
// write=behind a barrier that fails refuses the command. The run outlives
// ctx: it ends when it exits, or by Kill or Signal.
func (b *Box) Shell(ctx context.Context, dir string, args []string, cmd hands.Command) (*ShellRun, error) {
	const op = "boxes.Shell"
	b.startMu.RLock()
	defer b.startMu.RUnlock()
	h, c, err := b.Parts(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.Do(ctx, true, 0, c.FlushAll); err != nil {
		b.SetErr(fmt.Errorf("dirty files not pushed before the command: %w", err))
		if c.WriteBehind() {
			return nil, err
		}
	}
	f := h.Facts()
	sh := f.Shell
	if sh == "" {
		sh = "sh"
	}
	cmd.Line = ""
	cmd.Argv = append([]string{sh}, args...)
	cmd.Dir = ""
	if dir != "" {
		if !path.IsAbs("/"+dir) || path.Clean("/"+dir) != "/"+dir || strings.Contains(dir, "\x00") {
			return nil, providers.Errorf(providers.Invalid, op, "directory %q is not a clean path in the workspace", dir).WithBox(b.name)
		}
		if f.Workspace == "" {
			return nil, providers.Errorf(providers.Unsupported, op, "the box reports no workspace path").WithBox(b.name)
		}
		cmd.Dir = path.Join(f.Workspace, dir)
	}
	// The command outlives this request: it ends when it exits or is
	// killed, never because ctx ended.
	proc, err := h.Run(context.Background(), cmd)
	if err != nil {
		return nil, err
	}
	b.m.log.Info("shell started", "box", b.name)
	r := &ShellRun{b: b, proc: proc, done: make(chan struct{})}
	guard.Go(func() { r.wait() }, b.panicked)
	return r, nil
}

// wait records how the run ended, then brings the box's changes into
// view before Wait returns: what the command wrote shows through the
// mount at once.
func (r *ShellRun) wait() {
	defer close(r.done)
	r.code, r.err = r.proc.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), r.b.m.opts.OpTimeout)
	defer cancel()
	if err := r.b.Refresh(ctx); err != nil {
		r.b.m.log.Warn("listing after a shell command not refreshed", "box", r.b.name, "err", err)
	}
}

// Wait waits for the run's end: its exit code (128+n after signal n), or
// an error when the end is not an exit (see providers.Process).
func (r *ShellRun) Wait() (int, error) {
	<-r.done
	return r.code, r.err
}

// Kill ends the run's whole process group, confirmed.
func (r *ShellRun) Kill(ctx context.Context) error { return r.proc.Kill(ctx) }

// Signal sends sig (INT, TERM, HUP ...) to the run's process group. A box
// that cannot deliver it kills the group instead, so the command still
// ends.
func (r *ShellRun) Signal(ctx context.Context, sig string) error {
	s, ok := r.proc.(hands.Signaler)
	if !ok {
		return r.Kill(ctx)
	}
	err := s.Signal(ctx, sig)
	if providers.IsCode(err, providers.Unsupported) {
		return r.Kill(ctx)
	}
	return err
}
