package modaltest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// sandbox is one sandbox and its task. Fields below mu are guarded by the
// server's mu.
type sandbox struct {
	id, taskID, appID, env string
	createdAt              float64 // seconds since the epoch
	def                    *pb.Sandbox
	dir                    string   // its temporary directory
	secretEnv              []string // NAME=value of its secrets
	done                   chan struct{}
	timer                  *time.Timer

	tags   map[string]string
	polls  int
	result *pb.GenericResult
	execs  map[string]*execution
}

func (sb *sandbox) finished() bool {
	select {
	case <-sb.done:
		return true
	default:
		return false
	}
}

// create makes a sandbox from a SandboxCreate.
func (s *Server) create(r *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	def := r.GetDefinition()
	tags, err := tagsOf(r.GetTags())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creates++
	switch {
	case s.creates <= s.opts.ExhaustedCreates:
		return nil, status.Error(codes.ResourceExhausted, "modaltest: no capacity (injected)")
	case def == nil:
		return nil, status.Error(codes.InvalidArgument, "no sandbox definition")
	case !s.knownApp(r.GetAppId()):
		return nil, status.Errorf(codes.NotFound, "app %s not found", r.GetAppId())
	case s.images[def.GetImageId()] == nil || s.images[def.GetImageId()].result == nil:
		return nil, status.Errorf(codes.FailedPrecondition, "image %s is not built", def.GetImageId())
	case def.GetWorkdir() != "" && !filepath.IsAbs(def.GetWorkdir()):
		return nil, status.Error(codes.InvalidArgument, "workdir must be an absolute path")
	case def.GetRuntime() != "" && def.GetRuntime() != "gvisor" && def.GetRuntime() != "vm":
		return nil, status.Errorf(codes.InvalidArgument, "runtime %q", def.GetRuntime())
	case def.GetRuntime() == "vm" && def.GetResources().GetGpuConfig().GetCount() > 0:
		return nil, status.Error(codes.InvalidArgument, "VM sandboxes have no GPUs")
	}
	sb := &sandbox{
		id: newID("sb-"), appID: r.GetAppId(), env: r.GetEnvironmentName(), def: def, tags: tags,
		createdAt: float64(time.Now().UnixNano()) / 1e9, polls: s.opts.TaskIDPolls,
		done: make(chan struct{}), execs: map[string]*execution{},
	}
	sb.taskID = "ta-" + sb.id[3:]
	for _, id := range def.GetSecretIds() {
		env, ok := s.secrets[id]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "secret %s not found", id)
		}
		for k, v := range env {
			sb.secretEnv = append(sb.secretEnv, k+"="+v)
		}
	}
	if sb.dir, err = os.MkdirTemp("", "modaltest-"+sb.id+"-"); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if d := s.images[def.GetImageId()].dir; d != "" {
		if err := copyDir(d, sb.dir); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	timeout := time.Duration(def.GetTimeoutSecs()) * time.Second
	if timeout == 0 {
		timeout = 300 * time.Second
	}
	sb.timer = time.AfterFunc(timeout, func() { s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, "") })
	s.sandboxes[sb.id] = sb
	s.tasks[sb.taskID] = sb
	return &pb.SandboxCreateResponse{SandboxId: sb.id}, nil
}

func (s *Server) knownApp(id string) bool {
	for _, a := range s.apps {
		if a == id {
			return true
		}
	}
	return false
}

// finish ends a sandbox with status (the first end wins) and kills every
// process that carries its id.
func (s *Server) finish(sb *sandbox, st pb.GenericResult_GenericStatus, why string) {
	s.mu.Lock()
	if sb.result == nil {
		sb.result = &pb.GenericResult{Status: st, Exception: why}
		sb.timer.Stop()
		close(sb.done)
	}
	s.mu.Unlock()
	killTagged(sb.id)
}

// killTagged kills every process of this machine whose environment holds
// MODAL_SANDBOX_ID=id, until none is left (a fork may race one pass).
func killTagged(id string) {
	for range 5 {
		if !signalTagged(id, syscall.SIGKILL) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signalTagged sends sig to every process of this machine whose
// environment holds MODAL_SANDBOX_ID=id, and reports whether there was any.
func signalTagged(id string, sig syscall.Signal) bool {
	marker := []byte("MODAL_SANDBOX_ID=" + id + "\x00")
	ents, _ := os.ReadDir("/proc")
	found := false
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, marker...)) {
			continue
		}
		found = true
		syscall.Kill(pid, sig)
	}
	return found
}

// info is the sandbox as SandboxList reports it.
func (sb *sandbox) info() *pb.SandboxInfo {
	in := &pb.SandboxInfo{
		Id: sb.id, CreatedAt: sb.createdAt, AppId: sb.appID, ImageId: sb.def.GetImageId(),
		TimeoutSecs: sb.def.GetTimeoutSecs(), Tunnels: sb.tunnels(),
		TaskInfo: &pb.TaskInfo{Id: sb.taskID, SandboxId: sb.id, StartedAt: sb.createdAt, Result: sb.result},
	}
	for k, v := range sb.tags {
		in.Tags = append(in.Tags, &pb.SandboxTag{TagName: k, TagValue: v})
	}
	return in
}

func (sb *sandbox) tunnels() []*pb.TunnelData {
	var out []*pb.TunnelData
	for _, p := range sb.def.GetOpenPorts().GetPorts() {
		t := &pb.TunnelData{Host: "127.0.0.1", Port: p.GetPort(), ContainerPort: p.GetPort()}
		if p.GetUnencrypted() {
			host, port := "127.0.0.1", p.GetPort()
			t.UnencryptedHost, t.UnencryptedPort = &host, &port
		}
		out = append(out, t)
	}
	return out
}
