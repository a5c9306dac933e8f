package fs_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
