package modal_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
	"github.com/boxfs/boxfs/providers/providertest"
)

// harness is the conformance harness for a provider on the fake srv. Every
// box gets the run's own workspace: the fake's sandboxes share this
// machine's file system.
func harness(t *testing.T, srv *modaltest.Server) providertest.Harness {
	t.Setenv("MODAL_CONFIG_PATH", t.TempDir()+"/none.toml")
	p, err := modal.New(providers.Config{Options: map[string]string{
		"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret(),
	}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return providertest.Harness{
		Provider: p,
		Reopen: func(t *testing.T) providers.Provider {
			p, err := modal.New(providers.Config{Options: map[string]string{
				"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret(),
			}})
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			return p
		},
		Spec:        providers.Spec{Workspace: t.TempDir()},
		Unsupported: []string{"mounts", "user", "capabilities"},
		Refused: map[string]providers.Spec{
			"isolation=container": {Isolation: providers.IsolationContainer},
			"isolation=none":      {Isolation: providers.IsolationNone},
			"lifetime=25h":        {Lifetime: 25 * time.Hour},
		},
		LargeOutput: 16 << 20,
	}
}

func TestConformance(t *testing.T) {
	srv, err := modaltest.New(modaltest.Options{TaskIDPolls: 2})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	providertest.Run(t, harness(t, srv))
	assert.Empty(t, srv.SandboxIDs(), "sandboxes left running on the fake")
	assert.Empty(t, srv.Leaks(srv.TokenSecret()), "the token secret went somewhere else")
}

// TestConformanceFaults runs the suite with Modal's awkward moments: task
// ids late, stdio streams that drop mid-output, waits that time out every
// 300 ms, a router that refuses each task's first JWT, short-lived tokens,
// and every fifth control-plane call answered Unavailable, before or after
// it was handled.
func TestConformanceFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite with faults is long; -short skips it")
	}
	srv, err := modaltest.New(modaltest.Options{
		TaskIDPolls: 3, DropStreamAfter: 100 << 10, WaitLimit: 300 * time.Millisecond,
		RouterUnauthenticatedOnce: true, AuthTokenTTL: 3 * time.Second, RouterTTL: 40 * time.Second,
		FaultEvery: 5, PageSize: 1,
	})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	providertest.Run(t, harness(t, srv))
	assert.Empty(t, srv.SandboxIDs(), "sandboxes left running on the fake")
	codes := map[string]int{}
	for _, r := range srv.Requests() {
		codes[r.Code.String()]++
	}
	t.Logf("%d calls, answered: %v", len(srv.Requests()), codes)
	assert.Positive(t, codes["Unavailable"])
	assert.Positive(t, codes["Unauthenticated"])
	assert.Positive(t, codes["DeadlineExceeded"])
}
