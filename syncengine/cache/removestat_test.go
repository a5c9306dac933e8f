package cache_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// localChange is a local box's watch's report of rel: its attributes as
// an lstat after the change finds them.
func localChange(t *testing.T, ws, rel string) providers.Change {
	t.Helper()
	st, err := os.Lstat(filepath.Join(ws, rel))
	if os.IsNotExist(err) {
		return providers.Change{Path: rel, Gone: true}
	}
	require.NoError(t, err)
	s := st.Sys().(*syscall.Stat_t)
	fi := providers.FileInfo{
		Name: st.Name(), Mode: st.Mode(), Size: st.Size(), Mtime: st.ModTime(),
		Ctime: time.Unix(s.Ctim.Sec, s.Ctim.Nsec), Ino: s.Ino, Nlink: uint32(s.Nlink), Dev: s.Dev,
	}
	return providers.Change{Path: rel, Info: &fi}
}

// On a local box, git's way of writing an object (a temporary file, a
// hard link to it under the object's name, the temporary removed) and an
// editor's rename over a file are answered with what they left (the
// object's link count and change time, the moved file's change time):
// the watch's reports of the names they changed are their echoes,
// dropped. A box change right after is taken (F-echo, F-watch).
func TestLinkRemoveAndRenameEchoOnLocalBox(t *testing.T) {
	c, ws, _ := localCache(t)
	ctx := t.Context()
	write(t, c, "tmp_obj", "object").Release(ctx)
	_, err := c.Link(ctx, "tmp_obj", "obj")
	require.NoError(t, err)
	require.NoError(t, c.Remove(ctx, "tmp_obj"))
	before := c.Reports()
	assert.Empty(t, c.Reported([]providers.Change{localChange(t, ws, "obj"), localChange(t, ws, "tmp_obj")}, false))
	assert.Equal(t, cache.ReportCounts{Taken: before.Taken, Echoes: before.Echoes + 2}, c.Reports(), "after link and unlink")

	write(t, c, "f", "saved").Release(ctx)
	write(t, c, "g", "replaced").Release(ctx)
	require.NoError(t, c.Rename(ctx, "f", "g"))
	before = c.Reports()
	assert.Empty(t, c.Reported([]providers.Change{localChange(t, ws, "f"), localChange(t, ws, "g")}, false))
	assert.Equal(t, cache.ReportCounts{Taken: before.Taken, Echoes: before.Echoes + 2}, c.Reports(), "after the rename")

	// The box changes the object's mode behind the host's back.
	require.NoError(t, os.Chmod(filepath.Join(ws, "obj"), 0o444))
	assert.Equal(t, []string{"obj"}, c.Reported([]providers.Change{localChange(t, ws, "obj")}, false))
	fi, err := c.Getattr(ctx, "obj")
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o444), fi.Mode.Perm())
}
