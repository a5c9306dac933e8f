package e2b_test

import (
	"context"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b"
	"github.com/boxfs/boxfs/providers/providertest"
)

// liveProvider opens the provider on E2B itself when E2B_API_KEY is set
// (E2B_DOMAIN, E2B_API_URL and E2B_SANDBOX_URL are taken as the SDK takes
// them; BOXFS_E2B_TEMPLATE names the template), outside CI only.
func liveProvider(t *testing.T) *e2b.Provider {
	t.Helper()
	if os.Getenv("E2B_API_KEY") == "" || os.Getenv("CI") != "" {
		t.Skip("live E2B suite not configured: set E2B_API_KEY (outside CI) to run it")
	}
	opts := map[string]string{}
	if v := os.Getenv("BOXFS_E2B_TEMPLATE"); v != "" {
		opts["template"] = v
	}
	p, err := e2b.New(providers.Config{Options: opts})
	require.NoError(t, err)
	return p
}

// TestLive runs the conformance suite against E2B, its boxes labelled
// for the run, then checks the sweep: List, which shows paused sandboxes
// too, finds none of the run's once the suite destroyed them.
func TestLive(t *testing.T) {
	p := liveProvider(t)
	labels := map[string]string{"boxfs-live-test": "r" + providers.NewID(4)}
	providertest.Run(t, providertest.Harness{
		Provider:    p,
		Reopen:      func(t *testing.T) providers.Provider { return liveProvider(t) },
		Spec:        providers.Spec{Labels: labels},
		Unsupported: []string{"region", "gpu", "ports", "mounts", "user", "capabilities"},
		Refused: map[string]providers.Spec{
			"isolation=container": {Isolation: providers.IsolationContainer},
			"cpus=64":             {CPUs: 64},
			"lifetime=25h":        {Lifetime: 25 * time.Hour},
		},
		Lifetime:      10 * time.Second,
		LifetimeSlack: 60 * time.Second,
		LargeOutput:   8 << 20,
	})
	t.Run("Sweep", func(t *testing.T) {
		left, err := p.List(ctx(t), labels)
		require.NoError(t, err, "List")
		for _, b := range left {
			t.Errorf("sandbox %s of the run is still listed after the suite", b.ID())
			assert.NoError(t, b.Destroy(ctx(t)), "Destroy(%s)", b.ID())
		}
		left, err = p.List(ctx(t), labels)
		require.NoError(t, err, "List")
		assert.Empty(t, left, "sandboxes of the run listed after their Destroy")
	})
}

// TestLiveAgent runs hands over the agent channel in an E2B sandbox, and
// envd's watch.
func TestLiveAgent(t *testing.T) {
	p := liveProvider(t)
	b := newBox(t, p, providers.Spec{Lifetime: 10 * time.Minute, Labels: map[string]string{"boxfs-live-test": "agent"}})
	h, err := hands.New(ctx(t), b, hands.Options{AgentBinary: boxfsbin.Path(t), Force: hands.ViaAgent})
	require.NoError(t, err)
	defer h.Close()
	ws := h.Facts().Workspace
	require.NoError(t, h.WriteFile(ctx(t), path.Join(ws, "live.txt"), strings.NewReader("live"), 0o644))
	fi, err := h.Stat(ctx(t), path.Join(ws, "live.txt"))
	require.NoError(t, err)
	assert.Equal(t, int64(4), fi.Size)

	seen := make(chan []string, 16)
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go b.(*e2b.Box).Watch(wctx, ws, func() { close(ready) }, func(changes []providers.Change, all bool) { seen <- providers.Paths(changes) })
	<-ready
	run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", "echo w >watched"}})
	select {
	case paths := <-seen:
		assert.Contains(t, paths, "watched")
	case <-time.After(30 * time.Second):
		t.Error("envd's watch reported nothing in 30 s")
	}
}
