package e2b_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
	"github.com/boxfs/boxfs/providers/providertest"
)

// newProvider opens the provider on the fake srv.
func newProvider(t *testing.T, srv *e2btest.Server, opts map[string]string) *e2b.Provider {
	t.Helper()
	o := map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}
	for k, v := range opts {
		o[k] = v
	}
	p, err := e2b.New(providers.Config{Options: o})
	require.NoError(t, err)
	return p
}

// harness is the conformance harness for the provider on the fake srv.
// The fake's template "base" has 2 CPUs and 512 MB.
func harness(t *testing.T, srv *e2btest.Server) providertest.Harness {
	return providertest.Harness{
		Provider:    newProvider(t, srv, nil),
		Reopen:      func(t *testing.T) providers.Provider { return newProvider(t, srv, nil) },
		Unsupported: []string{"region", "gpu", "ports", "mounts", "user", "capabilities"},
		Refused: map[string]providers.Spec{
			"isolation=container": {Isolation: providers.IsolationContainer},
			"cpus=3":              {CPUs: 3},
			"memoryMb=1024":       {MemoryMB: 1024},
			"lifetime=25h":        {Lifetime: 25 * time.Hour},
		},
		Lifetime:      3 * time.Second,
		LifetimeSlack: 20 * time.Second,
		LargeOutput:   16 << 20,
	}
}

func TestConformance(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	providertest.Run(t, harness(t, srv))
	assert.Empty(t, srv.SandboxIDs(), "sandboxes left on the fake")
}

// TestConformanceFaults runs the suite with every seventh request to the
// control plane or envd answered busy before it is handled: 429 with
// Retry-After, 502 (E2B's proxy) and 503. A snapshot, which boxfs sends
// again only after a 429, gets 429s.
func TestConformanceFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite with faults is long; -short skips it")
	}
	srv := e2btest.New(e2btest.Options{Latency: time.Millisecond})
	t.Cleanup(srv.Close)
	var k atomic.Int64
	srv.SetFault(func(r *http.Request, n int) e2btest.Fault {
		if n%7 != 0 {
			return e2btest.Fault{}
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/snapshots") {
			return e2btest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "0"}
		}
		switch k.Add(1) % 3 {
		case 0:
			return e2btest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "0"}
		case 1:
			return e2btest.Fault{Status: http.StatusBadGateway}
		}
		return e2btest.Fault{Status: http.StatusServiceUnavailable}
	})
	providertest.Run(t, harness(t, srv))
	srv.SetFault(nil)
	answers := map[int]int{}
	for _, r := range srv.Requests() {
		answers[r.Status]++
	}
	t.Logf("%d requests, answered: %v", len(srv.Requests()), answers)
	assert.Positive(t, answers[http.StatusTooManyRequests])
	assert.Positive(t, answers[http.StatusServiceUnavailable])
	assert.Empty(t, srv.SandboxIDs(), "sandboxes left on the fake")
}

func TestAuth(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	t.Setenv("E2B_API_KEY", "")
	_, err := e2b.New(providers.Config{Options: map[string]string{"api_url": srv.APIURL()}})
	assert.True(t, providers.IsCode(err, providers.Auth), "New without a key: %v", err)

	p := newProvider(t, srv, map[string]string{"api_key": "e2b_wrong"})
	_, err = p.Create(ctx(t), providers.Spec{})
	assert.True(t, providers.IsCode(err, providers.Auth), "Create with a wrong key: %v", err)
	_, err = p.List(ctx(t), nil)
	assert.True(t, providers.IsCode(err, providers.Auth), "List with a wrong key: %v", err)

	_, err = e2b.New(providers.Config{Options: map[string]string{"api_key": "k", "api_url": "http://example.com"}})
	assert.True(t, providers.IsCode(err, providers.Invalid), "a plain http URL off this machine: %v", err)
}

// TestRateLimitGivesUp checks that a control plane that stays busy ends in
// Unavailable, bounded, rather than in an endless retry.
func TestRateLimitGivesUp(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	srv.SetFault(func(r *http.Request, n int) e2btest.Fault {
		return e2btest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "0"}
	})
	p := newProvider(t, srv, nil)
	_, err := p.Create(ctx(t), providers.Spec{})
	assert.True(t, providers.IsCode(err, providers.Unavailable), "Create against a rate limit: %v", err)
	srv.SetFault(nil)
	assert.Empty(t, srv.SandboxIDs())
}

func TestMissingTemplate(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	_, err := newProvider(t, srv, nil).Create(ctx(t), providers.Spec{Image: "boxfs-no-such-template"})
	assert.True(t, providers.IsCode(err, providers.NotFound), "Create from a missing template: %v", err)
}

// TestListedBoxRuns uses a box found by List, whose listing carries no
// envd token: the box reads it when first used.
func TestListedBoxRuns(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := newProvider(t, srv, nil)
	b := newBox(t, p, providers.Spec{Labels: map[string]string{"role": "listed"}, Env: map[string]string{"FROM_SPEC": "yes"}})
	boxes, err := newProvider(t, srv, nil).List(ctx(t), map[string]string{"role": "listed"})
	require.NoError(t, err)
	require.Len(t, boxes, 1)
	assert.Equal(t, b.ID(), boxes[0].ID())
	out := run(t, boxes[0], providers.ExecRequest{Argv: []string{"sh", "-c", `printf %s "$FROM_SPEC"`}})
	assert.Equal(t, "yes", out)
}

// TestStreamCut cuts a command's output stream, as a proxy that drops the
// connection would: the command's output from then on has no listener and
// is lost, so Wait says the transport was lost, within a bound, and the
// command's whole group is killed rather than left running unseen.
func TestStreamCut(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{})
	out := &lines{}
	p, err := b.Exec(ctx(t), providers.ExecRequest{Argv: []string{"sh", "-c", `sleep 300 & echo $!; echo $$; while :; do echo tick; sleep 0.05; done`}, Stdout: out})
	require.NoError(t, err)
	pids := out.wait(t, 2)
	srv.CutStreams()
	start := time.Now()
	code, err := waitWithin(t, p, 30*time.Second)
	assert.True(t, providers.IsCode(err, providers.TransportLost), "Wait after the stream was cut: %d, %v", code, err)
	t.Logf("Wait returned %v after the cut", time.Since(start).Round(time.Millisecond))
	for _, pid := range pids {
		assert.False(t, alive(pid), "process %s of the command's group survived the cut", pid)
	}
}

// TestStdinLost checks a command whose stdin cannot be delivered whole (an
// answer that does not say envd left the input alone): it is ended and
// Wait says so, rather than the command waiting for input for ever or
// reading it with a hole.
func TestStdinLost(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{})
	pr, pw := io.Pipe()
	out := &lines{}
	p, err := b.Exec(ctx(t), providers.ExecRequest{Argv: []string{"cat"}, Stdin: pr, Stdout: out})
	require.NoError(t, err)
	_, err = pw.Write([]byte("first\n"))
	require.NoError(t, err)
	out.wait(t, 1)
	srv.SetFault(func(r *http.Request, n int) e2btest.Fault {
		if r.URL.Path == "/process.Process/SendInput" {
			return e2btest.Fault{Status: http.StatusGatewayTimeout}
		}
		return e2btest.Fault{}
	})
	go pw.Write([]byte("second\n"))
	code, err := waitWithin(t, p, 30*time.Second)
	assert.True(t, providers.IsCode(err, providers.TransportLost), "Wait of a command whose stdin was lost: %d, %v", code, err)
	pw.Close()
}

// TestSetLifetime extends a box past the lifetime it was made with, and
// shortens it again: E2B replaces a sandbox's timeout on each call.
func TestSetLifetime(t *testing.T) {
	srv := e2btest.New(e2btest.Options{MaxTimeout: time.Hour})
	t.Cleanup(srv.Close)
	b := newBox(t, newProvider(t, srv, map[string]string{"max_lifetime": "1h"}), providers.Spec{Lifetime: 2 * time.Second}).(*e2b.Box)
	require.NoError(t, b.SetLifetime(ctx(t), time.Minute))
	time.Sleep(3 * time.Second) // past the lifetime it was made with
	st, err := b.Status(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, providers.StateRunning, st.State)
	err = b.SetLifetime(ctx(t), 2*time.Hour)
	assert.True(t, providers.IsCode(err, providers.Invalid), "a lifetime over E2B's maximum: %v", err)
	require.NoError(t, b.SetLifetime(ctx(t), time.Second))
	assert.Eventually(t, func() bool {
		_, err := b.Status(ctx(t))
		return providers.IsCode(err, providers.Gone)
	}, 30*time.Second, 50*time.Millisecond)
}

// TestDefaultLifetime makes boxes on a team of E2B's Hobby tier, whose
// sandboxes may live an hour at most (the fake's default): a spec without
// a lifetime gets a box that ends in an hour, and one asking for two hours
// is refused by E2B as invalid, with E2B's reason.
func TestDefaultLifetime(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := newProvider(t, srv, nil)

	b := newBox(t, p, providers.Spec{})
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, srv.APIURL()+"/sandboxes/"+b.ID(), nil)
	require.NoError(t, err)
	req.Header.Set("X-API-KEY", srv.APIKey())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var info struct{ StartedAt, EndAt time.Time }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&info))
	assert.Equal(t, time.Hour, info.EndAt.Sub(info.StartedAt).Round(time.Second), "the lifetime of a box whose spec sets none")

	_, err = p.Create(ctx(t), providers.Spec{Lifetime: 2 * time.Hour})
	assert.True(t, providers.IsCode(err, providers.Invalid), "a lifetime over the tier's cap: %v", err)
	assert.ErrorContains(t, err, "Timeout cannot be greater than 1 hours")
	assert.Equal(t, []string{b.ID()}, srv.SandboxIDs())
}
