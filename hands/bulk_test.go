package hands_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// A large file written from a host file goes through the Docker box's
// archive API and is committed by the agent: it lands whole under its
// name with the attributes asked, exclusively when asked, with no
// temporary name left, and reads back (through the archive API too).
func TestBulkFiles(t *testing.T) {
	box := testbox.NewDocker(t)
	h := agentHands(t, box, 30*time.Second)
	ctx := t.Context()
	ws := h.Facts().Workspace
	data := make([]byte, 9<<20+123)
	rand.Read(data)
	src := filepath.Join(t.TempDir(), "src")
	require.NoError(t, os.WriteFile(src, data, 0o600))
	open := func() *os.File {
		f, err := os.Open(src)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	name := ws + "/big"
	mt := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	trips := func() int64 {
		st, ok := h.AgentStats()
		require.True(t, ok)
		return st.RoundTrips
	}
	before := trips()
	fi, err := h.WriteFileStat(ctx, name, open(), providers.WriteOptions{Perm: 0o640, ForceMode: true, Mtime: mt, Exclusive: true})
	require.NoError(t, err)
	assert.EqualValues(t, len(data), fi.Size)
	assert.Equal(t, os.FileMode(0o640), fi.Mode)
	assert.True(t, fi.Mtime.Equal(mt), "mtime %v", fi.Mtime)
	assert.LessOrEqual(t, trips()-before, int64(1), "agent requests for the write: the commit alone")

	_, err = h.WriteFileStat(ctx, name, open(), providers.WriteOptions{Perm: 0o644, Exclusive: true})
	assert.ErrorIs(t, err, syscall.EEXIST, "an exclusive write over the file")

	before = trips()
	rc, err := h.ReadFileSized(ctx, name, fi.Size)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.Zero(t, trips()-before, "agent requests for the read")
	assert.True(t, bytes.Equal(data, got), "read back %d bytes", len(got))

	list, err := h.ReadDir(ctx, ws)
	require.NoError(t, err)
	var names []string
	for _, e := range list {
		names = append(names, e.Name)
	}
	assert.Equal(t, "big", strings.Join(names, ","), "no temporary name left")
}
