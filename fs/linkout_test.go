package fs_test

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/providers/fake"
)

// A relative link a box made that climbs out of its work/ never leads, on
// the host, to the mount's control files or another box: on a box whose
// provider isolates it, it reads inside work/ (as an absolute target
// naming the same box path would), and a host write following it lands
// nowhere outside the box.
func TestRelativeSymlinkOutOfWorkTransformed(t *testing.T) {
	mnt, _ := mountFake(t, fake.NewClock(time.Now()))
	ctl := filepath.Join(mnt, "ctl")
	require.NoError(t, writeFile(t, ctl, "new a isolation=container\nnew b isolation=container\n"), readErr(mnt))
	w := filepath.Join(mnt, "a", "work")
	require.NoError(t, os.MkdirAll(filepath.Join(w, "d"), 0o755))
	ws := boxWorkspace(t, filepath.Join(mnt, "a"))
	// inWork is how the box path p reads from a link depth levels below
	// work/: up to work/, then down as if work/ were the box's root.
	inWork := func(depth int, p string) string {
		return strings.Repeat("../", depth) + strings.TrimPrefix(path.Clean(p), "/")
	}
	for name, tc := range map[string]struct{ target, want string }{
		"other-exec":  {"../../b/exec", inWork(0, ws+"/../../b/exec")},
		"own-exec":    {"../exec", inWork(0, ws+"/../exec")},
		"root-ctl":    {"../../ctl", inWork(0, ws+"/../../ctl")},
		"passwd":      {strings.Repeat("../", 20) + "etc/passwd", "etc/passwd"},
		"d/other":     {"../../../b/exec", inWork(1, ws+"/../../b/exec")},
		"d/in-work":   {"../x", "../x"},
		"through-dir": {"d/../../b/exec", inWork(0, ws+"/../b/exec")},
	} {
		require.NoError(t, os.Symlink(tc.target, filepath.Join(w, name)))
		assertLink(t, filepath.Join(w, name), tc.want)
		got, _ := os.Readlink(filepath.Join(w, name))
		assert.False(t, strings.HasPrefix(path.Join(path.Dir(name), got), ".."), "%s reads %q: out of work/", name, got)
	}
	for _, name := range []string{"other-exec", "own-exec", "root-ctl", "through-dir", "d/other"} {
		// At most a file inside a's own work/ is made.
		os.WriteFile(filepath.Join(w, name), []byte("touch /pwned\n"), 0o644)
	}
	assertNoCommands(t, filepath.Join(mnt, "b"))
	assertNoCommands(t, filepath.Join(mnt, "a"))
}

// A symlink with several names (a hard link to a symlink, which a box can
// make) reads without any leading "..": the kernel follows it from
// whichever name it came by, so from any of them it stays in work/.
func TestHardLinkedSymlinkStaysInWork(t *testing.T) {
	for _, mode := range []boxfs.Symlinks{boxfs.SymlinksTransform, boxfs.SymlinksAuto} {
		name := string(mode)
		if name == "" {
			name = "auto"
		}
		t.Run("symlinks="+name, func(t *testing.T) {
			mnt := mountWith(t, boxfs.MountOptions{Symlinks: mode})
			box := newBox(t, mnt, "a")
			newBox(t, mnt, "x")
			w := filepath.Join(box, "work")
			run(t, mnt, "a", "mkdir -p d/e && ln -s ../../x d/e/l && ln d/e/l top && ln -s ../../x d/e/single")
			fi, err := os.Lstat(filepath.Join(w, "top"))
			require.NoError(t, err)
			require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "ln made a hard link to the symlink itself")
			for _, name := range []string{"top", "d/e/l"} {
				got, err := os.Readlink(filepath.Join(w, name))
				require.NoError(t, err)
				if path.IsAbs(got) {
					// Kept on a local box: the host path it names in the box.
					assert.Equal(t, boxfs.SymlinksAuto, mode, "%s reads %q", name, got)
					assert.False(t, strings.HasPrefix(got, mnt+"/"), "%s reads %q: into the mount", name, got)
					continue
				}
				assert.False(t, strings.HasPrefix(got, ".."), "%s reads %q: a leading ..", name, got)
			}
			assertLink(t, filepath.Join(w, "d", "e", "single"), "../../x")
			_, err = os.Stat(filepath.Join(w, "top", "ctl"))
			assert.ErrorIs(t, err, os.ErrNotExist, "work/top does not lead to box x")
		})
	}
}

// On a local box (targets kept: its files are the host's own) a relative
// link climbing out of work/ reads as the host path it names in the box,
// never as a path into the mount.
func TestRelativeSymlinkOutOfWorkLocal(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	newBox(t, mnt, "b")
	w := filepath.Join(box, "work")
	ws := boxWorkspace(t, box)
	run(t, mnt, "a", "ln -s ../../b/exec other && ln -s ../ctl own && ln -s sub/../x inwork")
	assertLink(t, filepath.Join(w, "other"), filepath.Join(ws, "../../b/exec"))
	assertLink(t, filepath.Join(w, "own"), filepath.Join(ws, "../ctl"))
	assertLink(t, filepath.Join(w, "inwork"), "x")
	os.WriteFile(filepath.Join(w, "other"), []byte("touch pwned\n"), 0o644)
	assertNoCommands(t, filepath.Join(mnt, "b"))
}

// boxWorkspace is the box path of the box's workspace, from facts.json.
func boxWorkspace(t *testing.T, box string) string {
	t.Helper()
	var facts struct{ Workspace string }
	b := readFile(t, filepath.Join(box, "facts.json"))
	require.NoError(t, json.Unmarshal([]byte(b), &facts))
	require.NotEmpty(t, facts.Workspace)
	return facts.Workspace
}

// assertNoCommands checks that nothing ran in box.
func assertNoCommands(t *testing.T, box string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(box, "cmds"))
	require.NoError(t, err)
	for _, e := range ents {
		t.Errorf("%s ran a command: cmds/%s", box, e.Name())
	}
}
