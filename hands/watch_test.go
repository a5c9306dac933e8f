package hands_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
)

// A box reached without the agent is watched by its own watch when it has
// one (a local box's in-process inotify): Watch reports a change made
// there by another program; a box with neither says Unsupported.
func TestWatchWithoutAgent(t *testing.T) {
	box := newLocalBox(t)
	h, root := openOn(t, box, hands.ViaNativeFiles, hands.Options{})
	require.True(t, h.CanWatch())
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var seen []string
	var info *providers.FileInfo // f's attributes, as a report said them
	ready := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- h.Watch(ctx, root, func() { close(ready) }, func(changes []providers.Change, all bool) {
			mu.Lock()
			for _, c := range changes {
				seen = append(seen, c.Path)
				if c.Path == "f" && c.Info != nil {
					info = c.Info
				}
			}
			mu.Unlock()
		})
	}()
	select {
	case <-ready:
	case err := <-ended:
		t.Fatalf("Watch ended before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Watch not ready in 10 s")
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644))
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(seen, "f") && info != nil
	}, 10*time.Second, 10*time.Millisecond)
	// The report carries f's attributes after the write: the host drops
	// the echo of its own write by them.
	mu.Lock()
	if assert.NotNil(t, info) {
		assert.EqualValues(t, 1, info.Size)
		assert.True(t, info.IsRegular())
		assert.NotZero(t, info.Ctime)
	}
	mu.Unlock()
	cancel()
	select {
	case err := <-ended:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not end with its context")
	}

	script, sroot := openOn(t, newHostBox(t), hands.ViaScript, hands.Options{})
	assert.False(t, script.CanWatch())
	err := script.Watch(t.Context(), sroot, nil, func([]providers.Change, bool) {})
	assert.True(t, providers.IsCode(err, providers.Unsupported), "%v", err)
}
