package e2b

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
)

// open opens the provider on the fake srv, with opts added.
func open(t *testing.T, srv *e2btest.Server, opts map[string]string) *Provider {
	t.Helper()
	o := map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}
	for k, v := range opts {
		if v == "" {
			delete(o, k)
		} else {
			o[k] = v
		}
	}
	p, err := New(providers.Config{Options: o})
	require.NoError(t, err)
	return p
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a box destroyed when t ends.
func create(t *testing.T, p *Provider, spec providers.Spec) *Box {
	t.Helper()
	b, err := p.Create(testContext(t), spec)
	require.NoError(t, err)
	t.Cleanup(func() { b.Destroy(context.Background()) })
	return b.(*Box)
}

// TestPausedListed checks that List finds a paused box as well as running
// ones: E2B runs no timeout while a sandbox is paused, so a sweep of
// List's boxes is what ends one nobody resumes.
func TestPausedListed(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := open(t, srv, nil)
	ctx := testContext(t)
	labels := map[string]string{"role": "sweep"}
	running := create(t, p, providers.Spec{Labels: labels})
	paused := create(t, p, providers.Spec{Labels: labels})
	_, err := p.Suspend(ctx, paused)
	require.NoError(t, err)

	boxes, err := open(t, srv, nil).List(ctx, labels)
	require.NoError(t, err)
	var ids []string
	for _, b := range boxes {
		ids = append(ids, b.ID())
	}
	assert.ElementsMatch(t, []string{running.ID(), paused.ID()}, ids)
	for _, b := range boxes {
		if b.ID() != paused.ID() {
			continue
		}
		st, err := b.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, providers.StateStopped, st.State, "the listed paused box's state")
		require.NoError(t, b.Destroy(ctx), "a sweep destroys the paused box")
	}
	assert.Equal(t, []string{running.ID()}, srv.SandboxIDs())
}

// TestResumeAfterLifetimeKills resumes a box whose lifetime passed while
// it was paused (a clock moved past its end): Resume is Gone, and the
// paused sandbox, which E2B would keep for ever, is killed.
func TestResumeAfterLifetimeKills(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := open(t, srv, nil)
	ctx := testContext(t)
	b := create(t, p, providers.Spec{Lifetime: 10 * time.Minute})
	id, err := p.Suspend(ctx, b)
	require.NoError(t, err)
	require.Equal(t, []string{b.ID()}, srv.SandboxIDs(), "the paused sandbox")

	later := time.Now().Add(11 * time.Minute)
	p.now = func() time.Time { return later }
	_, err = p.Resume(ctx, id)
	assert.True(t, providers.IsCode(err, providers.Gone), "Resume past the lifetime: %v", err)
	assert.Empty(t, srv.SandboxIDs(), "the paused sandbox was left alive")
}

// TestResumeAfterLifetimeLeavesOthers checks that an expired resume kills
// only a paused boxfs sandbox: one running again (resumed elsewhere) is
// E2B's timeout's to end.
func TestResumeAfterLifetimeLeavesOthers(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := open(t, srv, nil)
	ctx := testContext(t)
	b := create(t, p, providers.Spec{Lifetime: 10 * time.Minute})
	id, err := p.Suspend(ctx, b)
	require.NoError(t, err)
	_, err = p.Resume(ctx, id) // resumed in time, elsewhere
	require.NoError(t, err)

	later := time.Now().Add(11 * time.Minute)
	p.now = func() time.Time { return later }
	_, err = p.Resume(ctx, id)
	assert.True(t, providers.IsCode(err, providers.Gone), "Resume past the lifetime: %v", err)
	assert.Equal(t, []string{b.ID()}, srv.SandboxIDs(), "a running sandbox was killed")
}

// TestPausedIsNotGone uses a box while it is paused: E2B's proxy cannot
// reach its envd, but the box is not gone, so the calls are Refused (as a
// suspended box's are) until it is resumed, and work again then.
func TestPausedIsNotGone(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := open(t, srv, nil)
	ctx := testContext(t)
	b := create(t, p, providers.Spec{})
	id, err := p.Suspend(ctx, b)
	require.NoError(t, err)

	_, err = b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
	assert.True(t, providers.IsCode(err, providers.Refused), "Exec in a paused box: %v", err)
	_, err = b.ReadFile(ctx, "/etc/hostname")
	assert.True(t, providers.IsCode(err, providers.Refused), "ReadFile in a paused box: %v", err)
	err = b.Watch(ctx, "/tmp", nil, func([]providers.Change, bool) {})
	assert.True(t, providers.IsCode(err, providers.Refused), "Watch in a paused box: %v", err)

	rb, err := p.Resume(ctx, id)
	require.NoError(t, err)
	var out bytes.Buffer
	proc, err := rb.Exec(ctx, providers.ExecRequest{Argv: []string{"echo", "back"}, Stdout: &out})
	require.NoError(t, err)
	code, err := proc.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "back\n", out.String())
}

// hostRecorder records the host of every envd request and sends it on to
// the fake's envd, as a resolver would for the sandbox's own host.
type hostRecorder struct {
	envd *url.URL
	mu   sync.Mutex
	seen []string
}

func (h *hostRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.seen = append(h.seen, req.URL.Scheme+"://"+req.URL.Host)
	h.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = h.envd.Scheme, h.envd.Host, h.envd.Host
	return http.DefaultTransport.RoundTrip(req)
}

func (h *hostRecorder) hosts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Compact(slices.Sorted(slices.Values(h.seen)))
}

// TestListedBoxDomain checks that a box found by List speaks to envd on
// the sandbox's own domain (a team cluster's), which its detail carries
// and a listing does not, rather than on the provider's.
func TestListedBoxDomain(t *testing.T) {
	const domain = "eu.byoc.example"
	t.Setenv("E2B_SANDBOX_URL", "")
	t.Setenv("E2B_DOMAIN", "")
	srv := e2btest.New(e2btest.Options{Domain: domain})
	t.Cleanup(srv.Close)
	envd, err := url.Parse(srv.SandboxURL())
	require.NoError(t, err)
	ctx := testContext(t)

	maker := open(t, srv, map[string]string{"sandbox_url": ""})
	made := &hostRecorder{envd: envd}
	maker.hc.Transport = made
	b := create(t, maker, providers.Spec{Labels: map[string]string{"role": "domain"}})
	want := []string{"https://49983-" + b.ID() + "." + domain}

	p := open(t, srv, map[string]string{"sandbox_url": ""})
	listed := &hostRecorder{envd: envd}
	p.hc.Transport = listed
	boxes, err := p.List(ctx, map[string]string{"role": "domain"})
	require.NoError(t, err)
	require.Len(t, boxes, 1)
	var out bytes.Buffer
	proc, err := boxes[0].Exec(ctx, providers.ExecRequest{Argv: []string{"echo", "listed"}, Stdout: &out})
	require.NoError(t, err)
	code, err := proc.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "listed\n", out.String())
	assert.Equal(t, want, listed.hosts(), "envd hosts of the listed box")

	proc, err = b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
	require.NoError(t, err)
	_, err = proc.Wait()
	require.NoError(t, err)
	assert.Equal(t, want, made.hosts(), "envd hosts of the created box")
}
