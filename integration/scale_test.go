package integration

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// factsMap reads a box's facts.json, every field.
func factsMap(t *testing.T, b *boxT) map[string]any {
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
	a, ok := factsMap(t, b)["agent"].(map[string]any)
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

// du is the disk space the files under dir take, in bytes.
func du(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// Reading 2 GiB of files through a mount whose content cache is bound to
// 512 MiB keeps the host disk the cache takes within the bound (plus the
// one file being read), and every file reads back whole. (A Docker box:
// a local box's files are read without copies.)
func TestCacheBudgetBoundsHostDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 2 GiB")
	}
	const budget, fileSize, files = 512 << 20, 128 << 20, 16
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 60 * time.Second, budget: budget})
	b := m.newBox(t, "big", "provider=docker")
	b.must(t, fmt.Sprintf(`for i in $(seq -w 0 %d); do printf "%%2048s" "f$i" | tr ' ' x > f$i && truncate -s %d f$i; done`, files-1, fileSize))
	sums := map[string][32]byte{}
	for i := range files {
		name := fmt.Sprintf("f%02d", i)
		h := sha256.New()
		head := []byte(strings.Repeat("x", 2048-len(name)) + name)
		h.Write(head)
		io.CopyN(h, zeros{}, fileSize-int64(len(head)))
		sums[name] = [32]byte(h.Sum(nil))
	}
	cacheDir := filepath.Join(m.state, "cache")
	for round := range 2 {
		for i := range files {
			name := fmt.Sprintf("f%02d", i)
			f, err := os.Open(filepath.Join(b.work, name))
			require.NoError(t, err)
			h := sha256.New()
			n, err := io.Copy(h, f)
			f.Close()
			require.NoError(t, err)
			require.EqualValues(t, fileSize, n)
			assert.Equal(t, sums[name], [32]byte(h.Sum(nil)), "round %d: %s read back", round, name)
			assert.LessOrEqual(t, du(t, cacheDir), int64(budget+fileSize), "round %d: host disk of the cache after %s", round, name)
		}
	}
	assert.Greater(t, du(t, cacheDir), int64(budget/2), "the cache holds copies: the bound is what kept it small")
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
