package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// factsOf reads a box's facts.json.
func factsOf(t *testing.T, b *boxT) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
	require.NoError(t, err)
	var f map[string]any
	require.NoError(t, json.Unmarshal(raw, &f), "%s", raw)
	return f
}

// roundTrips is the agent channel's count of requests, from facts.json.
func roundTrips(t *testing.T, b *boxT) int {
	t.Helper()
	a, ok := factsOf(t, b)["agent"].(map[string]any)
	require.True(t, ok, "facts.json has no agent counters")
	n, ok := a["roundTrips"].(float64)
	require.True(t, ok, "agent counters: %v", a)
	return int(n)
}

// Creating, writing and closing a new file in a directory whose listing
// the host holds costs one round trip to the box (the push at close), as
// facts.json counts them; the files are in the box, whole, when close
// returns.
func TestOneRoundTripPerCreatedFile(t *testing.T) {
	// Listings stay fresh for the test: a round trip counted is one the
	// create made, not a renewal of a listing that timed out.
	m := startMountAttr(t, "docker", 20*time.Second, time.Minute, false)
	b := m.newBox(t, "rt", "provider=docker")
	dir := filepath.Join(b.work, "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	_, err := os.ReadDir(dir)
	require.NoError(t, err)
	before := roundTrips(t, b)
	const n = 20
	for i := range n {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644))
	}
	after := roundTrips(t, b)
	assert.Equal(t, n, after-before, "round trips for %d created files", n)
	out := b.must(t, "cat d/f00 d/f19 && ls d | wc -l")
	assert.Equal(t, "file 0\nfile 19\n20\n", out)
}
