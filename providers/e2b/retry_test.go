package e2b_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
)

// faultFirst answers the first request matching method and path suffix
// with f, and lets every other through.
func faultFirst(method, suffix string, f e2btest.Fault) e2btest.FaultFunc {
	var done atomic.Bool
	return func(r *http.Request, n int) e2btest.Fault {
		if r.Method == method && strings.HasSuffix(r.URL.Path, suffix) && done.CompareAndSwap(false, true) {
			return f
		}
		return e2btest.Fault{}
	}
}

// count returns how many requests the fake received for method and path
// suffix, and how many of them it answered with status.
func count(srv *e2btest.Server, method, suffix string, status int) (all, with int) {
	for _, r := range srv.Requests() {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) {
			all++
			if r.Status == status {
				with++
			}
		}
	}
	return all, with
}

// TestCreateAnswerLost has E2B's gateway answer 504 to a create that E2B
// carried out: Create finds the sandbox by its metadata and returns it,
// working, rather than making a second one.
func TestCreateAnswerLost(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	srv.SetFault(faultFirst(http.MethodPost, "/v2/sandboxes", e2btest.Fault{Status: http.StatusGatewayTimeout, Handled: true}))
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{})
	assert.Equal(t, []string{b.ID()}, srv.SandboxIDs(), "sandboxes on the fake")
	creates, _ := count(srv, http.MethodPost, "/v2/sandboxes", 0)
	assert.Equal(t, 1, creates, "creates sent")
	assert.Equal(t, "ok\n", run(t, b, providers.ExecRequest{Argv: []string{"echo", "ok"}}))
}

// TestCreateGatewayError has E2B's gateway answer 502 to a create that
// never reached E2B: Create finds no sandbox by its metadata, asks again,
// and returns the one sandbox made.
func TestCreateGatewayError(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	srv.SetFault(faultFirst(http.MethodPost, "/v2/sandboxes", e2btest.Fault{Status: http.StatusBadGateway}))
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{})
	assert.Equal(t, []string{b.ID()}, srv.SandboxIDs(), "sandboxes on the fake")
	creates, failed := count(srv, http.MethodPost, "/v2/sandboxes", http.StatusBadGateway)
	assert.Equal(t, 2, creates, "creates sent")
	assert.Equal(t, 1, failed, "creates answered 502")
	lookups, _ := count(srv, http.MethodGet, "/v2/sandboxes", 0)
	assert.Positive(t, lookups, "a look-up before the second create")
}

// TestCreateAlwaysLost has every create answered 502 without reaching
// E2B: Create gives up, bounded, with Unavailable, and leaves nothing.
func TestCreateAlwaysLost(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	srv.SetFault(func(r *http.Request, n int) e2btest.Fault {
		if r.Method == http.MethodPost && r.URL.Path == "/v2/sandboxes" {
			return e2btest.Fault{Status: http.StatusBadGateway}
		}
		return e2btest.Fault{}
	})
	_, err := newProvider(t, srv, nil).Create(ctx(t), providers.Spec{})
	assert.True(t, providers.IsCode(err, providers.Unavailable), "Create through a failing gateway: %v", err)
	creates, _ := count(srv, http.MethodPost, "/v2/sandboxes", 0)
	assert.Equal(t, 3, creates, "creates sent")
	assert.Empty(t, srv.SandboxIDs())
}

// TestSnapshotRetries checks that a snapshot is sent again after a 429,
// which E2B gives before acting, but not after a gateway's 502, which may
// come after E2B made the snapshot.
func TestSnapshotRetries(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := newProvider(t, srv, nil)
	b := newBox(t, p, providers.Spec{})

	srv.SetFault(faultFirst(http.MethodPost, "/snapshots", e2btest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "0"}))
	_, err := p.Snapshot(ctx(t), b, "after-429")
	require.NoError(t, err, "a snapshot refused once for the rate limit")
	sent, limited := count(srv, http.MethodPost, "/snapshots", http.StatusTooManyRequests)
	assert.Equal(t, 2, sent, "snapshots sent")
	assert.Equal(t, 1, limited, "snapshots answered 429")

	srv.SetFault(faultFirst(http.MethodPost, "/snapshots", e2btest.Fault{Status: http.StatusBadGateway, Handled: true}))
	_, err = p.Snapshot(ctx(t), b, "after-502")
	assert.True(t, providers.IsCode(err, providers.Unavailable), "a snapshot answered 502: %v", err)
	sent, _ = count(srv, http.MethodPost, "/snapshots", 0)
	assert.Equal(t, 3, sent, "snapshots sent: the one answered 502 is not sent again")
}
