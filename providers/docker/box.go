package docker

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/probe"
)

// Box is one container.
type Box struct {
	p         *Provider
	id        string
	labels    map[string]string
	workspace string

	destroyed atomic.Bool

	mu    sync.Mutex
	facts *providers.Facts // measured once, on first use
}

var _ providers.Box = (*Box)(nil)

func (p *Provider) newBox(id string, labels map[string]string) *Box {
	ws := labels[labelWorkspace]
	if ws == "" {
		ws = DefaultWorkspace
	}
	return &Box{p: p, id: id, labels: labels, workspace: ws}
}

// ID returns the container's id.
func (b *Box) ID() string { return b.id }

// Labels returns the container's labels: the caller's and the provider's.
func (b *Box) Labels() map[string]string {
	out := make(map[string]string, len(b.labels))
	for k, v := range b.labels {
		out[k] = v
	}
	return out
}

func (b *Box) gone(op string) error {
	if b.destroyed.Load() {
		return providers.Errorf(providers.Gone, op, "box was destroyed").WithBox(b.id)
	}
	return nil
}

// Status reads the container's state. A container that no longer exists is
// Gone; one whose sleep ended (its lifetime passed) is ended.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "docker.Status"
	if err := b.gone(op); err != nil {
		return providers.Status{}, err
	}
	c, err := b.p.cli.ContainerInspect(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return providers.Status{}, e
	}
	return statusOf(c.State), nil
}

func statusOf(s *container.State) providers.Status {
	if s == nil {
		return providers.Status{State: providers.StateEnded, Reason: "no state"}
	}
	st := providers.Status{StartedAt: parseTime(s.StartedAt)}
	switch {
	case s.Paused:
		st.State, st.Reason = providers.StateStopped, "paused"
	case suspended(s):
		st.State, st.Reason = providers.StateStopped, "suspended"
	case s.Restarting:
		st.State = providers.StateStarting
	case s.Running:
		st.State = providers.StateRunning
	case s.Status == container.StateCreated:
		st.State = providers.StateStarting
	default: // exited, dead, removing
		st.State = providers.StateEnded
		st.EndedAt = parseTime(s.FinishedAt)
		switch {
		case s.OOMKilled:
			st.Reason = "out of memory"
		case s.ExitCode == 0:
			st.Reason = "lifetime passed"
		case s.ExitCode > 128:
			st.Reason = "killed by signal " + strconv.Itoa(s.ExitCode-128)
		default:
			st.Reason = "exited with code " + strconv.Itoa(s.ExitCode)
		}
		if s.Error != "" {
			st.Reason += ": " + s.Error
		}
	}
	return st
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// ending reports whether the box has ended or is ending: its container is
// gone or not running, or its lifetime has passed (then it waits, bounded,
// for Docker to record the end, which comes a moment after the box's
// processes were killed).
func (b *Box) ending(ctx context.Context) bool {
	d := 20 * time.Millisecond
	for {
		c, err := b.p.cli.ContainerInspect(ctx, b.id)
		if err != nil {
			return errorCode(err) == providers.NotFound
		}
		if c.State == nil || !c.State.Running {
			return true
		}
		end, ok := b.deadline()
		if !ok || time.Until(end) > time.Second {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
		d = min(2*d, 500*time.Millisecond)
	}
}

// Destroy removes the container and everything running in it. A container
// that is already gone is not an error.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "docker.Destroy"
	err := b.p.cli.ContainerRemove(ctx, b.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && errorCode(err) != providers.NotFound {
		return wrap(op, b.id, err)
	}
	b.destroyed.Store(true)
	return nil
}

// Facts measures the box with one command the first time it is asked, and
// answers from that afterwards (StartedAt is read from Docker each time).
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "docker.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	cached := b.facts
	b.mu.Unlock()
	var f providers.Facts
	if cached != nil {
		f = *cached
	} else {
		var out, errb bytes.Buffer
		proc, err := b.Exec(ctx, providers.ExecRequest{Argv: probe.Argv(b.workspace, false), Dir: "/", Stdout: &out, Stderr: &errb})
		if err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		code, err := proc.Wait()
		if err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		if code != 0 {
			return providers.Facts{}, providers.Errorf(providers.Unknown, op, "facts script exited %d: %s", code, strings.TrimSpace(errb.String())).WithBox(b.id)
		}
		f = providers.Facts{}
		if err := probe.Read(out.Bytes(), &f); err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		f.Provider, f.ID = Name, b.id
		f.Isolation = providers.IsolationContainer
		f.OS = "linux"
		f.Workspace = b.workspace
		f.TmpDir = tmpDir
		f.LiveProcesses = providers.Bool(true)
		f.Stdin = providers.Bool(true)
		f.SecretsVia = "fd"
		f.Suspend = providers.SuspendFilesystem
		b.mu.Lock()
		b.facts = &f
		b.mu.Unlock()
	}
	f.Ports = []int{} // no ports are published: the daemon has no bridge
	c, err := b.p.cli.ContainerInspect(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return providers.Facts{}, e
	}
	if c.State != nil {
		f.StartedAt = parseTime(c.State.StartedAt)
	}
	return f, nil
}
