package e2btest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/boxfs/boxfs/providers/e2b/internal/envd/process"
)

// The sizes envd reads output in, and how long the fake waits, once a
// process exited, for the rest of its output before it drops it.
const (
	chunkSize  = 32 << 10
	drainGrace = time.Second
	basePath   = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// oomWrapper is envd's wrapper around every command: it lowers the
// process's priority in the OOM killer's eyes and execs the command
// through nice, so a template needs /bin/sh and /usr/bin/nice.
const oomWrapper = `echo 100 > /proc/$$/oom_score_adj && exec /usr/bin/nice -n 0 "${@}"`

type ctxKey int

const (
	sandboxKey ctxKey = iota
	cutKey
	keepKey
)

func withSandbox(ctx context.Context, sb *sandbox) context.Context {
	return context.WithValue(ctx, sandboxKey, sb)
}

func sandboxFrom(ctx context.Context) *sandbox { sb, _ := ctx.Value(sandboxKey).(*sandbox); return sb }

func withCut(ctx context.Context, n int) context.Context { return context.WithValue(ctx, cutKey, n) }

// withKeep makes a stream drop the output events after the first n.
func withKeep(ctx context.Context, n int) context.Context { return context.WithValue(ctx, keepKey, n) }

// cutter severs a stream's connection after the messages its fault allows.
type cutter struct{ left int }

func newCutter(ctx context.Context) *cutter { n, _ := ctx.Value(cutKey).(int); return &cutter{left: n} }

// sent counts one message; past the fault's count it aborts the handler,
// which makes net/http drop the connection without an end of stream.
func (c *cutter) sent() {
	if c.left <= 0 {
		return
	}
	if c.left--; c.left == 0 {
		panic(http.ErrAbortHandler)
	}
}

// fanout hands each value to every subscriber, blocking on each as envd's
// multiplexer does; with no subscriber a value is dropped.
type fanout[T any] struct {
	mu     sync.Mutex
	subs   map[*subscriber[T]]struct{}
	closed bool
}

type subscriber[T any] struct {
	ch   chan T
	done chan struct{}
	once sync.Once
}

func newFanout[T any]() *fanout[T] { return &fanout[T]{subs: map[*subscriber[T]]struct{}{}} }

func (f *fanout[T]) subscribe() *subscriber[T] {
	s := &subscriber[T]{ch: make(chan T), done: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		close(s.ch)
		return s
	}
	f.subs[s] = struct{}{}
	return s
}

func (f *fanout[T]) unsubscribe(s *subscriber[T]) {
	s.once.Do(func() { close(s.done) })
	f.mu.Lock()
	delete(f.subs, s)
	f.mu.Unlock()
}

func (f *fanout[T]) publish(v T) {
	f.mu.Lock()
	subs := make([]*subscriber[T], 0, len(f.subs))
	for s := range f.subs {
		subs = append(subs, s)
	}
	f.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- v:
		case <-s.done:
		}
	}
}

func (f *fanout[T]) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for s := range f.subs {
		close(s.ch)
	}
	f.subs = nil
}

// proc is one process a sandbox runs.
type proc struct {
	sb   *sandbox
	pid  uint32
	tag  *string
	cfg  *process.ProcessConfig
	cmd  *exec.Cmd
	data *fanout[*process.ProcessEvent_DataEvent]

	stdinMu sync.Mutex
	stdin   *os.File // nil: disabled or closed

	done chan struct{} // closed once end is set
	end  *process.ProcessEvent_EndEvent
}

type processService struct{ s *Server }

// authUser reads the user a request acts as (Basic auth with an empty
// password); envd's default user is "user".
func authUser(h http.Header) (string, error) {
	a := h.Get("Authorization")
	if a == "" {
		return "user", nil
	}
	enc, ok := strings.CutPrefix(a, "Basic ")
	raw, err := base64.StdEncoding.DecodeString(enc)
	name, _, _ := strings.Cut(string(raw), ":")
	if !ok || err != nil || name != "root" && name != "user" {
		return "", connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid user %q", name))
	}
	return name, nil
}

// resolve expands a path as envd does: "~" is HOME, a relative path is
// under HOME.
func (sb *sandbox) resolve(p string) string {
	switch {
	case p == "" || p == "~":
		return sb.home
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(sb.home, p[2:])
	case !filepath.IsAbs(p):
		return filepath.Join(sb.home, p)
	}
	return filepath.Clean(p)
}

// start starts a process as envd's handler does.
func (sb *sandbox) start(req *process.StartRequest, user string, timeout time.Duration) (*proc, *subscriber[*process.ProcessEvent_DataEvent], error) {
	if req.Pty != nil {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the fake has no pty"))
	}
	cfg := req.GetProcess()
	dir := sb.home
	if cfg.Cwd != nil {
		dir = sb.resolve(cfg.GetCwd())
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil, nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist", dir))
		}
	}
	env := []string{"PATH=" + basePath, "HOME=" + sb.home, "USER=" + user, "LOGNAME=" + user}
	for k, v := range sb.env {
		env = append(env, k+"="+v)
	}
	for k, v := range cfg.GetEnvs() {
		env = append(env, k+"="+v)
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", oomWrapper, "--", cfg.GetCmd()}, cfg.GetArgs()...)...)
	cmd.Dir, cmd.Env = dir, env
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeInternal, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeInternal, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	p := &proc{sb: sb, tag: req.Tag, cfg: cfg, cmd: cmd, data: newFanout[*process.ProcessEvent_DataEvent](), done: make(chan struct{})}
	var inR *os.File
	if req.Stdin == nil || req.GetStdin() {
		if inR, p.stdin, err = os.Pipe(); err != nil {
			return nil, nil, connect.NewError(connect.CodeInternal, err)
		}
		cmd.Stdin = inR
	}
	sub := p.data.subscribe()
	sb.mu.Lock()
	if sb.ended {
		sb.mu.Unlock()
		return nil, nil, connect.NewError(connect.CodeUnavailable, errors.New("sandbox ended"))
	}
	err = cmd.Start()
	if err == nil {
		p.pid = uint32(cmd.Process.Pid)
		sb.procs[p.pid] = p
	}
	sb.mu.Unlock()
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("error starting process '%s': %w", cfg.GetCmd(), err))
	}
	go p.run(outR, errR, timeout)
	return p, sub, nil
}

// run pumps the process's output and records its end.
func (p *proc) run(outR, errR *os.File, timeout time.Duration) {
	var wg sync.WaitGroup
	pump := func(f *os.File, mk func([]byte) *process.ProcessEvent_DataEvent) {
		defer wg.Done()
		for {
			buf := make([]byte, chunkSize)
			n, err := f.Read(buf)
			if n > 0 {
				p.data.publish(mk(buf[:n]))
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pump(outR, func(b []byte) *process.ProcessEvent_DataEvent {
		return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: b}}
	})
	go pump(errR, func(b []byte) *process.ProcessEvent_DataEvent {
		return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: b}}
	})
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { p.cmd.Process.Kill() })
	}
	err := p.cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		// A process the command left behind holds the output open: what it
		// writes from here on is lost, as envd closes the pipes at exit.
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	p.data.close()
	st := p.cmd.ProcessState
	end := &process.ProcessEvent_EndEvent{ExitCode: int32(st.ExitCode()), Exited: st.Exited(), Status: st.String()}
	if err != nil {
		msg := err.Error()
		end.Error = &msg
	}
	p.stdinMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.stdinMu.Unlock()
	p.sb.mu.Lock()
	// The pid may be another process's by now (reaped above, reused).
	if p.sb.procs[p.pid] == p {
		delete(p.sb.procs, p.pid)
	}
	p.sb.mu.Unlock()
	p.end = end
	close(p.done)
}

// keepalive reads the Keepalive-Ping-Interval header (seconds).
func keepalive(h http.Header) <-chan time.Time {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return nil
	}
	return time.Tick(time.Duration(n) * time.Second)
}

// follow sends a process's events on a stream until it ends (nil), the
// client goes (its error) or the sandbox ends (the connection is cut).
func (p *proc) follow(ctx context.Context, h http.Header, sub *subscriber[*process.ProcessEvent_DataEvent], send func(*process.ProcessEvent) error) error {
	defer p.data.unsubscribe(sub)
	cut := newCutter(ctx)
	keep, _ := ctx.Value(keepKey).(int)
	tick := keepalive(h)
	out := func(ev *process.ProcessEvent) error {
		if err := send(ev); err != nil {
			return err
		}
		cut.sent()
		return nil
	}
	if err := out(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.sb.goneCh():
			panic(http.ErrAbortHandler)
		case <-tick:
			if err := out(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case d, ok := <-sub.ch:
			if !ok {
				select {
				case <-p.done:
				case <-p.sb.goneCh():
					panic(http.ErrAbortHandler)
				}
				return out(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: p.end}})
			}
			if keep > 0 {
				if keep--; keep == 0 {
					keep = -1 // from here on, output is dropped
				}
			} else if keep < 0 {
				continue
			}
			if err := out(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}); err != nil {
				return err
			}
		}
	}
}

func (ps *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	sb := sandboxFrom(ctx)
	user, err := authUser(req.Header())
	if err != nil {
		return err
	}
	var timeout time.Duration
	if v := req.Header().Get("Connect-Timeout-Ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	p, sub, err := sb.start(req.Msg, user, timeout)
	if err != nil {
		return err
	}
	// The process outlives this stream: a client that goes only stops
	// listening.
	return p.follow(ctx, req.Header(), sub, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
}

func (ps *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	p, err := sandboxFrom(ctx).find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.data.subscribe()
	return p.follow(ctx, req.Header(), sub, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

// find is envd's getProcess: by pid or by tag, NotFound once ended.
func (sb *sandbox) find(sel *process.ProcessSelector) (*proc, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		if p := sb.procs[s.Pid]; p != nil {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", s.Pid))
	case *process.ProcessSelector_Tag:
		for _, p := range sb.procs {
			if p.tag != nil && *p.tag == s.Tag {
				return p, nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", s.Tag))
	}
	return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("invalid input type %T", sel))
}

func (ps *processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	sb := sandboxFrom(ctx)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	out := &process.ListResponse{}
	for _, p := range sb.procs {
		out.Processes = append(out.Processes, &process.ProcessInfo{Config: p.cfg, Pid: p.pid, Tag: p.tag})
	}
	return connect.NewResponse(out), nil
}

func (ps *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	if _, err := sandboxFrom(ctx).find(req.Msg.GetProcess()); err != nil {
		return nil, err
	}
	return nil, connect.NewError(connect.CodeInternal, errors.New("error resizing tty: tty not assigned to process"))
}

// write is envd's handleInput.
func (p *proc) write(in *process.ProcessInput) error {
	data, ok := in.GetInput().(*process.ProcessInput_Stdin)
	if !ok {
		return connect.NewError(connect.CodeInternal, errors.New("error writing to tty: tty not assigned to process"))
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return connect.NewError(connect.CodeInternal, errors.New("error writing to stdin: stdin not enabled or closed"))
	}
	if _, err := p.stdin.Write(data.Stdin); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("error writing to stdin of process '%d': %w", p.pid, err))
	}
	return nil
}

func (ps *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	p, err := sandboxFrom(ctx).find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (ps *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	sb := sandboxFrom(ctx)
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			found, err := sb.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *process.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("data before start"))
			}
			if err := p.write(ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *process.StreamInputRequest_Keepalive:
		default:
			return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("invalid event type %T", ev))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, connect.NewError(connect.CodeUnknown, fmt.Errorf("error streaming input: %w", err))
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (ps *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	p, err := sandboxFrom(ctx).find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	p.stdinMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.stdinMu.Unlock()
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (ps *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	p, err := sandboxFrom(ctx).find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case process.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("invalid signal: %s", req.Msg.GetSignal()))
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error sending signal: %w", err))
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}
