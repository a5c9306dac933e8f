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

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// A file whose push the box refuses keeps every barrier failing until
// setaside moves the host's copy out of the way: then flush passes, the
// copy is where err says, and the name is the box's again.
func TestSetAsideRefusedPush(t *testing.T) {
	mnt, fp := mountFake(t, fake.NewClock(time.Now()))
	box := newBox(t, mnt, "a")
	w := filepath.Join(box, "work")
	require.NoError(t, os.WriteFile(filepath.Join(w, "kept.txt"), []byte("box has it\n"), 0o644))

	// From now on the box refuses every write.
	fp.On(fake.Match{Op: "WriteFile"}).Fail(providers.Permission)
	fp.On(fake.Match{Op: "PutArchive"}).Fail(providers.Permission)
	fp.On(fake.Match{Op: "WriteAt"}).Fail(providers.Permission)
	fp.On(fake.Match{Op: "CreateFile"}).Fail(providers.Permission)
	os.WriteFile(filepath.Join(w, "new.txt"), []byte("host only\n"), 0o644)
	os.WriteFile(filepath.Join(w, "kept.txt"), []byte("host's change\n"), 0o644)
	ctl := filepath.Join(box, "ctl")
	require.Error(t, writeFile(t, ctl, "flush\n"), "a flush with a refused push")
	dirty := readFile(t, ctl)
	require.Contains(t, dirty, "dirty=", dirty)
	require.NotContains(t, dirty, "dirty=0", "the refused files stay dirty")

	// Bad paths are refused before anything runs.
	for _, bad := range []string{"setaside\n", "setaside ../x\n", "setaside /etc/passwd\n", "setaside a/../kept.txt\n"} {
		assert.ErrorIs(t, writeFile(t, ctl, bad), syscall.EINVAL, bad)
	}
	assert.ErrorIs(t, writeFile(t, ctl, "setaside nothing-held.txt\n"), syscall.ENOENT)

	for _, rel := range []string{"new.txt", "kept.txt"} {
		require.NoError(t, writeFile(t, ctl, "setaside "+rel+"\n"), "setaside %s: %s", rel, readFile(t, filepath.Join(box, "err")))
		e := readFile(t, filepath.Join(box, "err"))
		i := strings.Index(e, " are in ")
		require.True(t, i >= 0, "err says where: %q", e)
		copyPath := strings.Fields(e[i+len(" are in "):])[0]
		copyPath = strings.TrimSuffix(copyPath, ";")
		got, err := os.ReadFile(copyPath)
		require.NoError(t, err, "the copy err names")
		want := map[string]string{"new.txt": "host only\n", "kept.txt": "host's change\n"}[rel]
		assert.Equal(t, want, string(got))
		fi, err := os.Stat(copyPath)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	}
	require.NoError(t, writeFile(t, ctl, "flush\n"), "flush after setaside: %s", readFile(t, filepath.Join(box, "err")))
	require.NoError(t, writeFile(t, ctl, "sync\n"))
	assert.Contains(t, readFile(t, ctl), "dirty=0")
	_, err := os.Stat(filepath.Join(w, "new.txt"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a file the box never had is gone")
	assert.Equal(t, "box has it\n", readFile(t, filepath.Join(w, "kept.txt")))
}
