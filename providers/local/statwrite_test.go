package local_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// WriteFileStat gives the new content o's attributes, answers what Lstat
// then says, keeps an existing file's mode unless told, and with Exclusive
// takes only a free name.
func TestWriteFileStat(t *testing.T) {
	p := local.New(t.TempDir())
	box, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { box.Destroy(t.Context()) })
	sw := box.(providers.StatWriter)
	files := box.(providers.Files)
	facts, err := box.Facts(t.Context())
	require.NoError(t, err)
	dir := filepath.Join(facts.Workspace, "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	name := filepath.Join(dir, "f")
	ctx := t.Context()

	mtime := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	fi, err := sw.WriteFileStat(ctx, name, strings.NewReader("one"), providers.WriteOptions{Perm: 0o640, Mtime: mtime, Exclusive: true})
	require.NoError(t, err)
	want, err := files.Lstat(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, want, fi, "the answer is what Lstat says")
	assert.EqualValues(t, 3, fi.Size)
	assert.Equal(t, os.FileMode(0o640), fi.Mode)
	assert.True(t, fi.Mtime.Equal(mtime), "mtime %v", fi.Mtime)

	_, err = sw.WriteFileStat(ctx, name, strings.NewReader("two"), providers.WriteOptions{Perm: 0o600, Exclusive: true})
	assert.ErrorIs(t, err, syscall.EEXIST, "exclusive write over a file")
	b, _ := os.ReadFile(name)
	assert.Equal(t, "one", string(b), "the refused write left the file")

	fi, err = sw.WriteFileStat(ctx, name, strings.NewReader("three"), providers.WriteOptions{Perm: 0o600})
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode, "an existing file keeps its mode")
	fi, err = sw.WriteFileStat(ctx, name, strings.NewReader("four"), providers.WriteOptions{Perm: 0o711 | os.ModeSetgid, ForceMode: true})
	require.NoError(t, err)
	assert.Equal(t, 0o711|os.ModeSetgid, fi.Mode, "forced mode")
	ents, _ := os.ReadDir(dir)
	assert.Len(t, ents, 1, "no temporary name left: %v", ents)

	_, err = sw.WriteFileStat(ctx, filepath.Join(facts.Workspace, "missing", "f"), strings.NewReader("x"), providers.WriteOptions{Perm: 0o644})
	assert.ErrorIs(t, err, syscall.ENOENT)
}
