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

// A file OpenHostWrite makes has exactly the mode asked for, whatever the
// daemon's umask takes from it, special bits included, and answers that
// mode; an existing file opened with O_CREAT keeps its own.
func TestOpenHostWriteCreateMode(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
	p := local.New(t.TempDir())
	box, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { box.Destroy(t.Context()) })
	hw := box.(providers.HostWriter)
	facts, err := box.Facts(t.Context())
	require.NoError(t, err)
	for i, perm := range []providers.FileMode{0o644, 0o666, 0o600, 0, 0o777 | os.ModeSetgid, 0o755 | os.ModeSetuid} {
		name := filepath.Join(facts.Workspace, "f"+string(rune('a'+i)))
		f, fi, err := hw.OpenHostWrite(t.Context(), name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		require.NoError(t, err, "perm %v", perm)
		f.Close()
		assert.Equal(t, perm, fi.Mode, "answered mode of a file made with %v", perm)
		st, err := os.Lstat(name)
		require.NoError(t, err)
		assert.Equal(t, perm, st.Mode(), "mode on disk of a file made with %v", perm)
	}
	name := filepath.Join(facts.Workspace, "fa")
	f, fi, err := hw.OpenHostWrite(t.Context(), name, os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	f.Close()
	assert.Equal(t, providers.FileMode(0o644), fi.Mode, "an existing file keeps its mode")
}
