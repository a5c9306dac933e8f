package agent

import (
	"bytes"
	"fmt"
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

// A batch of many tiny files, whose tar's headers outweigh its data,
// arrives whole: it is streamed when its tar passes what one packet holds.
func TestWriteFilesManySmall(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	for _, n := range []int{10, 150, 400, batchMax + 5} {
		dir := t.TempDir()
		files := make([]providers.FileWrite, n)
		for i := range files {
			files[i] = providers.FileWrite{Name: filepath.Join(dir, fmt.Sprintf("file-with-a-longer-name-%04d", i)),
				Data: strings.NewReader("x"), Size: 1, Options: providers.WriteOptions{Perm: 0o644, Mtime: time.Unix(1e9, 0)}}
		}
		res, err := c.WriteFiles(ctx, files)
		require.NoError(t, err, "%d files", n)
		require.Len(t, res, n)
		for i, r := range res {
			require.NoError(t, r.Err, "file %d of %d", i, n)
		}
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, ents, n)
	}
}

// Directory members make a directory (an existing one is fine, a file in
// its place is not) and set a directory's owner, mode and times, in the
// batch's order: files written into it do not move the times set after.
func TestWriteFilesDirectories(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	mt := time.Date(2001, 1, 1, 0, 0, 0, 5, time.UTC)
	d := filepath.Join(dir, "d")
	res, err := c.WriteFiles(ctx, []providers.FileWrite{
		{Name: d, Dir: true, Make: true, Options: providers.WriteOptions{Perm: 0o750, ForceMode: true}},
		{Name: d, Dir: true, Make: true, Options: providers.WriteOptions{Perm: 0o750, ForceMode: true}},
		{Name: filepath.Join(dir, "file"), Dir: true, Make: true, Options: providers.WriteOptions{Perm: 0o755}},
		{Name: filepath.Join(d, "f"), Data: strings.NewReader("f"), Size: 1, Options: providers.WriteOptions{Perm: 0o644}},
		{Name: d, Dir: true, Options: providers.WriteOptions{Perm: 0o700, ForceMode: true, Mtime: mt, Atime: mt}},
		{Name: filepath.Join(dir, "missing"), Dir: true, Options: providers.WriteOptions{Mtime: mt}},
	})
	require.NoError(t, err)
	require.Len(t, res, 6)
	assert.NoError(t, res[0].Err)
	assert.NoError(t, res[1].Err, "an existing directory")
	assert.ErrorIs(t, res[2].Err, syscall.EEXIST, "a file where a directory is made")
	assert.NoError(t, res[3].Err)
	if assert.NoError(t, res[4].Err) {
		assert.True(t, res[4].Info.IsDir())
		assert.True(t, res[4].Info.Mtime.Equal(mt), "answered mtime %v", res[4].Info.Mtime)
		assert.Equal(t, os.ModeDir|0o700, res[4].Info.Mode)
	}
	assert.ErrorIs(t, res[5].Err, syscall.ENOENT, "attributes of a missing directory")
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(d, &st))
	assert.Equal(t, mt.UnixNano(), st.Mtim.Nano())
}
