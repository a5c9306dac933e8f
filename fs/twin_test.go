package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `attach NAME2 provider=P id=ID` for a box already presented as NAME1 is
// refused with EEXIST, and err names NAME1: the two names would share the
// box's cache and command records.
func TestAttachTwinRefused(t *testing.T) {
	mnt := mount(t)
	newBox(t, mnt, "one")
	fields := strings.Fields(readFile(t, filepath.Join(mnt, "ctl")))
	require.Len(t, fields, 4, "root ctl: one box")
	id := fields[2]

	err := writeFile(t, filepath.Join(mnt, "ctl"), "attach two provider=local id="+id+"\n")
	require.ErrorIs(t, err, syscall.EEXIST)
	assert.Contains(t, readErr(mnt), `already attached as "one"`)
	_, err = os.Stat(filepath.Join(mnt, "two"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no second name")

	// Forgotten, the box can be attached under the other name.
	require.NoError(t, writeFile(t, filepath.Join(mnt, "ctl"), "forget one\n"), readErr(mnt))
	require.NoError(t, writeFile(t, filepath.Join(mnt, "ctl"), "attach two provider=local id="+id+"\n"), readErr(mnt))
	assert.Equal(t, "hi\n", run(t, mnt, "two", "echo hi"))
}
