package modaltest

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// basePath is the PATH of every exec: the sandbox's image has no other.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// execution is one exec of a sandbox: a process of this machine, its
// output kept from the lowest offset a reader may still ask for.
type execution struct {
	cmd     *exec.Cmd
	out     [2]*outBuf // stdout, stderr (nil: not piped)
	dropped [2]bool

	stdinMu  sync.Mutex
	stdin    io.WriteCloser // nil once closed
	stdinOff uint64
	killed   int32 // the code a kill of the fake's own (a timeout) gives

	done   chan struct{}
	code   int32
	signal int32
}

// outBuf is one output stream: bytes from base on, and a channel closed
// and replaced whenever bytes arrive or the stream ends.
type outBuf struct {
	mu      sync.Mutex
	base    uint64
	data    []byte
	closed  bool
	changed chan struct{}
}

func newOutBuf() *outBuf { return &outBuf{changed: make(chan struct{})} }

func (o *outBuf) fill(r io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		o.mu.Lock()
		o.data = append(o.data, buf[:n]...)
		if err != nil {
			o.closed = true
		}
		close(o.changed)
		o.changed = make(chan struct{})
		o.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// from returns the bytes from offset on (at most max), whether the stream
// has ended there, and a channel that says when there is more. With trim,
// bytes below offset are dropped: a reader asks for an offset it has
// received, so none asks for less again. (Bytes merely sent are kept: they
// may have been lost on the way.)
func (o *outBuf) from(offset uint64, max int, trim bool) ([]byte, bool, <-chan struct{}, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	end := o.base + uint64(len(o.data))
	if offset < o.base || offset > end {
		return nil, false, nil, status.Errorf(codes.OutOfRange, "offset %d is outside %d..%d", offset, o.base, end)
	}
	if trim {
		o.data = o.data[offset-o.base:]
		o.base = offset
	}
	rest := o.data[offset-o.base:]
	n := min(len(rest), max)
	return rest[:n:n], o.closed && n == len(rest), o.changed, nil
}

// routerService answers modal.task_command_router.TaskCommandRouter.
type routerService struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

// running returns the task's sandbox while it runs.
func (r *routerService) running(taskID string) (*sandbox, error) {
	r.s.mu.Lock()
	sb := r.s.tasks[taskID]
	r.s.mu.Unlock()
	if sb == nil || sb.finished() {
		return nil, status.Errorf(codes.NotFound, "task %s is not running", taskID)
	}
	return sb, nil
}

func (r *routerService) execution(taskID, execID string) (*sandbox, *execution, error) {
	sb, err := r.running(taskID)
	if err != nil {
		return nil, nil, err
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	ex := sb.execs[execID]
	if ex == nil {
		return nil, nil, status.Errorf(codes.NotFound, "exec %s not found", execID)
	}
	return sb, ex, nil
}

func (r *routerService) TaskExecStart(_ context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	sb, err := r.running(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCommandArgs()) == 0 || req.GetExecId() == "" {
		return nil, status.Error(codes.InvalidArgument, "no command or no exec id")
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if sb.execs[req.GetExecId()] != nil {
		return &pb.TaskExecStartResponse{}, nil // a retried start
	}
	env := []string{"PATH=" + basePath, "HOME=" + sb.dir, "MODAL_SANDBOX_ID=" + sb.id, "MODAL_TASK_ID=" + sb.taskID}
	env = append(env, sb.secretEnv...)
	for _, src := range req.GetSecretSources() {
		if id := src.GetSecretId(); id != "" {
			for k, v := range r.s.secrets[id] {
				env = append(env, k+"="+v)
			}
		}
		for k, v := range src.GetEnv().GetContents() {
			env = append(env, k+"="+v)
		}
	}
	dir := sb.dir
	for _, d := range []string{sb.def.GetWorkdir(), req.GetWorkdir()} {
		if fi, err := os.Stat(d); d != "" && err == nil && fi.IsDir() {
			dir = d
		}
	}
	ex, err := start(req, env, dir)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	sb.execs[req.GetExecId()] = ex
	if t := req.GetTimeoutSecs(); t > 0 {
		timer := time.AfterFunc(time.Duration(t)*time.Second, func() { ex.kill(124) })
		go func() { <-ex.done; timer.Stop() }()
	}
	return &pb.TaskExecStartResponse{}, nil
}

// start runs an exec's argv as a process group of its own.
func start(req *pb.TaskExecStartRequest, env []string, dir string) (*execution, error) {
	args := req.GetCommandArgs()
	ex := &execution{done: make(chan struct{})}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	var parentEnds []*os.File
	pipe := func(i int) (*os.File, error) {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		ex.out[i] = newOutBuf()
		go ex.out[i].fill(pr)
		parentEnds = append(parentEnds, pw)
		return pw, nil
	}
	if req.GetStdoutConfig() == pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE {
		if cmd.Stdout, err = pipe(0); err != nil {
			return nil, err
		}
	}
	switch req.GetStderrConfig() {
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE:
		if cmd.Stderr, err = pipe(1); err != nil {
			return nil, err
		}
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_STDOUT:
		cmd.Stderr = cmd.Stdout
	}
	startErr := cmd.Start()
	for _, f := range parentEnds {
		f.Close()
	}
	ex.cmd, ex.stdin = cmd, stdin
	if startErr != nil {
		// As a shell would: the program could not run.
		ex.code = 127
		stdin.Close()
		close(ex.done)
		return ex, nil
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				ex.signal = int32(ws.Signal())
			} else {
				ex.code = int32(ee.ExitCode())
			}
		}
		if k := ex.killedCode(); k != 0 {
			ex.code, ex.signal = k, 0
		}
		close(ex.done)
	}()
	return ex, nil
}

// kill ends the exec's process group, which then reports code.
func (ex *execution) kill(code int32) {
	ex.stdinMu.Lock()
	ex.killed = code
	ex.stdinMu.Unlock()
	if ex.cmd.Process != nil {
		syscall.Kill(-ex.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (ex *execution) killedCode() int32 {
	ex.stdinMu.Lock()
	defer ex.stdinMu.Unlock()
	return ex.killed
}

// TaskExecStdinWrite writes data at offset: bytes below what was already
// written are skipped (a retried write), a gap is refused, eof closes
// stdin.
func (r *routerService) TaskExecStdinWrite(_ context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	_, ex, err := r.execution(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	ex.stdinMu.Lock()
	defer ex.stdinMu.Unlock()
	if req.GetOffset() > ex.stdinOff {
		return nil, status.Errorf(codes.OutOfRange, "stdin offset %d is past the %d bytes written", req.GetOffset(), ex.stdinOff)
	}
	if data := req.GetData(); ex.stdin != nil && req.GetOffset()+uint64(len(data)) > ex.stdinOff {
		data = data[ex.stdinOff-req.GetOffset():]
		ex.stdin.Write(data) // a process that stopped reading loses its stdin, as with a pipe
		ex.stdinOff += uint64(len(data))
	}
	if req.GetEof() && ex.stdin != nil {
		ex.stdin.Close()
		ex.stdin = nil
	}
	return &pb.TaskExecStdinWriteResponse{}, nil
}

// TaskExecStdioRead streams one output of an exec from offset until it
// ends; with Options.DropStreamAfter it breaks once after that many bytes.
func (r *routerService) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, st grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	_, ex, err := r.execution(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	fd := 0
	if req.GetFileDescriptor() == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		fd = 1
	}
	buf := ex.out[fd]
	if buf == nil {
		return nil
	}
	offset, sent := req.GetOffset(), 0
	for {
		data, end, changed, err := buf.from(offset, 1<<20, sent == 0 && offset == req.GetOffset())
		if err != nil {
			return err
		}
		if len(data) > 0 {
			if drop := r.s.opts.DropStreamAfter; drop > 0 && sent+len(data) > drop && r.dropOnce(ex, fd) {
				data = data[:max(0, drop-sent)]
				if len(data) > 0 {
					st.Send(&pb.TaskExecStdioReadResponse{Data: data})
				}
				return status.Error(codes.Unavailable, "modaltest: stream dropped (injected)")
			}
			if err := st.Send(&pb.TaskExecStdioReadResponse{Data: data}); err != nil {
				return err
			}
			offset += uint64(len(data))
			sent += len(data)
			continue
		}
		if end {
			return nil
		}
		select {
		case <-changed:
		case <-st.Context().Done():
			return st.Context().Err()
		}
	}
}

func (r *routerService) dropOnce(ex *execution, fd int) bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if ex.dropped[fd] {
		return false
	}
	ex.dropped[fd] = true
	return true
}

// TaskExecWait answers the exec's exit, blocking until it comes or
// Options.WaitLimit passes (then DeadlineExceeded).
func (r *routerService) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	sb, ex, err := r.execution(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(r.s.opts.WaitLimit)
	defer t.Stop()
	select {
	case <-ex.done:
	case <-sb.done:
		return nil, status.Errorf(codes.NotFound, "task %s is not running", req.GetTaskId())
	case <-t.C:
		return nil, status.Error(codes.DeadlineExceeded, "modaltest: the exec is still running")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return exitOf(ex), nil
}

func exitOf(ex *execution) *pb.TaskExecWaitResponse {
	if ex.signal != 0 {
		return &pb.TaskExecWaitResponse{ExitStatus: &pb.TaskExecWaitResponse_Signal{Signal: ex.signal}}
	}
	return &pb.TaskExecWaitResponse{ExitStatus: &pb.TaskExecWaitResponse_Code{Code: ex.code}}
}

func (r *routerService) TaskExecPoll(_ context.Context, req *pb.TaskExecPollRequest) (*pb.TaskExecPollResponse, error) {
	_, ex, err := r.execution(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-ex.done:
		w := exitOf(ex)
		if s, ok := w.ExitStatus.(*pb.TaskExecWaitResponse_Signal); ok {
			return &pb.TaskExecPollResponse{ExitStatus: &pb.TaskExecPollResponse_Signal{Signal: s.Signal}}, nil
		}
		return &pb.TaskExecPollResponse{ExitStatus: &pb.TaskExecPollResponse_Code{Code: w.GetCode()}}, nil
	default:
		return &pb.TaskExecPollResponse{}, nil
	}
}
