package hands_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
)

// agentGate holds a Hands's background agent start until released.
type agentGate struct {
	started chan struct{} // closed when the start reached the gate
	release chan struct{}
	err     error // what the start fails with once released; nil opens the channel
}

func newAgentGate() *agentGate {
	return &agentGate{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *agentGate) hook(ctx context.Context) error {
	close(g.started)
	select {
	case <-g.release:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openGated opens hands on a fresh host box (the agent path), its agent's
// start held by a gate, which it returns started.
func openGated(t *testing.T, logs *bytes.Buffer) (*hands.Hands, *agentGate) {
	t.Helper()
	g := newAgentGate()
	opts := hands.Options{AgentBinary: boxfsbin.Path(t)}
	if logs != nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	hands.SetAgentHook(&opts, g.hook)
	h, err := hands.New(context.Background(), newHostBox(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	select {
	case <-g.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's start never began")
	}
	return h, g
}

// TestFirstListingBeforeAgent: on the agent path New returns before the
// agent is up; the scripts answer meanwhile (listings, writes), and once
// the agent's channel answers every operation goes through it.
func TestFirstListingBeforeAgent(t *testing.T) {
	ctx := context.Background()
	h, g := openGated(t, nil)
	ws := h.Facts().Workspace
	require.NoError(t, os.WriteFile(filepath.Join(ws, "before.txt"), []byte("x"), 0o644))

	assert.True(t, h.AgentStarting())
	assert.Equal(t, hands.ViaScript, h.Via(), "the fallback serves while the agent starts")
	assert.True(t, h.CanWatch(), "a watch waits for the agent")
	assert.Empty(t, h.AgentPath())
	list, err := h.ReadDir(ctx, ws)
	require.NoError(t, err, "the first listing answers before the agent is up")
	assert.Equal(t, []string{"before.txt"}, names(list))
	_, err = h.WriteFileStat(ctx, filepath.Join(ws, "during.txt"), bytes.NewReader([]byte("y")), providers.WriteOptions{Perm: 0o644})
	require.NoError(t, err)
	_, err = h.WalkMax(ctx, ws, 100)
	assert.True(t, providers.IsCode(err, providers.Unavailable), "WalkMax while the agent starts: %v (not Unsupported: the caller would not ask again)", err)
	st, ok := h.AgentStats()
	assert.True(t, ok)
	assert.False(t, st.Up)

	close(g.release)
	require.NoError(t, h.WaitAgent(ctx))
	assert.False(t, h.AgentStarting())
	assert.Equal(t, hands.ViaAgent, h.Via())
	assert.NotEmpty(t, h.AgentPath())
	before, ok := h.AgentStats()
	require.True(t, ok)
	list, err = h.ReadDir(ctx, ws)
	require.NoError(t, err)
	assert.Equal(t, []string{"before.txt", "during.txt"}, names(list))
	walked, err := h.WalkMax(ctx, ws, 100)
	require.NoError(t, err, "the agent's capped walk")
	assert.Len(t, walked, 2)
	after, _ := h.AgentStats()
	assert.True(t, after.Up)
	assert.GreaterOrEqual(t, after.RoundTrips-before.RoundTrips, int64(2), "the listing and the walk went through the agent")
}

// TestWatchWaitsForAgent: a watch asked for while the agent starts is set
// once the agent is up.
func TestWatchWaitsForAgent(t *testing.T) {
	h, g := openGated(t, nil)
	ws := h.Facts().Workspace
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	changed := make(chan []providers.Change, 16)
	ended := make(chan error, 1)
	go func() {
		ended <- h.Watch(ctx, ws, func() { close(ready) }, func(c []providers.Change, all bool) { changed <- c })
	}()
	select {
	case <-ready:
		t.Fatal("the watch was ready before the agent")
	case err := <-ended:
		t.Fatalf("the watch ended before the agent: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(g.release)
	select {
	case <-ready:
	case err := <-ended:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the watch was not set once the agent was up")
	}
	assert.Equal(t, hands.ViaAgent, h.Via())
	require.NoError(t, os.WriteFile(filepath.Join(ws, "seen.txt"), []byte("x"), 0o644))
	select {
	case <-changed:
	case err := <-ended:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no change reported")
	}
	cancel()
	assert.NoError(t, <-ended)
}

// TestAgentStartFails: a background start that fails keeps the fallback
// path, says why in the log, and a watch then is Unsupported (the host
// box watches nothing).
func TestAgentStartFails(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	h, g := openGated(t, &logs)
	g.err = errors.New("no agent today")
	close(g.release)
	require.NoError(t, h.WaitAgent(ctx))
	assert.Equal(t, hands.ViaScript, h.Via())
	assert.False(t, h.CanWatch())
	assert.Contains(t, logs.String(), "no agent today")
	_, ok := h.AgentStats()
	assert.False(t, ok)
	_, _, err := h.RenameStat(ctx, filepath.Join(h.Facts().Workspace, "a"), filepath.Join(h.Facts().Workspace, "b"))
	assert.True(t, providers.IsCode(err, providers.Unsupported), "RenameStat: %v", err)
	err = h.Watch(ctx, h.Facts().Workspace, func() {}, func([]providers.Change, bool) {})
	assert.True(t, providers.IsCode(err, providers.Unsupported), "Watch: %v", err)
	_, err = h.ReadDir(ctx, h.Facts().Workspace)
	assert.NoError(t, err)
}

// TestCloseStopsAgentStart: Close during the agent's start ends it.
func TestCloseStopsAgentStart(t *testing.T) {
	h, _ := openGated(t, nil)
	require.NoError(t, h.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, h.WaitAgent(ctx), "the start ends at Close")
	assert.Equal(t, hands.ViaScript, h.Via())
}

func names(list []providers.FileInfo) []string {
	var out []string
	for _, fi := range list {
		out = append(out, fi.Name)
	}
	sort.Strings(out)
	return out
}
