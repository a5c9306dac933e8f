package fs_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// controlFiles are the names every box directory holds.
var controlFiles = []string{"ctl", "exec", "cmds", "facts.json", "receipt.json", "err", "work"}

// rm -rf of everything in the mount empties the boxes' workspaces, and
// leaves every control file in place and every box alive.
func TestControlFilesCannotBeRemoved(t *testing.T) {
	mnt := mount(t)
	for _, name := range []string{"a", "b"} {
		box := newBox(t, mnt, name)
		require.NoError(t, os.WriteFile(filepath.Join(box, "work", "f"), []byte("x"), 0o644))
		assert.Equal(t, "hi\n", run(t, mnt, name, "echo hi"))
	}

	out, err := exec.Command("sh", "-c", "rm -rf "+mnt+"/*").CombinedOutput()
	assert.Error(t, err, "rm -rf of control files succeeded: %s", out)
	for _, p := range []string{"ctl", "a/ctl", "a/cmds/1/ctl", "a/cmds/1/out", "a/cmds/last"} {
		assert.ErrorIs(t, os.Remove(filepath.Join(mnt, p)), syscall.EPERM, "rm %s", p)
	}
	for _, p := range []string{"a", "a/work", "a/cmds", "a/cmds/1"} {
		assert.ErrorIs(t, syscall.Rmdir(filepath.Join(mnt, p)), syscall.EPERM, "rmdir %s", p)
	}
	for _, p := range []string{"ctl", "a", "a/ctl", "a/work", "a/cmds/1", "a/cmds/1/out"} {
		err := os.Rename(filepath.Join(mnt, p), filepath.Join(mnt, p+"x"))
		assert.True(t, errors.Is(err, syscall.EPERM), "mv %s: %v", p, err)
	}

	ents, err := os.ReadDir(mnt)
	require.NoError(t, err, "ls after rm")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"a", "b", "ctl", "err"}, names)
	for _, name := range []string{"a", "b"} {
		for _, f := range controlFiles {
			_, err := os.Lstat(filepath.Join(mnt, name, f))
			assert.NoError(t, err, "%s/%s after rm -rf", name, f)
		}
		_, err := os.Lstat(filepath.Join(mnt, name, "cmds", "1", "out"))
		assert.NoError(t, err, "%s/cmds/1/out after rm -rf", name)
		w, err := os.ReadDir(filepath.Join(mnt, name, "work"))
		assert.NoError(t, err)
		assert.Empty(t, w, "rm -rf empties the workspace")
		assert.Equal(t, "alive\n", run(t, mnt, name, "echo alive"))
	}
	assert.True(t, strings.Contains(readFile(t, filepath.Join(mnt, "ctl")), "a local "))
}

// chmod and chown of a control file are refused (EPERM), never answered
// with a success that changed nothing; `> ctl` (a truncate) and touch
// still work.
func TestControlFilesKeepModeAndOwner(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	launch := filepath.Join(box, "launch", "web")
	require.NoError(t, os.Mkdir(launch, 0o755))
	for _, p := range []string{filepath.Join(mnt, "ctl"), filepath.Join(box, "ctl"), filepath.Join(box, "exec"),
		filepath.Join(launch, "secrets"), filepath.Join(launch, "stdin"), filepath.Join(launch, "ctl")} {
		before, err := os.Stat(p)
		require.NoError(t, err)
		assert.ErrorIs(t, os.Chmod(p, 0o777), syscall.EPERM, "chmod %s", p)
		assert.ErrorIs(t, os.Chown(p, 1, 1), syscall.EPERM, "chown %s", p)
		after, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, before.Mode(), after.Mode(), "%s", p)
	}
	require.NoError(t, exec.Command("touch", filepath.Join(box, "exec")).Run(), "touch exec")
	assert.Equal(t, "hi\n", run(t, mnt, "a", "echo hi"))
}
