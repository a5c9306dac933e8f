package kubernetes

import (
	"bytes"
	"context"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/probe"
)

// LifetimeVia names what enforces a box's lifetime, for Facts.
const LifetimeVia = "activeDeadlineSeconds"

// Facts measures the box with one command the first time it is asked and
// answers from that afterwards; what the pod says (start time, limits,
// whether its NetworkPolicy is still there) is read each time.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "kubernetes.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	pod, err := b.pod(ctx, op)
	if err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	cached := b.facts
	b.mu.Unlock()
	var f providers.Facts
	if cached != nil {
		f = *cached
	} else {
		code, out, err := b.run(ctx, probe.Argv(b.workspace, false), nil)
		if err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		if code != 0 {
			return providers.Facts{}, providers.Errorf(providers.Unknown, op, "facts script exited %d: %s", code, bytes.TrimSpace(out)).WithBox(b.id)
		}
		f = providers.Facts{}
		if err := probe.Read(out, &f); err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		f.Provider, f.ID = Name, b.id
		f.Isolation = providers.IsolationContainer
		f.OS = "linux"
		f.Workspace = b.workspace
		f.TmpDir = tmpDir
		f.LiveProcesses = providers.Bool(true)
		f.Stdin = providers.Bool(true)
		f.SecretsVia = "fd" // a real stdin, its end carried (WebSocket v5, SPDY)
		f.LifetimeVia = LifetimeVia
		b.mu.Lock()
		b.facts = &f
		b.mu.Unlock()
	}
	f.Ports = slices.Clone(b.ports)
	if f.Ports == nil {
		f.Ports = []int{}
	}
	if pod.Status.StartTime != nil {
		f.StartedAt = pod.Status.StartTime.Time
	}
	limits(pod, &f)
	if b.fenced {
		// Fenced only while the policy is there: fail closed.
		if _, err := b.p.getPolicy(ctx, b.id); err == nil {
			f.Network = providers.NetworkNone
		} else if f.Network == providers.NetworkNone {
			f.Network = ""
		}
	}
	return f, nil
}

// limits sets CPUs and MemoryMB from the container's limits where it has
// them: what the cluster enforces, rather than what the node has.
func limits(pod *corev1.Pod, f *providers.Facts) {
	for _, c := range pod.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			f.CPUs = math.Round(float64(q.MilliValue())) / 1000
		}
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			f.MemoryMB = int(q.Value() >> 20)
		}
	}
}
