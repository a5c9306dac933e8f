package e2b

import (
	"bytes"
	"context"
	"maps"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/probe"
)

// Box is one sandbox.
type Box struct {
	p         *Provider
	id        string
	labels    map[string]string
	workspace string // the spec's, or "" for envd's default directory
	envd      *envdClient

	destroyed atomic.Bool

	mu          sync.Mutex
	token       string   // envd's access token; read from the control plane when missing
	envdURL     *url.URL // envd's address, from the sandbox's domain; read with the token
	envdVersion string
	facts       *providers.Facts // measured once, on first use
}

var _ providers.Box = (*Box)(nil)

// newBox makes the box of sb. An answer that carries the envd token (a
// create's, a connect's, a sandbox's detail) also carries the sandbox's
// domain, or none for E2B's own; a listing carries neither, so a listed
// box reads both from the sandbox's detail when it is first used.
func (p *Provider) newBox(sb sandbox, labels map[string]string) *Box {
	b := &Box{p: p, id: sb.SandboxID, labels: maps.Clone(labels), workspace: labels[labelWorkspace], token: sb.EnvdAccessToken, envdVersion: sb.EnvdVersion}
	if b.token != "" {
		b.envdURL = p.envdURL(b.id, sb.Domain)
	}
	b.envd = p.newEnvd(b)
	return b
}

// ID returns the sandbox id.
func (b *Box) ID() string { return b.id }

// Labels returns the sandbox's metadata: the caller's labels and the
// provider's.
func (b *Box) Labels() map[string]string { return maps.Clone(b.labels) }

func (b *Box) gone(op string) error {
	if b.destroyed.Load() {
		return providers.Errorf(providers.Gone, op, "box was destroyed").WithBox(b.id)
	}
	return nil
}

// envdAccess returns envd's token and address for the sandbox, asking the
// control plane once when the box was listed (listings carry neither the
// token nor the sandbox's domain).
func (b *Box) envdAccess(ctx context.Context) (string, *url.URL, error) {
	b.mu.Lock()
	tok, u := b.token, b.envdURL
	b.mu.Unlock()
	if tok != "" && u != nil {
		return tok, u, nil
	}
	sb, err := b.p.api.get(ctx, b.id)
	if err != nil {
		return "", nil, err
	}
	u = b.p.envdURL(b.id, sb.Domain)
	b.mu.Lock()
	b.token, b.envdURL, b.envdVersion = sb.EnvdAccessToken, u, sb.EnvdVersion
	b.mu.Unlock()
	return sb.EnvdAccessToken, u, nil
}

// secrets are what a failed answer about the box must not repeat: the API
// key and the box's envd access token (see scrub).
func (b *Box) secrets() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return []string{b.p.api.key, b.token}
}

// life is what the control plane says of a sandbox whose envd did not
// answer.
type life int

const (
	lifeUnknown life = iota // the control plane could not be asked
	lifeRunning
	lifePaused // envd is away until a resume; the sandbox is not gone
	lifeEnded  // killed, or its timeout passed: E2B does not know it
)

// life asks the control plane whether the sandbox runs, is paused or has
// ended.
func (b *Box) life(ctx context.Context) life {
	if b.destroyed.Load() {
		return lifeEnded
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sb, err := b.p.api.get(ctx, b.id)
	switch {
	case errorCode(err) == providers.NotFound:
		return lifeEnded
	case err != nil:
		return lifeUnknown
	case sb.State == "paused":
		return lifePaused
	}
	return lifeRunning
}

// away reports whether envd cannot answer until the sandbox is resumed,
// if ever: it is paused or has ended, so a call is not worth repeating.
func (b *Box) away(ctx context.Context) bool {
	l := b.life(ctx)
	return l == lifePaused || l == lifeEnded
}

// Status reads the sandbox's state: running or paused; one E2B no longer
// knows (killed, or its timeout passed) is Gone.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "e2b.Status"
	if err := b.gone(op); err != nil {
		return providers.Status{}, err
	}
	sb, err := b.p.api.get(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return providers.Status{}, e
	}
	st := providers.Status{State: providers.StateRunning, StartedAt: sb.StartedAt}
	if sb.State == "paused" {
		st.State, st.Reason = providers.StateStopped, "paused"
	}
	return st, nil
}

// Destroy kills the sandbox and everything in it. A sandbox that is
// already gone is not an error.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "e2b.Destroy"
	if err := b.p.api.kill(ctx, b.id); err != nil {
		return wrap(op, b.id, err)
	}
	b.destroyed.Store(true)
	return nil
}

// SetLifetime makes the sandbox end d from now, earlier or later than it
// would: E2B replaces a sandbox's timeout on each call, so a box can be
// kept for longer than its spec's lifetime, up to the longest E2B grants
// from the sandbox's start (over that is Invalid, E2B's answer).
func (b *Box) SetLifetime(ctx context.Context, d time.Duration) error {
	const op = "e2b.SetLifetime"
	if err := b.gone(op); err != nil {
		return err
	}
	if d < time.Second {
		return providers.Errorf(providers.Invalid, op, "lifetime %v is under a second", d).WithBox(b.id)
	}
	body := map[string]int32{"timeout": int32(math.Ceil(d.Seconds()))}
	if _, err := b.p.api.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(b.id)+"/timeout", nil, body, nil); err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return e
	}
	return nil
}

// Facts measures the box with one command the first time it is asked, and
// reads its size and start from the control plane each time.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "e2b.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	sb, err := b.p.api.get(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return providers.Facts{}, e
	}
	b.mu.Lock()
	cached := b.facts
	b.mu.Unlock()
	var f providers.Facts
	if cached != nil {
		f = *cached
	} else {
		var out, errb bytes.Buffer
		proc, err := b.Exec(ctx, providers.ExecRequest{Argv: probe.Argv("", false), Stdout: &out, Stderr: &errb})
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
		kv := probe.Values(out.Bytes())
		f = providers.Facts{Workspace: kv["pwd"], TmpDir: kv["tmp"]}
		if err := probe.Read(out.Bytes(), &f); err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		f.Provider, f.ID = Name, b.id
		f.Isolation = providers.IsolationMicroVM
		f.OS = "linux"
		f.LiveProcesses = providers.Bool(true)
		f.Stdin = providers.Bool(b.closesStdin())
		if b.closesStdin() {
			f.SecretsVia = "fd" // a real stdin, closed at its end
		}
		f.Suspend = providers.SuspendMemory
		f.Network = providers.NetworkMode(b.labels[labelNetwork])
		if f.Network == "" {
			f.Network = providers.NetworkOpen // E2B's default
		}
		if b.workspace != "" {
			f.Workspace = b.workspace
		}
		b.mu.Lock()
		b.facts = &f
		b.mu.Unlock()
	}
	f.Ports = []int{}
	f.StartedAt = sb.StartedAt
	if sb.CPUCount > 0 {
		f.CPUs = float64(sb.CPUCount)
	}
	if sb.MemoryMB > 0 {
		f.MemoryMB = sb.MemoryMB
	}
	if sb.DiskSizeMB > 0 {
		f.DiskGB = float64(sb.DiskSizeMB) / 1024
	}
	return f, nil
}

// closesStdin reports whether envd can close a process's stdin (0.5.2 and
// later), which a stdin that ends needs.
func (b *Box) closesStdin() bool {
	b.mu.Lock()
	v := b.envdVersion
	b.mu.Unlock()
	return versionAtLeast(v, 0, 5, 2)
}

// versionAtLeast compares a "major.minor.patch" version.
func versionAtLeast(v string, want ...int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	for i, w := range want {
		if i >= len(parts) {
			return false
		}
		n, err := strconv.Atoi(strings.TrimFunc(parts[i], func(r rune) bool { return r < '0' || r > '9' }))
		if err != nil {
			return false
		}
		if n != w {
			return n > w
		}
	}
	return true
}
