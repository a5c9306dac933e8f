package fake

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/boxfs/boxfs/providers"
)

// Program is a command the fake runs, as a Go function: it gets the
// command's ctx, which is cancelled when the command is killed, when the
// Exec's ctx ends or when the box ends, and returns the exit code.
type Program func(ctx context.Context, pc *Proc) int

// Proc is what a Program runs with.
type Proc struct {
	Argv   []string
	Env    map[string]string // the box's base (PATH, HOME, TMPDIR), the spec's env, then the request's
	Dir    string            // absolute
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Files are the box's files, as a program in the box sees them: calls
	// through it are neither recorded nor scripted.
	Files providers.Files
	// BoxID is the id of the box the program runs in.
	BoxID string
	// PID is the command's process id, unique in the provider; it leads
	// the command's process group.
	PID int

	pr *process
}

// Spawn starts a background process in the command's process group, as
// "sleep 300 &" in a shell would, and returns its pid. It runs until the
// command ends (exits, is killed, its ctx ends or its box ends): the fake
// ends a command's whole group with it.
func (pc *Proc) Spawn() int {
	pr := pc.pr
	b := pr.b
	pid := b.p.newPID()
	b.mu.Lock()
	defer b.mu.Unlock()
	pr.mu.Lock()
	settled := pr.settled
	pr.mu.Unlock()
	if !settled {
		b.pids[pid] = pr
		pr.pids = append(pr.pids, pid)
	}
	return pid
}

// Alive reports whether pid is a live process in the box: a command, or a
// process it spawned, that has not ended.
func (pc *Proc) Alive(pid int) bool { return pc.pr.b.Alive(pid) }

// Program registers fn as the command name in every box of the provider. A
// command runs the program registered for its argv[0], or else for the base
// name of argv[0] ("/bin/sh" runs "sh"); a command with neither exits 127
// with "command not found" on stderr, as from a shell.
func (p *Provider) Program(name string, fn Program) {
	if name == "" || fn == nil {
		panic("fake: Program with an empty name or a nil function")
	}
	p.mu.Lock()
	p.programs[name] = fn
	p.mu.Unlock()
}

func (p *Provider) program(argv0 string) Program {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fn := p.programs[argv0]; fn != nil {
		return fn
	}
	if fn := p.programs[path.Base(argv0)]; fn != nil {
		return fn
	}
	return func(ctx context.Context, pc *Proc) int {
		fmt.Fprintf(pc.Stderr, "fake: %s: command not found\n", pc.Argv[0])
		return 127
	}
}

var baseEnv = map[string]string{
	"PATH":   "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME":   "/root",
	"TMPDIR": "/tmp",
}

// Exec starts the program argv[0] names. See Program and the Rule methods
// for what can be scripted.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "fake.Exec"
	rec := b.p.record(Call{Op: "Exec", Box: b.id, Argv: slices.Clone(req.Argv), Dir: req.Dir}, req.Env, nil)
	pr, err := b.exec(ctx, op, rec, req)
	b.p.done(rec, err)
	if err != nil {
		return nil, err
	}
	return pr, nil
}

func (b *Box) exec(ctx context.Context, op string, rec *record, req providers.ExecRequest) (*process, error) {
	out := b.p.script(rec)
	if err := out.before(ctx, b.p.clock, op, &rec.Call); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx, op)
	}
	if err := checkExec(op, req); err != nil {
		return nil, err.WithBox(b.id)
	}
	dir := req.Dir
	if !strings.HasPrefix(dir, "/") {
		dir = path.Join(b.workspace, dir)
	}
	dir = path.Clean(dir)

	env := maps.Clone(baseEnv)
	maps.Copy(env, b.spec.Env)
	maps.Copy(env, req.Env)
	fn := b.p.program(req.Argv[0])

	b.mu.Lock()
	if err := b.usableLocked(op); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	w, errno := b.tree.existing(dir, follow)
	if errno == 0 && !w.n.isDir() {
		errno = syscall.ENOTDIR
	}
	if errno != 0 {
		b.mu.Unlock()
		return nil, providers.PathError(op, b.id, dir, errno)
	}
	progCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pr := &process{
		b:      b,
		rec:    rec,
		out:    out,
		cancel: cancel,
		stdin:  newPipe(),
		stdout: newPipe(),
		stderr: newPipe(),
		done:   make(chan struct{}),
	}
	pr.stdin.noEOF = out.loseEOF
	pid := b.p.newPID()
	pr.pids = []int{pid}
	b.procs[pr] = struct{}{}
	b.pids[pid] = pr
	b.mu.Unlock()

	pc := &Proc{
		Argv:   slices.Clone(req.Argv),
		Env:    env,
		Dir:    dir,
		Stdin:  pr.stdin,
		Stdout: progWriter{pr, pr.stdout},
		Stderr: progWriter{pr, pr.stderr},
		Files:  view{b: b},
		BoxID:  b.id,
		PID:    pid,
		pr:     pr,
	}
	pr.copied.Add(2)
	go pr.copyOut(pr.stdout, req.Stdout, out.truncate)
	go pr.copyOut(pr.stderr, req.Stderr, -1)
	go pr.pumpStdin(req.Stdin)
	go func() {
		select {
		case <-ctx.Done():
			pr.settle(-1, ctxError(ctx, op))
		case <-pr.done:
		}
		b.mu.Lock()
		delete(b.procs, pr)
		for _, pid := range pr.pids {
			delete(b.pids, pid)
		}
		b.mu.Unlock()
	}()
	go func() {
		code := run(progCtx, fn, pc)
		if out.goneMid {
			pr.vanish()
			return
		}
		pr.settle(code, nil)
	}()
	return pr, nil
}

func checkExec(op string, req providers.ExecRequest) *providers.Error {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return providers.Errorf(providers.Invalid, op, "empty argv")
	}
	for _, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return providers.Errorf(providers.Invalid, op, "an argument holds a NUL byte")
		}
	}
	for k, v := range req.Env {
		if !envName(k) || strings.IndexByte(v, 0) >= 0 {
			return providers.Errorf(providers.Invalid, op, "env %q: a name must be a variable name ([A-Za-z_][A-Za-z0-9_]*), a value without NUL", k)
		}
	}
	return nil
}

func envName(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return k != ""
}

// run calls the program; a panic in it is exit 2 with the panic on stderr.
func run(ctx context.Context, fn Program, pc *Proc) (code int) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(pc.Stderr, "panic: %v\n", v)
			code = 2
		}
	}()
	return fn(ctx, pc)
}

func (p *Provider) newPID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pid++
	return p.pid
}

// Alive reports whether pid is a live process in the box: a command, or a
// process one spawned, that has not ended.
func (b *Box) Alive(pid int) bool {
	b.mu.Lock()
	pr := b.pids[pid]
	b.mu.Unlock()
	if pr == nil {
		return false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return !pr.settled
}

// process is one running command.
type process struct {
	b      *Box
	rec    *record
	out    outcome
	cancel context.CancelFunc // the program's ctx

	stdin, stdout, stderr *pipe
	copied                sync.WaitGroup // the output copiers
	pids                  []int          // its group: its own, then those it spawned; guarded by b.mu

	mu      sync.Mutex
	settled bool
	exit    int
	err     error
	done    chan struct{} // closed once the outcome is known
}

// settle decides the command's outcome, once: the program's ctx is
// cancelled, its stdin ends, and output it writes from now on is refused
// (what it wrote before still reaches the caller).
func (pr *process) settle(code int, err error) {
	pr.mu.Lock()
	if pr.settled {
		pr.mu.Unlock()
		return
	}
	pr.settled, pr.exit, pr.err = true, code, err
	close(pr.done)
	pr.mu.Unlock()
	pr.cancel()
	pr.stdin.breakPipe()
	pr.stdout.closeWrite()
	pr.stderr.closeWrite()
}

// vanish removes the box under a running command (GoneMidExec).
func (pr *process) vanish() { pr.b.remove("gone mid-exec") }

// Wait returns the exit code once the program returned, or the error that
// ended it (Aborted, Timeout, Gone), after the output is copied. A killed
// command exits 137 (SIGKILL).
func (pr *process) Wait() (int, error) {
	<-pr.done
	pr.copied.Wait()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.exit, pr.err
}

// Kill ends the command at once and confirms it: the program's ctx is
// cancelled, and a program that ignores it is reported killed all the same.
func (pr *process) Kill(ctx context.Context) error {
	const op = "fake.Kill"
	p := pr.b.p
	rec := p.record(Call{Op: "Kill", Box: pr.b.id}, nil, nil)
	err := p.script(rec).before(ctx, p.clock, op, &rec.Call)
	if err == nil {
		pr.settle(128+int(syscall.SIGKILL), nil)
	}
	p.done(rec, err)
	return err
}

// progWriter is a program's stdout or stderr.
type progWriter struct {
	pr *process
	p  *pipe
}

func (w progWriter) Write(b []byte) (int, error) {
	n, err := w.p.Write(b)
	if w.pr.out.goneMid && n > 0 {
		w.pr.vanish()
	}
	return n, err
}

// copyOut delivers a program's output to the caller's writer; with limit >=
// 0 only the first limit bytes, the rest dropped. If the caller's writer
// fails, the program's next write gets EPIPE.
func (pr *process) copyOut(src *pipe, dst io.Writer, limit int) {
	defer pr.copied.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		chunk := buf[:n]
		if limit >= 0 {
			chunk = chunk[:min(n, limit)]
			limit -= len(chunk)
		}
		if len(chunk) > 0 && dst != nil {
			if _, werr := dst.Write(chunk); werr != nil {
				src.breakPipe()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pumpStdin feeds the caller's stdin to the program, recording what it
// reads, and closes the program's stdin at its end.
func (pr *process) pumpStdin(r io.Reader) {
	if r == nil {
		pr.stdin.closeWrite()
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p := pr.b.p
			p.mu.Lock()
			pr.rec.Stdin = append(pr.rec.Stdin, buf[:n]...)
			p.mu.Unlock()
			if _, werr := pr.stdin.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			pr.stdin.closeWrite()
			return
		}
	}
}
