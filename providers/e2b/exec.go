package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	procpb "github.com/boxfs/boxfs/providers/e2b/internal/envd/process"
)

// Bounds of a command's life on the host's side.
const (
	killTimeout = 30 * time.Second // the kill script, its confirmation included
	startGrace  = 10 * time.Second // for a just-started wrapper to lead its group
	drainGrace  = 5 * time.Second  // for the stream to end once the group is dead
	maxInput    = 1 << 20          // the most stdin bytes one SendInput carries
)

// wrapperScript runs every command of Exec. It is the same text each time
// and takes everything as positional parameters, so argv reaches the
// command byte for byte and is never parsed by a shell:
//
//	$0 boxfs-exec-TOKEN (what Kill recognises the group by)
//	$1 this script  $2 "1" once setsid was done  $3 the directory ("" stays
//	in envd's default)  $4 "1" when $3 and argv are octal-escaped
//	$5 "1" when stderr joins stdout  $6... argv
//
// envd starts commands in its own process group; the wrapper re-runs
// itself under setsid (which does not fork for a process that leads no
// group; one that already leads its group stays as it is), so the
// command's group is the wrapper's pid, which envd reports.
// It enters the directory and writes one marker byte on stdout: 0
// "started", or 1/2/3 when the directory is missing/not a directory/not
// enterable. The host strips the marker. The command runs as a child, so
// the wrapper passes on its exit status (128+n for a signal).
const wrapperScript = `if [ "$2" = 0 ] && ! kill -0 -$$ 2>/dev/null; then
	s=$1
	shift 2
	exec setsid /bin/sh -c 'eval "$1"' "$0" "$s" 1 "$@"
fi
d=$3 e=$4 j=$5
shift 5
if [ "$e" = 1 ]; then
	for a in "$@"; do
		shift
		a=$(printf '%bx' "$a")
		set -- "$@" "${a%x}"
	done
	d=$(printf '%bx' "$d")
	d=${d%x}
fi
if [ -n "$d" ] && ! cd "$d" 2>/dev/null; then
	if [ ! -e "$d" ]; then printf '\001'; elif [ ! -d "$d" ]; then printf '\002'; else printf '\003'; fi
	exit 126
fi
printf '\000'
if [ "$j" = 1 ]; then "$@" 2>&1; else "$@"; fi
`

// killScript kills the process group $1 when its leader is the wrapper of
// the command tagged $2, and confirms no process of the group is left
// that is not a zombie. Exit 0: gone; 3: no such command (it had ended);
// 4: still there after ~10 s.
const killScript = shell.KillGroup + `p=$1 t=$2
case $p in ''|*[!0-9]*|0|1) exit 3 ;; esac
grep -qaF -- "$t" "/proc/$p/cmdline" 2>/dev/null || exit 3
killgroup "$p" || exit 4
`

// Marker bytes of wrapperScript.
const (
	markerStarted   = 0
	markerNoDir     = 1
	markerNotDir    = 2
	markerDirDenied = 3
)

// Exec runs req.Argv in the box as its own process group, through envd's
// Start call. It returns once the command has started (its directory
// entered); a missing Dir is NotFound. Argv and Dir must not hold NUL (any
// other bytes travel octal-escaped); env names must be variable names and
// values UTF-8 without NUL.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "e2b.Exec"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	start, token, dir, err := b.startRequest(op, req)
	if err != nil {
		return nil, err
	}
	pr := &process{
		b: b, token: token, dir: dir,
		stdout:     providers.NewOutQueue(req.Stdout, 64),
		stderr:     providers.NewOutQueue(req.Stderr, 64),
		markerSeen: make(chan struct{}),
		streamDone: make(chan struct{}),
		killedCh:   make(chan struct{}),
		watchDone:  make(chan struct{}),
		done:       make(chan struct{}),
	}
	if err := pr.open(ctx, start); err != nil {
		pr.stdout.Close()
		pr.stderr.Close()
		return nil, err
	}
	go pr.read()
	go pr.watch(ctx)
	go pr.finish()

	select {
	case <-pr.markerSeen:
	case <-pr.done:
	case <-ctx.Done():
		<-pr.done // watch kills what started and confirms it
		return nil, pr.err
	}
	select {
	case <-pr.markerSeen:
		if pr.marker == markerStarted {
			if req.Stdin != nil {
				go pr.feed(req.Stdin)
			}
			return pr, nil
		}
		<-pr.done
		return nil, pr.startError(op)
	default:
		if pr.err != nil {
			return nil, pr.err
		}
		return nil, pr.startError(op)
	}
}

// startRequest checks req and builds envd's StartRequest for it.
func (b *Box) startRequest(op string, req providers.ExecRequest) (*procpb.StartRequest, string, string, error) {
	if err := req.ValidateUTF8(); err != nil {
		return nil, "", "", providers.E(0, op, err).WithBox(b.id)
	}
	dir := req.WorkDir(b.workspace)
	escaped := "0"
	for _, a := range req.Argv {
		if !utf8.ValidString(a) {
			escaped = "1" // protobuf strings are UTF-8: send bytes as octal escapes
		}
	}
	if req.Stdin != nil && !b.closesStdin() {
		return nil, "", "", providers.Errorf(providers.Unsupported, op, "envd %s cannot close a command's stdin (0.5.2 and later can); rebuild the template", b.envdVersion).WithBox(b.id)
	}
	join := "0"
	if req.Stdout != nil && req.Stdout == req.Stderr {
		join = "1"
	}
	token := "boxfs-exec-" + providers.NewID(8)
	args := []string{"-c", `eval "$1"`, token, wrapperScript, "0", esc(dir, escaped), escaped, join}
	for _, a := range req.Argv {
		args = append(args, esc(a, escaped))
	}
	stdin := req.Stdin != nil
	return &procpb.StartRequest{
		Process: &procpb.ProcessConfig{Cmd: "/bin/sh", Args: args, Envs: maps.Clone(req.Env)},
		Tag:     &token,
		Stdin:   &stdin,
	}, token, dir, nil
}

func esc(s, escaped string) string {
	if escaped == "1" {
		return shell.Escape(s)
	}
	return s
}

// process is one running command.
type process struct {
	b     *Box
	token string
	dir   string

	stream *connect.ServerStreamForClient[procpb.StartResponse]
	cancel context.CancelFunc // ends the stream
	first  *procpb.ProcessEvent
	pid    uint32

	stdout, stderr *providers.OutQueue

	marker     byte          // the wrapper's marker, once markerSeen is closed
	markerSeen chan struct{} // closed by read at the first stdout byte
	streamDone chan struct{} // closed by read when the stream ended
	end        *procpb.ProcessEvent_EndEvent
	streamErr  error // why the stream ended without an end event
	silent     bool  // the stream was cut for showing no sign of life

	killing   atomic.Bool // a kill (Kill or ctx) was started
	killOnce  sync.Once
	killedCh  chan struct{} // closed when a kill (Kill or ctx) was done
	watchDone chan struct{}

	mu      sync.Mutex
	cause   error // ctx's error when ctx ended the command
	killErr error
	feedErr error // why stdin could not be delivered

	done chan struct{} // closed when code and err are final
	code int
	err  error
}

var _ providers.Process = (*process)(nil)

// open starts the command and reads envd's start event, again while E2B
// answers that it did not act on the call.
func (pr *process) open(ctx context.Context, start *procpb.StartRequest) error {
	const op = "e2b.Exec"
	for n := 0; ; n++ {
		// The stream lives as long as the command, not as long as ctx; no
		// deadline reaches envd, which would kill the command at it.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		sctx, probe := withProbe(sctx)
		stream, ev, err := pr.b.startStream(sctx, start)
		if err == nil {
			pr.stream, pr.cancel, pr.first = stream, cancel, ev
			pr.pid = ev.GetStart().GetPid()
			return nil
		}
		cancel()
		if ctx.Err() != nil {
			return providers.E(0, op, ctx.Err()).WithBox(pr.b.id)
		}
		// Sent again only when E2B said it did not act: a command run twice
		// is not the command asked for.
		if !probe.unhandled() || n+1 >= maxAttempts || pr.b.away(ctx) {
			return pr.b.envdError(ctx, op, err)
		}
		if berr := backoff(ctx, n, err); berr != nil {
			return providers.E(0, op, berr).WithBox(pr.b.id)
		}
	}
}

// startStream calls Start and reads its first event, which must be the
// start event with the pid.
func (b *Box) startStream(ctx context.Context, start *procpb.StartRequest) (*connect.ServerStreamForClient[procpb.StartResponse], *procpb.ProcessEvent, error) {
	r := connect.NewRequest(start)
	r.Header().Set("Keepalive-Ping-Interval", strconv.Itoa(int(b.p.keepalive/time.Second)))
	stream, err := b.envd.proc.Start(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	ev := stream.Msg().GetEvent()
	if ev.GetStart() == nil {
		stream.Close()
		return nil, nil, errors.New("envd's first event was not the start event")
	}
	return stream, ev, nil
}

// read follows the stream: output into the queues (the wrapper's marker
// taken off the front of stdout), the end event recorded. A stream that
// shows no sign of life (no event, not even envd's keepalive) for three
// keepalive intervals is cut.
func (pr *process) read() {
	defer close(pr.streamDone)
	defer pr.stdout.Close()
	defer pr.stderr.Close()
	live := time.AfterFunc(3*pr.b.p.keepalive, func() {
		pr.mu.Lock()
		pr.silent = true
		pr.mu.Unlock()
		pr.cancel()
	})
	defer live.Stop()
	for pr.stream.Receive() {
		live.Reset(3 * pr.b.p.keepalive)
		pr.handle(pr.stream.Msg().GetEvent())
	}
	if pr.end == nil {
		pr.streamErr = pr.b.scrubbed(pr.stream.Err())
		if pr.streamErr == nil {
			pr.streamErr = io.ErrUnexpectedEOF
		}
	}
	pr.stream.Close()
}

func (pr *process) handle(ev *procpb.ProcessEvent) {
	switch e := ev.GetEvent().(type) {
	case *procpb.ProcessEvent_Data:
		switch out := e.Data.GetOutput().(type) {
		case *procpb.ProcessEvent_DataEvent_Stdout:
			buf := out.Stdout
			select {
			case <-pr.markerSeen:
			default:
				if len(buf) == 0 {
					return
				}
				pr.marker = buf[0]
				buf = buf[1:]
				close(pr.markerSeen)
			}
			if len(buf) > 0 {
				pr.stdout.Put(buf)
			}
		case *procpb.ProcessEvent_DataEvent_Stderr:
			if len(out.Stderr) > 0 {
				pr.stderr.Put(out.Stderr)
			}
		}
	case *procpb.ProcessEvent_End:
		pr.end = e.End
	}
}

// feed copies stdin into the command with SendInput, one call at a time
// (each carrying what has arrived since the last, up to maxInput), then
// closes the command's stdin. A command that ends first makes it stop;
// that is not an error of the command.
func (pr *process) feed(stdin io.Reader) {
	const op = "e2b.Exec"
	chunks := make(chan []byte, 16)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 64<<10)
			n, err := stdin.Read(buf)
			if n > 0 {
				select {
				case chunks <- buf[:n]:
				case <-pr.streamDone:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-pr.streamDone:
			cancel()
		case <-ctx.Done():
		}
	}()
	sel := &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Pid{Pid: pr.pid}}
	for {
		c, ok := <-chunks
		eof := !ok
	more:
		for ok && len(c) < maxInput {
			select {
			case m, open := <-chunks:
				if !open {
					eof = true
					break more
				}
				c = append(c, m...)
			default:
				break more
			}
		}
		if len(c) > 0 {
			in := &procpb.SendInputRequest{Process: sel, Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Stdin{Stdin: c}}}
			if err := pr.sendInput(ctx, in); err != nil {
				pr.feedFailed(ctx, err)
				return
			}
		}
		if eof {
			if _, err := unary(ctx, pr.b, op, pr.b.envd.proc.CloseStdin, &procpb.CloseStdinRequest{Process: sel}); err != nil {
				pr.feedFailed(ctx, err)
			}
			return
		}
	}
}

// sendInput sends one piece of stdin, again only while E2B answers that
// it did not act on it: bytes written twice would corrupt the stream.
func (pr *process) sendInput(ctx context.Context, in *procpb.SendInputRequest) error {
	const op = "e2b.Exec"
	for n := 0; ; n++ {
		pctx, probe := withProbe(ctx)
		_, err := pr.b.envd.proc.SendInput(pctx, connect.NewRequest(in))
		if err == nil {
			return nil
		}
		if !probe.unhandled() || n+1 >= maxAttempts || pr.b.away(ctx) {
			return pr.b.envdError(ctx, op, err)
		}
		if berr := backoff(ctx, n, err); berr != nil {
			return pr.b.envdError(ctx, op, err)
		}
	}
}

// feedFailed ends a command whose stdin could not be delivered whole: it
// would otherwise wait for input that never comes, or read a stream with
// a hole. A command that had ended is no failure.
func (pr *process) feedFailed(ctx context.Context, err error) {
	select {
	case <-pr.streamDone:
		return
	default:
	}
	if ctx.Err() != nil {
		return
	}
	if providers.IsCode(err, providers.NotFound) {
		// NotFound: envd knows no process of that pid, so the command
		// ended and its end event should follow. A stream that goes on
		// is a command that would wait for its stdin for ever.
		select {
		case <-pr.streamDone:
			return
		case <-time.After(drainGrace):
		}
	}
	pr.mu.Lock()
	pr.feedErr = err
	pr.mu.Unlock()
	kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	pr.killing.Store(true)
	if kerr := pr.kill(kctx); kerr != nil {
		pr.b.p.log.Warn("e2b: killing a command whose stdin failed", "box", pr.b.id, "err", kerr)
	}
	pr.killOnce.Do(func() { close(pr.killedCh) })
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
	// The wrapper leads its group by the time it writes the marker.
	select {
	case <-pr.markerSeen:
	case <-pr.streamDone:
		return
	case <-time.After(startGrace):
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	pr.killing.Store(true)
	err := pr.kill(kctx)
	cancel()
	pr.mu.Lock()
	pr.killErr = err
	pr.mu.Unlock()
	pr.killOnce.Do(func() { close(pr.killedCh) })
}

// finish waits for the stream to end (bounded once the group is killed: a
// process outside the group may hold the output open), then for the
// outputs to be written, and settles the result.
func (pr *process) finish() {
	defer close(pr.done)
	select {
	case <-pr.streamDone:
	case <-pr.killedCh:
		select {
		case <-pr.streamDone:
		case <-time.After(drainGrace):
			pr.cancel()
			<-pr.streamDone
		}
	}
	<-pr.watchDone
	pr.cancel()
	pr.stdout.Wait()
	pr.stderr.Wait()
	pr.code, pr.err = pr.result()
}

func (pr *process) result() (int, error) {
	const op = "e2b.Exec"
	pr.mu.Lock()
	cause, killErr, silent, feedErr := pr.cause, pr.killErr, pr.silent, pr.feedErr
	pr.mu.Unlock()
	killed := pr.killing.Load()
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	switch {
	case cause != nil:
		e := providers.E(providers.CodeOf(cause), op, cause).WithBox(pr.b.id)
		if killErr != nil {
			e.Err = fmt.Errorf("%w; and the kill: %v", cause, killErr)
		}
		return -1, e
	case feedErr != nil:
		code := providers.TransportLost
		if providers.IsCode(feedErr, providers.Gone) {
			code = providers.Gone
		}
		return -1, providers.E(code, op, fmt.Errorf("delivering stdin: %w", feedErr)).WithBox(pr.b.id)
	case pr.end == nil:
		// The stream broke: what the command wrote since is lost, so it
		// may not go on unseen.
		switch pr.b.life(ctx) {
		case lifeEnded:
			return -1, providers.E(providers.Gone, op, pr.streamErr).WithBox(pr.b.id)
		case lifePaused:
			// A pause cuts every stream. The command is frozen with the
			// box and cannot be killed until it is resumed; the box is
			// not gone.
			return -1, providers.E(providers.TransportLost, op, fmt.Errorf("box was paused: %w", pr.streamErr)).WithBox(pr.b.id)
		}
		if !killed {
			if err := pr.kill(ctx); err != nil {
				pr.b.p.log.Warn("e2b: killing a command whose stream broke", "box", pr.b.id, "err", err)
			}
		}
		err := pr.streamErr
		if silent {
			err = fmt.Errorf("no sign of life from envd for %v: %w", 3*pr.b.p.keepalive, err)
		}
		return -1, providers.E(providers.TransportLost, op, err).WithBox(pr.b.id)
	case !pr.end.GetExited():
		// The wrapper itself was killed by a signal.
		if killed {
			return 128 + 9, nil
		}
		if pr.b.life(ctx) == lifeEnded {
			return -1, providers.Errorf(providers.Gone, op, "box ended while the command ran").WithBox(pr.b.id)
		}
		return -1, providers.Errorf(providers.Unknown, op, "the command's wrapper ended: %s", pr.end.GetStatus()).WithBox(pr.b.id)
	}
	code := int(pr.end.GetExitCode())
	for _, q := range []*providers.OutQueue{pr.stdout, pr.stderr} {
		if err := q.Wait(); err != nil {
			return code, providers.E(0, op, err).WithBox(pr.b.id)
		}
	}
	return code, nil
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
	return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh, /usr/bin/nice and setsid", pr.code).WithBox(pr.b.id)
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
	pr.killing.Store(true)
	err := pr.kill(ctx)
	pr.killOnce.Do(func() { close(pr.killedCh) })
	return err
}

// kill runs killScript in the box.
func (pr *process) kill(ctx context.Context) error {
	const op = "e2b.Kill"
	code, out, err := pr.b.run(ctx, []string{"/bin/sh", "-c", killScript, "boxfs-kill", strconv.FormatUint(uint64(pr.pid), 10), pr.token})
	return shell.KillExit(op, pr.b.id, code, out, err)
}

// run runs a fixed command of the provider's own (no wrapper, no stdin)
// bounded by ctx, and returns its exit code and combined output.
func (b *Box) run(ctx context.Context, argv []string) (int, []byte, error) {
	const op = "e2b.run"
	if err := b.gone(op); err != nil {
		return -1, nil, err
	}
	no := false
	start := &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: argv[0], Args: argv[1:]}, Stdin: &no}
	for n := 0; ; n++ {
		stream, _, err := b.startStream(ctx, start)
		if err != nil {
			if !retryable(err) || n+1 >= maxAttempts || b.away(ctx) {
				return -1, nil, b.envdError(ctx, op, err)
			}
			if berr := backoff(ctx, n, err); berr != nil {
				return -1, nil, providers.E(0, op, berr).WithBox(b.id)
			}
			continue
		}
		defer stream.Close()
		var out bytes.Buffer
		for stream.Receive() {
			switch e := stream.Msg().GetEvent().GetEvent().(type) {
			case *procpb.ProcessEvent_Data:
				out.Write(e.Data.GetStdout())
				out.Write(e.Data.GetStderr())
			case *procpb.ProcessEvent_End:
				if !e.End.GetExited() {
					return -1, out.Bytes(), providers.Errorf(providers.Unknown, op, "%s ended: %s", argv[0], e.End.GetStatus()).WithBox(b.id)
				}
				return int(e.End.GetExitCode()), out.Bytes(), nil
			}
		}
		err = stream.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return -1, out.Bytes(), b.envdError(ctx, op, err)
	}
}
