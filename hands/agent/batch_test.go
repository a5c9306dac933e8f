package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

// A batch of files is one round trip when it fits inline, a few when it
// does not; every file is written whole with its options, answered with
// what Lstat says of it or with its own errno, and no temporary name is
// left.
func TestWriteFiles(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "taken"), []byte("box"), 0o644))
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	batch := func(big int) []providers.FileWrite {
		data := bytes.Repeat([]byte("y"), big)
		return []providers.FileWrite{
			{Name: filepath.Join(dir, "a"), Data: strings.NewReader("alpha"), Size: 5, Options: providers.WriteOptions{Perm: 0o640, Mtime: mtime, Exclusive: true}},
			{Name: filepath.Join(dir, "taken"), Data: strings.NewReader("host"), Size: 4, Options: providers.WriteOptions{Perm: 0o644, Exclusive: true}},
			{Name: filepath.Join(dir, "missing", "b"), Data: strings.NewReader("b"), Size: 1, Options: providers.WriteOptions{Perm: 0o644}},
			{Name: filepath.Join(dir, "big"), Data: bytes.NewReader(data), Size: int64(big), Options: providers.WriteOptions{Perm: 0o600, ForceMode: true}},
		}
	}
	for _, tc := range []struct {
		name  string
		big   int
		trips int64
	}{{"inline", 1000, 1}, {"streamed", inlineMax + 1000, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "a"))
			before := c.RoundTrips()
			res, err := c.WriteFiles(ctx, batch(tc.big))
			require.NoError(t, err)
			assert.LessOrEqual(t, c.RoundTrips()-before, tc.trips)
			require.Len(t, res, 4)
			if assert.NoError(t, res[0].Err) {
				want, err := c.Lstat(ctx, filepath.Join(dir, "a"))
				require.NoError(t, err)
				assert.Equal(t, infoString(want), infoString(res[0].Info))
				assert.True(t, res[0].Info.Mtime.Equal(mtime))
				assert.Equal(t, os.FileMode(0o640), res[0].Info.Mode)
			}
			assert.ErrorIs(t, res[1].Err, syscall.EEXIST)
			assert.ErrorIs(t, res[2].Err, syscall.ENOENT)
			if assert.NoError(t, res[3].Err) {
				assert.EqualValues(t, tc.big, res[3].Info.Size)
			}
			b, _ := os.ReadFile(filepath.Join(dir, "taken"))
			assert.Equal(t, "box", string(b), "an exclusive member over a file")
			b, _ = os.ReadFile(filepath.Join(dir, "a"))
			assert.Equal(t, "alpha", string(b))
			ents, _ := os.ReadDir(dir)
			assert.Len(t, ents, 3, "a, big, taken and nothing else: %v", ents)
		})
	}
}
