package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/providers/fake"
)

// A file the box hard-linked from the host is not written in place by a
// host write through the mount: the box's name gets the bytes, the host's
// file keeps its own.
func TestPushNeverWritesThroughAnOutsideLink(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	host := filepath.Join(t.TempDir(), "host.txt")
	require.NoError(t, os.WriteFile(host, []byte("the host's\n"), 0o644))
	run(t, mnt, "a", "ln "+host+" linked")
	name := filepath.Join(box, "work", "linked")
	fi, err := os.Stat(name)
	require.NoError(t, err)
	require.EqualValues(t, 2, fi.Sys().(*syscall.Stat_t).Nlink)
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("HOST"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close(), readFile(t, filepath.Join(box, "err")))
	got, _ := os.ReadFile(host)
	assert.Equal(t, "the host's\n", string(got))
	assert.Equal(t, "HOSThost's\n", run(t, mnt, "a", "cat linked"))
}

// On a box whose provider isolates it, an absolute symlink the box made
// reads as a path relative to its place in work/, so that host tools
// following it stay inside the mount; on a local box (the host's own
// files) it reads as it is, unless the mount says otherwise.
func TestSymlinkPresentation(t *testing.T) {
	hostDir := t.TempDir()
	links := func(t *testing.T, w string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Join(w, "d", "e"), 0o755))
		require.NoError(t, os.Symlink(hostDir, filepath.Join(w, "host")))
		require.NoError(t, os.Symlink(hostDir, filepath.Join(w, "d", "e", "host")))
		require.NoError(t, os.Symlink("rel/x", filepath.Join(w, "d", "rel")))
	}
	t.Run("isolated=transform", func(t *testing.T) {
		mnt, _ := mountFake(t, fake.NewClock(time.Now()))
		require.NoError(t, writeFile(t, filepath.Join(mnt, "ctl"), "new a isolation=container\n"), readErr(mnt))
		w := filepath.Join(mnt, "a", "work")
		links(t, w)
		top := strings.TrimPrefix(hostDir, "/")
		assertLink(t, filepath.Join(w, "host"), top)
		assertLink(t, filepath.Join(w, "d", "e", "host"), "../../"+top)
		assertLink(t, filepath.Join(w, "d", "rel"), "rel/x")
		err := os.WriteFile(filepath.Join(w, "host", "planted"), []byte("x"), 0o644)
		assert.Error(t, err, "the write follows the link inside the mount, where nothing is")
		_, err = os.Stat(filepath.Join(hostDir, "planted"))
		assert.ErrorIs(t, err, os.ErrNotExist, "nothing landed in the host's directory")
	})
	t.Run("local=as-is", func(t *testing.T) {
		mnt := mount(t)
		w := filepath.Join(newBox(t, mnt, "a"), "work")
		links(t, w)
		assertLink(t, filepath.Join(w, "d", "e", "host"), hostDir)
	})
	t.Run("local/symlinks=transform", func(t *testing.T) {
		mnt := mountWith(t, boxfs.MountOptions{Symlinks: boxfs.SymlinksTransform})
		w := filepath.Join(newBox(t, mnt, "a"), "work")
		links(t, w)
		assertLink(t, filepath.Join(w, "d", "e", "host"), "../../"+strings.TrimPrefix(hostDir, "/"))
	})
}

func assertLink(t *testing.T, name, want string) {
	t.Helper()
	got, err := os.Readlink(name)
	require.NoError(t, err)
	assert.Equal(t, want, got, name)
}
