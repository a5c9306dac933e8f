package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// How long the host waits on the box's side of a kill, a start and a drain.
const (
	killTimeout = 30 * time.Second // the kill command, including its confirmation
	startGrace  = 10 * time.Second // for a just-started wrapper to record its group
	drainGrace  = 5 * time.Second  // for the output stream to end once the group is dead
	pidDir      = "/tmp/.boxfs"    // where wrappers record their process group
)

// wrapperScript runs every command of Exec. It is the same text each time and
// takes everything as positional parameters, so argv reaches the command
// byte for byte and is never parsed by a shell:
//
//	$1 this script  $2 "1" once setsid was tried  $3 the pid file
//	$4 the directory  $5 "1" when argv is octal-escaped
//	$6 "1" when stderr joins stdout (one writer for both)  $7... argv
//
// It makes sure the shell leads its own process group (docker exec already
// starts it as a session leader; otherwise it re-runs itself under setsid,
// which does not fork for a non-leader), records the group in the pid file,
// enters the directory and then writes one marker byte on stdout: 0 "started",
// or 1/2/3 when the directory is missing/not a directory/not enterable. The
// host strips the marker. The command runs as a child, so the shell can drop
// the pid file and pass on its exit status (128+n for a signal).
const wrapperScript = `if [ "$2" = 0 ] && ! kill -0 -$$ 2>/dev/null; then
	s=$1
	shift 2
	exec setsid /bin/sh -c 'eval "$1"' boxfs-exec "$s" 1 "$@"
fi
f=$3 d=$4 e=$5 j=$6
shift 6
if [ "$e" = 1 ]; then
	for a in "$@"; do
		shift
		a=$(printf '%bx' "$a")
		set -- "$@" "${a%x}"
	done
fi
[ -d "${f%/*}" ] || mkdir -p "${f%/*}" 2>/dev/null
echo $$ >"$f" 2>/dev/null
if ! cd "$d" 2>/dev/null; then
	if [ ! -e "$d" ]; then printf '\001'; elif [ ! -d "$d" ]; then printf '\002'; else printf '\003'; fi
	exit 126
fi
printf '\000'
if [ "$j" = 1 ]; then "$@" 2>&1; else "$@"; fi
r=$?
rm -f "$f"
exit $r
`

// killScript kills the process group recorded in the pid file $1 and
// confirms it gone (killgroup). Exit 0: confirmed gone; 3: no group
// recorded (the command had ended); 4: still there.
const killScript = shell.KillGroup + `f=$1
p=$(cat "$f" 2>/dev/null)
case $p in ''|*[!0-9]*|0|1) exit 3 ;; esac
killgroup "$p" || exit 4
rm -f "$f"
`

// Marker bytes of wrapperScript.
const (
	markerStarted   = 0
	markerNoDir     = 1
	markerNotDir    = 2
	markerDirDenied = 3
)

// Exec runs req.Argv in the box as its own process group, through the exec
// API. It returns once the command has started (its working directory
// entered); a missing Dir is NotFound. Argv, env and Dir must not hold NUL;
// env and Dir must be UTF-8 (argv may be any bytes).
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "docker.Exec"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	pidfile := pidDir + "/exec-" + providers.NewID(8)
	cmd, env, dir, err := b.execArgs(op, req, pidfile)
	if err != nil {
		return nil, err
	}
	created, err := b.p.cli.ContainerExecCreate(ctx, b.id, container.ExecOptions{
		Cmd:          cmd,
		Env:          env,
		AttachStdin:  req.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   "/",
	})
	if err != nil {
		return nil, b.execError(op, err)
	}
	hj, err := b.p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		// Attaching is what starts the exec: one whose attach broke (ctx
		// ended mid-way) may run unseen. End it, best effort and bounded.
		b.reap(context.WithoutCancel(ctx), created.ID, pidfile)
		return nil, b.execError(op, err)
	}
	pr := &process{
		b:          b,
		execID:     created.ID,
		pidfile:    pidfile,
		dir:        dir,
		conn:       hj,
		stdout:     providers.NewOutQueue(req.Stdout, 64),
		stderr:     providers.NewOutQueue(req.Stderr, 64),
		markerSeen: make(chan struct{}),
		streamDone: make(chan struct{}),
		killedCh:   make(chan struct{}),
		watchDone:  make(chan struct{}),
		done:       make(chan struct{}),
	}
	go pr.demux()
	go pr.watch(ctx)
	go pr.finish(context.WithoutCancel(ctx))
	if err := pr.started(ctx, op); err != nil {
		return nil, err
	}
	if req.Stdin != nil {
		go pr.feed(req.Stdin)
	}
	return pr, nil
}

// execArgs checks req and returns the exec API's command (wrapperScript
// around req.Argv, recording its group in pidfile), its environment and
// the command's directory.
func (b *Box) execArgs(op string, req providers.ExecRequest, pidfile string) (cmd, env []string, dir string, err error) {
	if len(req.Argv) == 0 {
		return nil, nil, "", providers.Errorf(providers.Invalid, op, "empty argv").WithBox(b.id)
	}
	dir = req.Dir
	switch {
	case dir == "":
		dir = b.workspace
	case !path.IsAbs(dir):
		dir = path.Join(b.workspace, dir)
	}
	if strings.IndexByte(dir, 0) >= 0 || !utf8.ValidString(dir) {
		return nil, nil, "", providers.Errorf(providers.Invalid, op, "dir %q holds NUL or is not UTF-8", dir).WithBox(b.id)
	}
	escaped := "0"
	for _, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, nil, "", providers.Errorf(providers.Invalid, op, "argv holds a NUL byte").WithBox(b.id)
		}
		if !utf8.ValidString(a) {
			escaped = "1" // the API carries JSON strings: send bytes as octal escapes
		}
	}
	env = make([]string, 0, len(req.Env))
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		v := req.Env[k]
		if !providers.ValidEnvName(k) || strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return nil, nil, "", providers.Errorf(providers.Invalid, op, "env %q: the name must be a shell variable name and the value UTF-8 without NUL", k).WithBox(b.id)
		}
		env = append(env, k+"="+v)
	}
	// One writer for both streams: the command gets one (its stderr joins
	// its stdout in the box), so the order it wrote in is kept.
	join := "0"
	if req.Stdout != nil && req.Stdout == req.Stderr {
		join = "1"
	}
	cmd = []string{"/bin/sh", "-c", `eval "$1"`, "boxfs-exec", wrapperScript, "0", pidfile, dir, escaped, join}
	for _, a := range req.Argv {
		if escaped == "1" {
			a = shell.Escape(a)
		}
		cmd = append(cmd, a)
	}
	return cmd, env, dir, nil
}

// started waits for the wrapper's marker: nil once the command has
// started, else why it did not (its directory, the stream, ctx).
func (pr *process) started(ctx context.Context, op string) error {
	select {
	case <-pr.markerSeen:
	case <-pr.done:
	case <-ctx.Done():
		<-pr.done // watch kills what started and confirms it
		return pr.err
	}
	select {
	case <-pr.markerSeen:
		if pr.marker == markerStarted {
			return nil
		}
		<-pr.done
		return pr.startError(op)
	default:
		// The stream ended before the wrapper started the command.
		if pr.err != nil {
			return pr.err
		}
		return pr.startError(op)
	}
}

// reap kills the group of an exec the host lost hold of, if it runs. The
// wrapper may not have recorded its group yet: then look again, a few times.
func (b *Box) reap(ctx context.Context, execID, pidfile string) {
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	pr := &process{b: b, pidfile: pidfile}
	for range 5 {
		ins, err := b.p.cli.ContainerExecInspect(ctx, execID)
		if err != nil || !ins.Running {
			return // the box is gone, or the exec never started or has ended
		}
		if err := pr.kill(ctx); err != nil {
			b.p.log.Warn("docker: killing an exec whose attach failed", "box", b.id, "err", err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// execError classifies a failure to create or attach an exec: a container
// that is missing or not running means the box has ended or gone, unless it
// is suspended (Refused: it runs again once resumed).
func (b *Box) execError(op string, err error) error {
	e := wrap(op, b.id, err)
	if e.Code == providers.Refused {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, ierr := b.p.cli.ContainerInspect(ctx, b.id); ierr == nil && suspended(c.State) {
			return providers.Errorf(providers.Refused, op, "box is suspended").WithBox(b.id)
		}
	}
	if e.Code == providers.NotFound || e.Code == providers.Refused {
		e.Code = providers.Gone
	}
	return e
}

// process is one running command.
type process struct {
	b       *Box
	execID  string
	pidfile string
	dir     string
	conn    types.HijackedResponse

	stdout, stderr *providers.OutQueue

	marker     byte          // the wrapper's marker, once markerSeen is closed
	markerSeen chan struct{} // closed by demux at the first stdout byte
	streamDone chan struct{} // closed by demux when the output stream ended
	streamErr  error         // why the stream ended, when not at EOF (demux's)

	killOnce  sync.Once
	killedCh  chan struct{} // closed when a kill (Kill or ctx) was done
	watchDone chan struct{} // closed when watch returns

	mu      sync.Mutex
	cause   error // ctx's error when ctx ended the command
	killErr error // the ctx kill's failure

	done chan struct{} // closed when code and err are final
	code int
	err  error
}

var _ providers.Process = (*process)(nil)

// demux splits Docker's multiplexed stream (8-byte frame headers: stream
// 1 stdout, 2 stderr, 3 the engine's own error) into the two output queues,
// taking the wrapper's marker byte off the front of stdout.
func (pr *process) demux() {
	defer close(pr.streamDone)
	defer pr.stdout.Close()
	defer pr.stderr.Close()
	r := pr.conn.Reader
	var hdr [8]byte
	seen := false
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err != io.EOF {
				pr.streamErr = err
			}
			break
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if n > 1<<26 {
			pr.streamErr = fmt.Errorf("exec stream frame of %d bytes", n)
			break
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			pr.streamErr = err
			break
		}
		switch hdr[0] {
		case 1:
			if !seen && len(buf) > 0 {
				seen = true
				pr.marker = buf[0]
				close(pr.markerSeen)
				if pr.marker <= markerDirDenied {
					buf = buf[1:]
				} // else not the wrapper's: the engine's message about an exec that never ran
			}
			if len(buf) > 0 {
				pr.stdout.Put(buf)
			}
		case 2:
			pr.stderr.Put(buf)
		case 3:
			pr.streamErr = fmt.Errorf("docker engine: %s", bytes.TrimSpace(buf))
		}
	}
}

// feed copies stdin into the command, then closes the write side so the
// command reads EOF. A command that ends first makes the copy fail; that is
// not an error of the command.
func (pr *process) feed(stdin io.Reader) {
	_, _ = io.Copy(pr.conn.Conn, stdin)
	_ = pr.conn.CloseWrite()
}

// watch kills the command's group when ctx ends before the command does.
func (pr *process) watch(ctx context.Context) {
	defer close(pr.watchDone)
	select {
	case <-pr.streamDone:
		return
	case <-ctx.Done():
	}
	pr.mu.Lock()
	pr.cause = ctx.Err()
	pr.mu.Unlock()
	// The group is recorded before the marker is written.
	select {
	case <-pr.markerSeen:
	case <-pr.streamDone:
		return
	case <-time.After(startGrace):
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	err := pr.kill(kctx)
	cancel()
	pr.mu.Lock()
	pr.killErr = err
	pr.mu.Unlock()
	pr.killOnce.Do(func() { close(pr.killedCh) })
}

// finish waits for the stream to end (bounded once the group is killed: a
// process outside the group may still hold the output open), then for the
// outputs to be written, then reads the exit code.
func (pr *process) finish(ctx context.Context) {
	defer close(pr.done)
	select {
	case <-pr.streamDone:
	case <-pr.killedCh:
		select {
		case <-pr.streamDone:
		case <-time.After(drainGrace):
			pr.conn.Close()
			<-pr.streamDone
		}
	}
	<-pr.watchDone
	pr.conn.Close()
	pr.stdout.Wait()
	pr.stderr.Wait()
	pr.code, pr.err = pr.result(ctx)
}

func (pr *process) result(ctx context.Context) (int, error) {
	const op = "docker.Exec"
	pr.mu.Lock()
	cause, killErr := pr.cause, pr.killErr
	pr.mu.Unlock()
	killed := false
	select {
	case <-pr.killedCh:
		killed = true
	default:
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code, ierr := pr.exitCode(ictx)
	switch {
	case cause != nil:
		e := providers.E(providers.CodeOf(cause), op, cause).WithBox(pr.b.id)
		if killErr != nil {
			e.Err = fmt.Errorf("%w; and the kill: %v", cause, killErr)
		}
		return -1, e
	case ierr != nil:
		return -1, pr.lost(ictx, op, ierr)
	case pr.streamErr != nil && !killed:
		return -1, pr.lost(ictx, op, pr.streamErr)
	case code >= 128 && !killed:
		// A signal: the box may be ending under the command.
		if pr.b.ending(ictx) {
			return -1, providers.Errorf(providers.Gone, op, "box ended while the command ran (exit %d)", code).WithBox(pr.b.id)
		}
	}
	for _, q := range []*providers.OutQueue{pr.stdout, pr.stderr} {
		if err := q.Wait(); err != nil {
			return code, providers.E(0, op, err).WithBox(pr.b.id)
		}
	}
	return code, nil
}

// lost classifies a broken exec: Gone when the box went away, else
// TransportLost.
func (pr *process) lost(ctx context.Context, op string, err error) error {
	if st, serr := pr.b.Status(ctx); serr != nil && providers.IsCode(serr, providers.Gone) || serr == nil && st.State == providers.StateEnded {
		return providers.E(providers.Gone, op, err).WithBox(pr.b.id)
	}
	if c := errorCode(err); c != providers.Unknown {
		return wrap(op, pr.b.id, err)
	}
	return providers.E(providers.TransportLost, op, err).WithBox(pr.b.id)
}

// exitCode reads the exec's exit code, waiting while Docker still reports it
// running (the stream can end just before the engine records the exit).
func (pr *process) exitCode(ctx context.Context) (int, error) {
	d := 2 * time.Millisecond
	for {
		ins, err := pr.b.p.cli.ContainerExecInspect(ctx, pr.execID)
		if err != nil {
			return -1, err
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(d):
		}
		d = min(2*d, 200*time.Millisecond)
	}
}

// startError is Exec's error when the wrapper did not start the command.
func (pr *process) startError(op string) error {
	select {
	case <-pr.markerSeen:
		switch pr.marker {
		case markerNoDir:
			return providers.PathError(op, pr.b.id, pr.dir, 2) // ENOENT
		case markerNotDir:
			return providers.PathError(op, pr.b.id, pr.dir, 20) // ENOTDIR
		case markerDirDenied:
			return providers.PathError(op, pr.b.id, pr.dir, 13) // EACCES
		}
		return providers.Errorf(providers.Unknown, op, "wrapper marker %d", pr.marker).WithBox(pr.b.id)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if pr.b.ending(ctx) {
		return providers.Errorf(providers.Gone, op, "box has ended").WithBox(pr.b.id)
	}
	return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh, and setsid unless docker exec makes a session leader", pr.code).WithBox(pr.b.id)
}

// Wait waits for the command to end and its output to be written.
func (pr *process) Wait() (int, error) {
	<-pr.done
	return pr.code, pr.err
}

// Kill kills the command's process group and confirms it gone.
func (pr *process) Kill(ctx context.Context) error {
	select {
	case <-pr.streamDone:
		return nil
	default:
	}
	err := pr.kill(ctx)
	pr.killOnce.Do(func() { close(pr.killedCh) })
	return err
}

// kill runs killScript in the box.
func (pr *process) kill(ctx context.Context) error {
	const op = "docker.Kill"
	code, out, err := pr.b.run(ctx, []string{"/bin/sh", "-c", killScript, "boxfs-kill", pr.pidfile})
	if err != nil {
		if providers.IsCode(err, providers.Gone) {
			return nil // the box, and every process of it, is gone
		}
		return providers.E(0, op, err).WithBox(pr.b.id)
	}
	switch code {
	case 0, 3:
		return nil
	case 4:
		return providers.Errorf(providers.Liveness, op, "process group still alive after SIGKILL and ~10 s").WithBox(pr.b.id)
	}
	return providers.Errorf(providers.Unknown, op, "kill script exited %d: %s", code, bytes.TrimSpace(out)).WithBox(pr.b.id)
}

// run runs a fixed command of the provider's own (no wrapper, no stdin) and
// returns its exit code and combined output.
func (b *Box) run(ctx context.Context, argv []string) (int, []byte, error) {
	const op = "docker.run"
	created, err := b.p.cli.ContainerExecCreate(ctx, b.id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true, WorkingDir: "/"})
	if err != nil {
		return -1, nil, b.execError(op, err)
	}
	hj, err := b.p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, nil, b.execError(op, err)
	}
	defer hj.Close()
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	var out bytes.Buffer
	if err := copyFrames(&out, hj.Reader); err != nil {
		if ctx.Err() != nil {
			return -1, out.Bytes(), providers.E(0, op, ctx.Err()).WithBox(b.id)
		}
		return -1, out.Bytes(), providers.E(providers.TransportLost, op, err).WithBox(b.id)
	}
	pr := &process{b: b, execID: created.ID}
	code, err := pr.exitCode(ctx)
	if err != nil {
		return -1, out.Bytes(), b.execError(op, err)
	}
	return code, out.Bytes(), nil
}

// copyFrames copies the payload of every stdout and stderr frame to w.
func copyFrames(w io.Writer, r *bufio.Reader) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		if _, err := io.CopyN(w, r, n); err != nil {
			return err
		}
	}
}
