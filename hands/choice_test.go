package hands_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// TestChoice: New takes the fastest path the box's facts allow, falls back
// (and says so in the log) when the agent cannot start, and refuses a
// forced path the box cannot take.
func TestChoice(t *testing.T) {
	ctx := context.Background()
	bin := boxfsbin.Path(t)
	notBin := filepath.Join(t.TempDir(), "boxfs")
	if err := os.WriteFile(notBin, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := newHostBox(t)
	foreign.arch = "riscv64"

	for _, tc := range []struct {
		name   string
		box    func(*testing.T) providers.Box
		opts   hands.Options
		via    string
		code   providers.Code // of New's error, when it must fail
		logHas string
	}{
		{name: "local box serves its own files", box: newLocalBox, opts: hands.Options{AgentBinary: bin}, via: hands.ViaNativeFiles},
		{name: "a box with live processes takes the agent", box: func(t *testing.T) providers.Box { return newHostBox(t) }, opts: hands.Options{AgentBinary: bin}, via: hands.ViaAgent},
		{name: "no agent binary and no native API: scripts", box: func(t *testing.T) providers.Box { return newHostBox(t) }, via: hands.ViaScript},
		{name: "a foreign arch never gets the agent", box: func(t *testing.T) providers.Box { return foreign }, opts: hands.Options{AgentBinary: bin}, via: hands.ViaScript},
		{name: "forcing the agent on a foreign arch is refused", box: func(t *testing.T) providers.Box { return foreign }, opts: hands.Options{AgentBinary: bin, Force: hands.ViaAgent}, code: providers.Unsupported},
		{name: "forcing native on a box without the API is refused", box: func(t *testing.T) providers.Box { return newHostBox(t) }, opts: hands.Options{Force: hands.ViaNative}, code: providers.Unsupported},
		{name: "an unknown Force is invalid", box: func(t *testing.T) providers.Box { return newHostBox(t) }, opts: hands.Options{Force: "fast"}, code: providers.Invalid},
		{name: "docker takes the agent", box: testbox.NewDocker, opts: hands.Options{AgentBinary: bin}, via: hands.ViaAgent},
		{name: "docker without an agent binary: native", box: testbox.NewDocker, via: hands.ViaNative},
		{name: "docker with an agent that cannot start falls back to native", box: testbox.NewDocker, opts: hands.Options{AgentBinary: notBin}, via: hands.ViaNative, logHas: "falling back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := tc.box(t)
			var logs bytes.Buffer
			tc.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			h, err := hands.New(ctx, box, tc.opts)
			if tc.code != 0 {
				if !providers.IsCode(err, tc.code) {
					t.Fatalf("New = %v, want code %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if h.Via() != tc.via {
				t.Errorf("Via = %q, want %q", h.Via(), tc.via)
			}
			if tc.logHas != "" && !strings.Contains(logs.String(), tc.logHas) {
				t.Errorf("log lacks %q:\n%s", tc.logHas, logs.String())
			}
			// Whatever the path, it works.
			if _, err := h.Stat(ctx, h.Facts().Workspace); err != nil {
				t.Errorf("Stat of the workspace via %s: %v", h.Via(), err)
			}
		})
	}
}

// slowFacts is a box whose Facts answer only once released.
type slowFacts struct {
	*hostBox
	release chan struct{}
}

func (b slowFacts) Facts(ctx context.Context) (providers.Facts, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return providers.Facts{}, ctx.Err()
	}
	return b.hostBox.Facts(ctx)
}

// TestNewOnKnownFacts: given the facts of an earlier open, New takes the
// path they allow (the agent here) without waiting for the box's facts,
// which replace the known ones once read.
func TestNewOnKnownFacts(t *testing.T) {
	ctx := context.Background()
	hb := newHostBox(t)
	box := slowFacts{hb, make(chan struct{})}
	known, err := hb.Facts(ctx)
	require.NoError(t, err)
	known.CPUs = 99 // the box says 0
	told := make(chan providers.Facts, 1)
	h, err := hands.New(ctx, box, hands.Options{AgentBinary: boxfsbin.Path(t), KnownFacts: &known,
		OnFacts: func(f providers.Facts) { told <- f }})
	require.NoError(t, err)
	defer h.Close()
	assert.Equal(t, hands.ViaAgent, h.Via())
	assert.Equal(t, 99.0, h.Facts().CPUs, "the known facts until the box's arrive")
	_, err = h.Stat(ctx, known.Workspace)
	require.NoError(t, err, "the agent serves before the box told its facts")

	close(box.release)
	select {
	case f := <-told:
		assert.Zero(t, f.CPUs)
		assert.Equal(t, f, h.Facts())
	case <-time.After(10 * time.Second):
		t.Fatal("OnFacts was not told the box's facts")
	}
}
