package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/boxfs/boxfs/providers"
)

// Box is one pod.
type Box struct {
	p         *Provider
	id        string
	labels    map[string]string
	workspace string
	lifetime  int64 // seconds, the pod's activeDeadlineSeconds
	ports     []int
	fenced    bool // network none: a NetworkPolicy of its own fences it

	destroyed atomic.Bool

	mu    sync.Mutex
	facts *providers.Facts // measured once, on first use
	fwd   map[int]*forward // port forwards, by box port
}

var _ providers.Box = (*Box)(nil)

func (p *Provider) newBox(pod *corev1.Pod) *Box {
	b := &Box{p: p, id: pod.Name, workspace: pod.Annotations[annotWorkspace], fenced: pod.Annotations[annotNetPolicy] != ""}
	if b.workspace == "" {
		b.workspace = DefaultWorkspace
	}
	if err := json.Unmarshal([]byte(pod.Annotations[annotLabels]), &b.labels); err != nil || b.labels == nil {
		b.labels = maps.Clone(pod.Labels) // a pod whose annotation was edited away
		delete(b.labels, labelPod)
	}
	if pod.Spec.ActiveDeadlineSeconds != nil {
		b.lifetime = *pod.Spec.ActiveDeadlineSeconds
	}
	for _, s := range strings.Split(pod.Annotations[annotPorts], ",") {
		if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65536 {
			b.ports = append(b.ports, n)
		}
	}
	return b
}

// ID returns the pod's name.
func (b *Box) ID() string { return b.id }

// Labels returns the box's labels: the caller's and the provider's.
func (b *Box) Labels() map[string]string { return maps.Clone(b.labels) }

func (b *Box) gone(op string) error {
	if b.destroyed.Load() {
		return providers.Errorf(providers.Gone, op, "box was destroyed").WithBox(b.id)
	}
	return nil
}

// waitRunning waits until the pod's container runs, or the pod says why it
// cannot (an image the node cannot get, a refused spec, an end).
func (b *Box) waitRunning(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	d := 20 * time.Millisecond
	for {
		pod, err := b.p.getPod(ctx, b.id)
		if err != nil {
			return wrap("kubernetes.Create", b.id, err)
		}
		if running, err := startState(pod); running || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return providers.E(0, "kubernetes.Create", fmt.Errorf("%w: the pod is still %s", ctx.Err(), describe(pod))).WithBox(b.id)
		case <-time.After(d):
		}
		d = min(2*d, 500*time.Millisecond)
	}
}

// startState reads a starting pod: running, or a podError saying why it
// will not run, or neither yet.
func startState(pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false, wrap("kubernetes.Create", pod.Name, &podError{Reason: pod.Status.Reason, Message: "the pod ended before it ran: " + describe(pod)})
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		if cs.State.Running != nil {
			return true, nil
		}
		if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
			msg := w.Message
			if imageReasons[w.Reason] {
				msg += " (is image " + pod.Spec.Containers[0].Image + " on the node? scripts/k8s-up imports " + DefaultImage + ")"
			}
			return false, wrap("kubernetes.Create", pod.Name, &podError{Reason: w.Reason, Message: msg})
		}
		if t := cs.State.Terminated; t != nil {
			return false, wrap("kubernetes.Create", pod.Name, &podError{Reason: t.Reason, Message: fmt.Sprintf("the container ended at once (exit %d): %s", t.ExitCode, t.Message)})
		}
	}
	return false, nil
}

// Waiting reasons of a container that will not start without a change.
var (
	imageReasons = map[string]bool{"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true}
	fatalWaiting = map[string]bool{
		"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
		"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	}
)

// describe says where a pod is, for errors: its phase, conditions that
// are false and its container's waiting reason.
func describe(pod *corev1.Pod) string {
	parts := []string{string(pod.Status.Phase)}
	if pod.Status.Reason != "" {
		parts = append(parts, pod.Status.Reason+": "+pod.Status.Message)
	}
	for _, c := range pod.Status.Conditions {
		if c.Status == corev1.ConditionFalse && c.Reason != "" {
			parts = append(parts, string(c.Type)+"="+c.Reason+": "+c.Message)
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, "waiting: "+w.Reason+": "+w.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// Status reads the pod's state. A pod that no longer exists is Gone; one
// whose lifetime passed is ended.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "kubernetes.Status"
	if err := b.gone(op); err != nil {
		return providers.Status{}, err
	}
	pod, err := b.pod(ctx, op)
	if err != nil {
		return providers.Status{}, err
	}
	return statusOf(pod), nil
}

// pod reads the box's pod; a missing one is Gone.
func (b *Box) pod(ctx context.Context, op string) (*corev1.Pod, error) {
	pod, err := b.p.getPod(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return nil, e
	}
	return pod, nil
}

func statusOf(pod *corev1.Pod) providers.Status {
	st := providers.Status{}
	if pod.Status.StartTime != nil {
		st.StartedAt = pod.Status.StartTime.Time
	}
	var term *corev1.ContainerStateTerminated
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName {
			term = cs.State.Terminated
		}
	}
	switch {
	case pod.DeletionTimestamp != nil:
		st.State, st.Reason = providers.StateEnded, "deleted"
	case pod.Status.Phase == corev1.PodPending:
		st.State = providers.StateStarting
	case pod.Status.Phase == corev1.PodRunning && term == nil:
		st.State = providers.StateRunning
	case pod.Status.Phase == corev1.PodUnknown:
		st.State, st.Reason = providers.StateStopped, "the node does not report the pod"
	default: // Succeeded, Failed, or a terminated container
		st.State = providers.StateEnded
		switch {
		case pod.Status.Reason == reasonDeadline:
			st.Reason = "lifetime passed"
		case pod.Status.Reason != "":
			st.Reason = pod.Status.Reason + ": " + pod.Status.Message
		case term != nil && term.Reason == "OOMKilled":
			st.Reason = "out of memory"
		case term != nil:
			st.Reason = "exited with code " + strconv.Itoa(int(term.ExitCode))
		}
		if term != nil {
			st.EndedAt = term.FinishedAt.Time
		}
	}
	return st
}

// ending reports whether the box has ended or is ending: its pod is gone,
// being deleted or not running, or its lifetime is about to pass (then it
// waits, bounded, for the kubelet to record the end).
func (b *Box) ending(ctx context.Context) bool {
	d := 20 * time.Millisecond
	for {
		pod, err := b.p.getPod(ctx, b.id)
		if err != nil {
			return errorCode(err) == providers.NotFound
		}
		st := statusOf(pod)
		if st.State == providers.StateEnded {
			return true
		}
		if b.lifetime <= 0 || st.StartedAt.IsZero() || time.Until(st.StartedAt.Add(time.Duration(b.lifetime)*time.Second)) > 2*time.Second {
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

// Destroy deletes the pod (its processes are killed without a grace
// period) and its NetworkPolicy, and waits, bounded by ctx, until the pod
// is gone. A pod that is already gone is not an error.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "kubernetes.Destroy"
	b.closeForwards()
	if err := b.p.deletePod(ctx, b.id); err != nil && errorCode(err) != providers.NotFound {
		return wrap(op, b.id, err)
	}
	if b.fenced {
		if err := b.p.deletePolicy(ctx, b.id); err != nil && errorCode(err) != providers.NotFound {
			return wrap(op, b.id, err)
		}
	}
	b.destroyed.Store(true)
	d := 20 * time.Millisecond
	for {
		if _, err := b.p.getPod(ctx, b.id); err != nil {
			if errorCode(err) == providers.NotFound {
				return nil
			}
			return wrap(op, b.id, err)
		}
		select {
		case <-ctx.Done():
			return providers.E(0, op, fmt.Errorf("the pod is still there: %w", ctx.Err())).WithBox(b.id)
		case <-time.After(d):
		}
		d = min(2*d, 500*time.Millisecond)
	}
}
