package modal

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// Box is one sandbox.
type Box struct {
	p         *Provider
	id        string
	workspace string
	isolation providers.Isolation
	created   *plan // the plan it was made from; nil for an attached box

	destroyed atomic.Bool

	mu     sync.Mutex
	labels map[string]string
	taskID string
	facts  *providers.Facts // measured in the box, once
}

var (
	_ providers.Box        = (*Box)(nil)
	_ providers.Endpointer = (*Box)(nil)
)

func (p *Provider) newBox(id string, tags map[string]string) *Box {
	b := &Box{p: p, id: id, labels: tags, workspace: first(tags[tagWorkspace], DefaultWorkspace)}
	b.isolation = providers.Isolation(first(tags[tagIsolation], string(providers.IsolationGVisor)))
	if _, gone := p.destroyed.Load(id); gone {
		b.destroyed.Store(true)
	}
	return b
}

// ID returns the sandbox id.
func (b *Box) ID() string { return b.id }

// Labels returns the sandbox's tags: the caller's labels and the provider's.
func (b *Box) Labels() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.labels)
}

func (b *Box) gone(op string) error {
	if b.destroyed.Load() {
		return providers.Errorf(providers.Gone, op, "box was destroyed").WithBox(b.id)
	}
	return nil
}

// task returns the sandbox's task id, polling while Modal is still
// scheduling it. A sandbox that finished first is Gone; one not scheduled
// within the provider's bound is Refused.
func (b *Box) task(ctx context.Context) (string, error) {
	const op = "modal.task"
	b.mu.Lock()
	id := b.taskID
	b.mu.Unlock()
	if id != "" {
		return id, nil
	}
	deadline := time.Now().Add(b.p.bound)
	d := b.p.pollBase
	for {
		resp, err := b.p.c.api.SandboxGetTaskId(ctx, &pb.SandboxGetTaskIdRequest{SandboxId: b.id})
		switch {
		case err != nil && status.Code(err) == codes.NotFound:
			return "", providers.E(providers.Gone, op, err).WithBox(b.id)
		case err != nil:
			return "", wrap(op, b.id, err)
		case resp.GetTaskId() != "":
			b.mu.Lock()
			b.taskID = resp.GetTaskId()
			b.mu.Unlock()
			return resp.GetTaskId(), nil
		case resp.TaskResult != nil:
			return "", providers.Errorf(providers.Gone, op, "sandbox has finished (%s)", endReason(resp.GetTaskResult())).WithBox(b.id)
		case time.Now().After(deadline):
			return "", providers.Errorf(providers.Refused, op, "sandbox not scheduled within %v (no capacity?)", b.p.bound).WithBox(b.id)
		}
		if err := sleep(ctx, d); err != nil {
			return "", providers.E(0, op, err).WithBox(b.id)
		}
		d = min(2*d, 500*time.Millisecond)
	}
}

// router returns the task's command router, connecting the first time
// any box of this sandbox needs it: one connection per sandbox, shared by
// every Box value of it the provider hands out.
func (b *Box) router(ctx context.Context) (*router, string, error) {
	taskID, err := b.task(ctx)
	if err != nil {
		return nil, "", err
	}
	p := b.p
	p.rtMu.Lock()
	defer p.rtMu.Unlock()
	rt := p.routers[b.id]
	if rt == nil {
		if rt, err = newRouter(ctx, p.c, taskID); err != nil {
			return nil, "", b.classify(ctx, "modal.router", err)
		}
		p.routers[b.id] = rt
	}
	return rt, taskID, nil
}

// classify is the error of a call about this box: a failure that leaves
// the sandbox ended (or unknown to Modal) is Gone.
func (b *Box) classify(ctx context.Context, op string, err error) *providers.Error {
	e := wrap(op, b.id, err)
	switch e.Code {
	case providers.Aborted, providers.Timeout, providers.Invalid, providers.Auth:
		return e
	}
	if b.ended(ctx) {
		e.Code = providers.Gone
	}
	return e
}

// ended reports whether Modal says the sandbox has ended or does not know it.
func (b *Box) ended(ctx context.Context) bool {
	if b.destroyed.Load() {
		return true
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	w, err := b.p.c.api.SandboxWait(cctx, &pb.SandboxWaitRequest{SandboxId: b.id})
	if err != nil {
		return status.Code(err) == codes.NotFound
	}
	return w.GetResult().GetStatus() != pb.GenericResult_GENERIC_STATUS_UNSPECIFIED
}

// Status asks Modal whether the sandbox runs (SandboxWait with no wait). A
// sandbox that was terminated, or that Modal no longer knows, is Gone; one
// that ended otherwise (its lifetime passed, it failed) is ended.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "modal.Status"
	if err := b.gone(op); err != nil {
		return providers.Status{}, err
	}
	w, err := b.p.c.api.SandboxWait(ctx, &pb.SandboxWaitRequest{SandboxId: b.id})
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return providers.Status{}, e
	}
	st := providers.Status{State: providers.StateRunning, StartedAt: b.startedAt()}
	switch r := w.GetResult(); r.GetStatus() {
	case pb.GenericResult_GENERIC_STATUS_UNSPECIFIED:
	case pb.GenericResult_GENERIC_STATUS_TERMINATED:
		return providers.Status{}, providers.Errorf(providers.Gone, op, "sandbox was terminated").WithBox(b.id)
	default:
		st.State, st.Reason = providers.StateEnded, endReason(r)
	}
	return st, nil
}

func (b *Box) startedAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, _ := time.Parse(time.RFC3339Nano, b.labels[tagCreated])
	return t
}

// endReason says in words how a sandbox ended.
func endReason(r *pb.GenericResult) string {
	var s string
	switch r.GetStatus() {
	case pb.GenericResult_GENERIC_STATUS_TIMEOUT:
		s = "lifetime passed"
	case pb.GenericResult_GENERIC_STATUS_IDLE_TIMEOUT:
		s = "idle timeout"
	case pb.GenericResult_GENERIC_STATUS_TERMINATED:
		s = "terminated"
	case pb.GenericResult_GENERIC_STATUS_SUCCESS:
		s = "exited with code 0"
	case pb.GenericResult_GENERIC_STATUS_FAILURE:
		s = "exited with code " + strconv.Itoa(int(r.GetExitcode()))
	default:
		s = strings.ToLower(strings.TrimPrefix(r.GetStatus().String(), "GENERIC_STATUS_"))
	}
	if r.GetException() != "" {
		s += ": " + r.GetException()
	}
	return s
}

// Destroy terminates the sandbox and everything running in it. A sandbox
// that has already ended is not an error.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "modal.Destroy"
	if err := b.p.terminate(ctx, b.id); err != nil {
		return wrap(op, b.id, err)
	}
	b.destroyed.Store(true)
	b.p.forgetDef(b.id)
	b.p.rtMu.Lock()
	if rt := b.p.routers[b.id]; rt != nil {
		rt.close()
		delete(b.p.routers, b.id)
	}
	b.p.rtMu.Unlock()
	return nil
}

// Endpoint returns the address of a tunnel to port: tls://host:port for an
// encrypted tunnel (Modal terminates TLS), tcp://host:port for a raw one.
// A port the spec did not ask for is NotFound; tunnels not up yet are
// Unavailable.
func (b *Box) Endpoint(ctx context.Context, port int) (string, error) {
	const op = "modal.Endpoint"
	if err := b.gone(op); err != nil {
		return "", err
	}
	resp, err := b.p.c.api.SandboxGetTunnels(ctx, &pb.SandboxGetTunnelsRequest{SandboxId: b.id, Timeout: 10})
	if err != nil {
		return "", b.classify(ctx, op, err)
	}
	if resp.GetResult().GetStatus() == pb.GenericResult_GENERIC_STATUS_TIMEOUT {
		return "", providers.Errorf(providers.Unavailable, op, "the sandbox's tunnels are not up yet").WithBox(b.id)
	}
	for _, t := range resp.GetTunnels() {
		if int(t.GetContainerPort()) != port {
			continue
		}
		if t.UnencryptedHost != nil {
			return "tcp://" + net.JoinHostPort(t.GetUnencryptedHost(), strconv.Itoa(int(t.GetUnencryptedPort()))), nil
		}
		return "tls://" + net.JoinHostPort(t.GetHost(), strconv.Itoa(int(t.GetPort()))), nil
	}
	return "", providers.Errorf(providers.NotFound, op, "no tunnel to port %d (the spec's ports have one each)", port).WithBox(b.id)
}

// encodeHardware writes the measured hardware facts for the hardware tag.
func encodeHardware(f providers.Facts) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "cpus=%g;memoryMb=%d;diskGb=%g;arch=%s;shell=%s", f.CPUs, f.MemoryMB, f.DiskGB, f.Arch, f.Shell)
	if f.GPU != "" {
		fmt.Fprintf(&b, ";gpu=%s", strings.ReplaceAll(f.GPU, ";", ","))
	}
	if f.FUSE != nil {
		fmt.Fprintf(&b, ";fuse=%t", *f.FUSE)
	}
	return b.String()
}

// decodeHardware reads the hardware tag into f.
func decodeHardware(s string, f *providers.Facts) {
	for _, kv := range strings.Split(s, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "cpus":
			f.CPUs, _ = strconv.ParseFloat(v, 64)
		case "memoryMb":
			f.MemoryMB, _ = strconv.Atoi(v)
		case "diskGb":
			f.DiskGB, _ = strconv.ParseFloat(v, 64)
		case "arch":
			f.Arch = v
		case "shell":
			f.Shell = v
		case "gpu":
			f.GPU = v
		case "fuse":
			f.FUSE = providers.Bool(v == "true")
		}
	}
}
