package local

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

const (
	// drainGrace is how long output is still read after a command's own
	// process has exited, for what it wrote just before, or what a child it
	// left in the background writes. Each read that brings data extends it,
	// up to drainMax after the exit.
	drainGrace = 250 * time.Millisecond
	drainMax   = 10 * time.Second
	// waitDelay bounds exec's own wait for the killed leader (Cmd.WaitDelay).
	waitDelay = 5 * time.Second
)

// Exec starts argv as its own process group in the box. See the package
// documentation for its environment; Dir is a host path ("" is the
// workspace, a relative Dir is within it). The program is looked up in the box's PATH, not the host's.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "local.Exec"
	if err := req.Validate(); err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	dir := req.WorkDir(b.Workspace())
	if err := ctx.Err(); err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}

	// Hold the box's lock shared from the state check until the process
	// runs, so the watchdog or Destroy (exclusive) sweeps after we start, or
	// we see the box ended.
	unlock, err := lockBox(ctx, b.dir, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, b.goneErr(op)
	}
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	defer unlock()
	rec, err := b.read(op)
	if err != nil {
		return nil, err
	}
	if rec.State != providers.StateRunning || !time.Now().Before(rec.Deadline) || isEnding(b.dir) {
		return nil, providers.Errorf(providers.Gone, op, "the box has ended (%s)", orDefault(rec.Reason, "lifetime")).WithBox(b.id)
	}

	env := map[string]string{
		"PATH":   FixedPath,
		"HOME":   filepath.Join(b.dir, "home"),
		"TMPDIR": filepath.Join(b.dir, "tmp"),
	}
	maps.Copy(env, rec.Env)
	maps.Copy(env, req.Env)
	env[MarkerEnv] = b.id
	envList := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}

	path, err := lookPath(req.Argv[0], env["PATH"], dir)
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	return b.start(ctx, op, path, req, envList, dir)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// lookPath finds file as execve would through a shell with the box's PATH:
// a name with a slash is taken as it is (relative to dir), anything else is
// searched in path's directories.
func lookPath(file, path, dir string) (string, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if strings.Contains(file, "/") {
		return abs(file), nil // execve reports what is wrong with it
	}
	var denied error
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := abs(filepath.Join(d, file))
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Mode().Perm()&0o111 == 0 {
			denied = &os.PathError{Op: "exec", Path: p, Err: syscall.EACCES}
			continue
		}
		return p, nil
	}
	if denied != nil {
		return "", denied
	}
	return "", &os.PathError{Op: "exec", Path: file, Err: syscall.ENOENT}
}

// process is one running command.
type process struct {
	op   string
	box  *Box
	cmd  *exec.Cmd
	pgid int

	cancelled atomic.Bool  // ctx ended it (Cmd.Cancel ran)
	ctxErr    atomic.Value // ctx.Err() when it did
	killed    atomic.Bool  // Kill ended it

	stdin     *os.File // our end of its stdin pipe, or nil
	stdinOnce sync.Once
	copiers   sync.WaitGroup
	exitedAt  atomic.Int64 // unix ns of the leader's exit; 0 while it runs

	done chan struct{}
	code int
	err  error
}

func (b *Box) start(ctx context.Context, op, path string, req providers.ExecRequest, env []string, dir string) (*process, error) {
	sealInheritedFDs()
	p := &process{op: "local.Wait", box: b, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, path)
	cmd.Args = slices.Clone(req.Argv)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		p.ctxErr.Store(ctx.Err())
		p.cancelled.Store(true)
		// The leader's number is its group's as long as it is unreaped,
		// and Cancel runs only before Wait reaps it.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil
	}
	cmd.WaitDelay = waitDelay
	p.cmd = cmd

	// Our own pipes, not exec's: Wait then returns when the leader exits,
	// and output left to drain is ours to bound (a background child may
	// hold the pipe open for ever).
	var closeAfterStart []*os.File
	var readers []*os.File
	fail := func(err error) (*process, error) {
		for _, f := range closeAfterStart {
			f.Close()
		}
		for _, f := range readers {
			f.Close()
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
		return nil, providers.E(0, op, err).WithBox(p.box.id)
	}
	type stream struct {
		w   io.Writer
		set func(*os.File)
	}
	var outs []struct {
		r *os.File
		w io.Writer
	}
	streams := []stream{
		{req.Stdout, func(f *os.File) { cmd.Stdout = f }},
		{req.Stderr, func(f *os.File) { cmd.Stderr = f }},
	}
	if req.Stdout != nil && req.Stdout == req.Stderr {
		// One writer for both: one pipe, so the order the command wrote in
		// is kept (providers.ExecRequest).
		streams = []stream{{req.Stdout, func(f *os.File) { cmd.Stdout, cmd.Stderr = f, f }}}
	}
	for _, s := range streams {
		if s.w == nil {
			continue // exec gives it /dev/null
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		s.set(w)
		closeAfterStart = append(closeAfterStart, w)
		readers = append(readers, r)
		outs = append(outs, struct {
			r *os.File
			w io.Writer
		}{r, s.w})
	}
	if req.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		cmd.Stdin = r
		closeAfterStart = append(closeAfterStart, r)
		p.stdin = w
	}
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fail(err)
	}
	for _, f := range closeAfterStart {
		f.Close()
	}
	p.pgid = cmd.Process.Pid

	for _, o := range outs {
		p.copiers.Add(1)
		go p.copyOut(o.r, o.w)
	}
	if req.Stdin != nil {
		go p.copyIn(req.Stdin)
	}
	go p.wait(readers)
	return p, nil
}

// copyOut copies one output stream until EOF, or until the drain after
// the leader's exit runs out. A writer that fails is replaced by a discard,
// so the command never blocks on a full pipe.
func (p *process) copyOut(r *os.File, w io.Writer) {
	defer p.copiers.Done()
	defer r.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				w = io.Discard
			}
			if at := p.exitedAt.Load(); at != 0 {
				if time.Since(time.Unix(0, at)) < drainMax {
					r.SetReadDeadline(time.Now().Add(drainGrace))
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// copyIn feeds stdin until its reader's EOF, then closes the pipe so the
// command reads EOF. It is not waited for: a reader that blocks for ever
// must not hold up Wait.
func (p *process) copyIn(r io.Reader) {
	io.Copy(p.stdin, r)
	p.closeStdin()
}

func (p *process) closeStdin() {
	p.stdinOnce.Do(func() { p.stdin.Close() })
}

func (p *process) wait(readers []*os.File) {
	defer close(p.done)
	werr := p.cmd.Wait()
	p.exitedAt.Store(time.Now().UnixNano())
	for _, r := range readers {
		r.SetReadDeadline(time.Now().Add(drainGrace))
	}
	if p.stdin != nil {
		p.closeStdin()
	}
	var killErr error
	if p.cancelled.Load() {
		// The leader is gone; its group's other members may not be yet.
		killErr = killGroup(context.Background(), p.pgid)
	}
	p.copiers.Wait()

	ps := p.cmd.ProcessState
	if ps == nil {
		p.code, p.err = -1, providers.E(providers.Unknown, p.op, werr).WithBox(p.box.id)
		return
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	p.code = ws.ExitStatus()
	if ws.Signaled() {
		p.code = 128 + int(ws.Signal())
	}
	switch {
	case p.cancelled.Load():
		cause, _ := p.ctxErr.Load().(error)
		if cause == nil {
			cause = context.Canceled
		}
		p.code, p.err = -1, providers.E(0, p.op, cause).WithBox(p.box.id)
		if killErr != nil {
			p.err = providers.E(providers.Unknown, p.op, killErr).WithBox(p.box.id)
		}
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL && !p.killed.Load() && p.box.ended():
		p.code, p.err = -1, providers.Errorf(providers.Gone, p.op, "the box ended while the command ran").WithBox(p.box.id)
	}
}

// ended reports whether the box was destroyed or has ended.
func (b *Box) ended() bool {
	rec, err := readRecord(b.dir)
	return err != nil || rec.State != providers.StateRunning
}

// Wait waits for the command to end and its output to be copied. It
// returns the exit status (128+n for signal n), or Aborted or Timeout when
// its ctx ended it (its whole group then confirmed dead), or Gone when the
// box ended or was destroyed under it.
func (p *process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

// Kill kills the command's process group and returns once no member of it
// is alive. Killing an ended command is not an error; members it left
// running in its group are still killed.
func (p *process) Kill(ctx context.Context) error {
	select {
	case <-p.done:
		// The leader is reaped and its number free again: signal only
		// members that still carry the box's marker.
		for _, pid := range markedGroupMembers(p.pgid, p.box.id) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return nil
	default:
	}
	p.killed.Store(true)
	if err := killGroup(ctx, p.pgid); err != nil {
		return providers.E(0, "local.Kill", err).WithBox(p.box.id)
	}
	return nil
}
