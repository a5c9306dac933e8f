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

	"connectrpc.com/connect"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	procpb "github.com/boxfs/boxfs/providers/e2b/internal/envd/process"
	"github.com/boxfs/boxfs/providers/internal/wrapper"
)

// Bounds of what the host does for a command besides the shared group
// lifecycle (providers.GroupProcess).
const (
	killTimeout  = 30 * time.Second // the kill of a command whose stdin failed
	drainGrace   = 5 * time.Second  // for the end event once envd knows no such process
	maxInput     = 1 << 20          // the most stdin bytes one SendInput carries
	runOutputMax = 1 << 20          // what run keeps of its command's output: the box is untrusted
)

// Exec runs req.Argv in the box as its own process group, through envd's
// Start call and wrapper.Script. It returns once the command has started
// (its directory entered); a missing Dir is NotFound. Argv and Dir must
// not hold NUL (any other bytes of argv travel octal-escaped); env names
// must be variable names and values UTF-8 without NUL.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "e2b.Exec"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	if err := req.ValidateUTF8(); err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	if req.Stdin != nil && !b.closesStdin() {
		return nil, providers.Errorf(providers.Unsupported, op, "envd %s cannot close a command's stdin (0.5.2 and later can); rebuild the template", b.envdVersion).WithBox(b.id)
	}
	dir := req.WorkDir(b.workspace)
	// The environment travels in envd's own field rather than as the
	// wrapper's pairs: its values stay out of the box's process list.
	noEnv := req
	noEnv.Env = nil
	cmd := wrapper.NewCommand(noEnv, dir)
	stdin := req.Stdin != nil
	start := &procpb.StartRequest{
		Process: &procpb.ProcessConfig{Cmd: cmd.Argv[0], Args: cmd.Argv[1:], Envs: maps.Clone(req.Env)},
		Tag:     &cmd.Name,
		Stdin:   &stdin,
	}
	pr := &process{b: b, name: cmd.Name, streamDone: make(chan struct{})}
	if err := pr.open(ctx, start); err != nil {
		return nil, err
	}
	pr.GroupProcess = providers.NewGroupProcess(providers.GroupHooks{
		Op: op, Box: b.id, Dir: dir,
		KillGroup:   pr.kill,
		CloseStream: pr.cancel,
		Outcome:     pr.outcome,
		Ending:      func(ctx context.Context) bool { return b.life(ctx) == lifeEnded },
		NoStart: func(code int) error {
			return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh, /usr/bin/nice and setsid", code).WithBox(b.id)
		},
		Marker: wrapper.Marker(op, b.id),
	}, req.Stdout, req.Stderr)
	pr.out = wrapper.NewOutput(pr.GroupProcess, cmd.Name)
	go pr.read()
	if err := pr.Start(ctx); err != nil {
		return nil, err
	}
	if req.Stdin != nil {
		go pr.feed(req.Stdin)
	}
	return pr, nil
}

// process is one running command: envd's process stream and stdin around
// the shared group lifecycle.
type process struct {
	*providers.GroupProcess
	b    *Box
	name string // the wrapper's name of the command's group

	stream *connect.ServerStreamForClient[procpb.StartResponse]
	cancel context.CancelFunc // ends the stream
	pid    uint32             // envd's process, for stdin

	out        *wrapper.Output // the stream's output, marker and trailer taken out
	streamDone chan struct{}   // closed by read when the stream ended
	end        *procpb.ProcessEvent_EndEvent
	streamErr  error       // why the stream ended without an end event
	silent     atomic.Bool // the stream was cut for showing no sign of life

	killing atomic.Bool // a kill (Kill, ctx or a failed stdin) was started

	mu      sync.Mutex
	feedErr error // why stdin could not be delivered
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
			pr.stream, pr.cancel = stream, cancel
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

// read follows the stream: its output through the wrapper's Output, the
// end event recorded. A stream that shows no sign of life (no event, not
// even envd's keepalive) for three keepalive intervals is cut.
func (pr *process) read() {
	live := time.AfterFunc(3*pr.b.p.keepalive, func() {
		pr.silent.Store(true)
		pr.cancel()
	})
	for pr.stream.Receive() {
		live.Reset(3 * pr.b.p.keepalive)
		pr.handle(pr.stream.Msg().GetEvent())
	}
	live.Stop()
	if pr.end == nil {
		pr.streamErr = pr.b.scrubbed(pr.stream.Err())
		if pr.streamErr == nil {
			pr.streamErr = io.ErrUnexpectedEOF
		}
	}
	pr.stream.Close()
	pr.out.End()
	close(pr.streamDone)
	pr.StreamEnded()
}

func (pr *process) handle(ev *procpb.ProcessEvent) {
	switch e := ev.GetEvent().(type) {
	case *procpb.ProcessEvent_Data:
		switch out := e.Data.GetOutput().(type) {
		case *procpb.ProcessEvent_DataEvent_Stdout:
			pr.out.Stdout.Write(out.Stdout)
		case *procpb.ProcessEvent_DataEvent_Stderr:
			pr.out.Stderr.Write(out.Stderr)
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
	if kerr := pr.Kill(kctx); kerr != nil {
		pr.b.p.log.Warn("e2b: killing a command whose stdin failed", "box", pr.b.id, "err", kerr)
	}
}

// outcome is the command's exit code from envd's end event, or why there
// is none: stdin that failed, a stream that broke (the box ended or was
// paused, or the stream was lost), a wrapper killed by a signal, or a
// stream that lost the end of the output.
func (pr *process) outcome(ctx context.Context, killed bool) (int, error) {
	const op = "e2b.Exec"
	killed = killed || pr.killing.Load()
	pr.mu.Lock()
	feedErr := pr.feedErr
	pr.mu.Unlock()
	switch {
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
		if pr.silent.Load() {
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
	if !killed && code < 128 && pr.out.Started() && !pr.out.Whole() {
		// The wrapper exited by itself, after writing its trailer on
		// both: the stream lost the end of the output.
		return -1, providers.E(providers.TransportLost, op, errors.New("envd's stream ended with the command's exit status but without the end of its output")).WithBox(pr.b.id)
	}
	return code, nil
}

// kill runs the wrapper's kill script in the box on the command's group.
func (pr *process) kill(ctx context.Context) error {
	pr.killing.Store(true)
	code, out, err := pr.b.run(ctx, wrapper.KillArgv(pr.name))
	return shell.KillExit("e2b.Kill", pr.b.id, code, out, err)
}

// run runs a fixed command of the provider's own (no wrapper, no stdin)
// bounded by ctx, and returns its exit code and combined output, of
// which it keeps runOutputMax bytes.
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
		keep := func(p []byte) { out.Write(p[:min(len(p), max(runOutputMax-out.Len(), 0))]) }
		for stream.Receive() {
			switch e := stream.Msg().GetEvent().GetEvent().(type) {
			case *procpb.ProcessEvent_Data:
				keep(e.Data.GetStdout())
				keep(e.Data.GetStderr())
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
