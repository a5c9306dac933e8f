package fs_test

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	boxfs "github.com/boxfs/boxfs/fs"
)

// otherName is the second user the permission tests act as.
const otherName = "boxfs-test-other"

// otherUser returns the uid and gid of a user who is not the one who
// mounted, made with useradd if missing. The tests run as root (CI does).
func otherUser(t *testing.T) (uint32, uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the permission tests make a second user and run as root")
	}
	u, err := user.Lookup(otherName)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", otherName).CombinedOutput()
		require.NoError(t, err, "useradd: %s", out)
		u, err = user.Lookup(otherName)
		require.NoError(t, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	require.NoError(t, err)
	gid, err := strconv.Atoi(u.Gid)
	require.NoError(t, err)
	return uint32(uid), uint32(gid)
}

// as runs the sh script as uid:gid (args are $1 ...) and returns what it
// printed, and its error.
func as(t *testing.T, uid, gid uint32, script string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// reachable lets other users walk to the mount point (test directories
// are 0700).
func reachable(t *testing.T, mnt string) {
	t.Helper()
	require.NoError(t, os.Chmod(filepath.Dir(mnt), 0o755))
}

// On a mount without allow_other, another user reaches nothing.
func TestOtherUserPrivateMount(t *testing.T) {
	uid, gid := otherUser(t)
	mnt := mount(t)
	reachable(t, mnt)
	box := newBox(t, mnt, "a")
	require.NoError(t, os.WriteFile(filepath.Join(box, "work", "f"), []byte("root's\n"), 0o644))
	for _, script := range []string{
		`ls "$1"`, `cat "$1/ctl"`, `echo new x > "$1/ctl"`, `ls "$1/a/work"`, `cat "$1/a/work/f"`,
		`echo id > "$1/a/exec"`, `stat "$1/a"`,
	} {
		out, err := as(t, uid, gid, script, mnt)
		assert.Error(t, err, "%s: %s", script, out)
		assert.Contains(t, out, "Permission denied", script)
	}
	_, err := os.Stat(filepath.Join(mnt, "x"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// A shared mount (allow_other) applies POSIX permissions on true owners:
// control files are the mounting user's, 0600 or 0400, and the workspace
// is what its modes say. What another user makes in work/ is theirs in the
// box.
func TestOtherUserSharedMount(t *testing.T) {
	uid, gid := otherUser(t)
	mnt := mountWith(t, boxfs.MountOptions{AllowOther: true})
	reachable(t, mnt)
	box := newBox(t, mnt, "a")
	w := filepath.Join(box, "work")
	require.NoError(t, os.WriteFile(filepath.Join(w, "secret"), []byte("root only\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(w, "public"), []byte("everyone reads\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(w, "shared"), 0o777))
	require.NoError(t, os.Chmod(filepath.Join(w, "shared"), 0o777))
	require.Equal(t, "hi\n", run(t, mnt, "a", "echo hi"))

	modes := map[string]os.FileMode{
		"ctl": 0o600, "err": 0o400, "a/ctl": 0o600, "a/exec": 0o600, "a/err": 0o400,
		"a/facts.json": 0o400, "a/receipt.json": 0o400, "a/cmds/1/ctl": 0o600,
		"a/cmds/1/cmd": 0o400, "a/cmds/1/out": 0o400, "a/cmds/1/status": 0o400,
	}
	for p, mode := range modes {
		fi, err := os.Stat(filepath.Join(mnt, p))
		require.NoError(t, err, p)
		assert.Equal(t, mode, fi.Mode().Perm(), p)
		st := fi.Sys().(*syscall.Stat_t)
		assert.Equal(t, [2]uint32{uint32(os.Geteuid()), uint32(os.Getegid())}, [2]uint32{st.Uid, st.Gid}, p)
	}

	refused := []string{
		`cat "$1/ctl"`, `echo new x > "$1/ctl"`, `mkdir "$1/x"`, `rmdir "$1/a"`,
		`echo 'id; head -1 /etc/shadow' > "$1/a/exec"`, `cat "$1/a/exec"`, `echo destroy > "$1/a/ctl"`,
		`cat "$1/a/ctl"`, `cat "$1/a/err"`, `cat "$1/a/facts.json"`, `cat "$1/a/cmds/1/out"`,
		`cat "$1/a/cmds/1/cmd"`, `echo kill > "$1/a/cmds/1/ctl"`,
		`cat "$1/a/work/secret"`, `echo x >> "$1/a/work/public"`, `echo x > "$1/a/work/new"`,
		`mkdir "$1/a/work/d"`, `rm "$1/a/work/public"`, `mv "$1/a/work/public" "$1/a/work/shared/p"`,
		`chmod 4755 "$1/a/work/public"`, `chown ` + otherName + ` "$1/a/work/public"`,
		`touch -d 2001-01-01 "$1/a/work/public"`,
	}
	for _, script := range refused {
		out, err := as(t, uid, gid, script, mnt)
		assert.Error(t, err, "%s: %s", script, out)
		assert.True(t, strings.Contains(out, "Permission denied") || strings.Contains(out, "Operation not permitted"), "%s: %s", script, out)
	}
	assert.Equal(t, "root only\n", readFile(t, filepath.Join(w, "secret")))
	assert.Equal(t, "everyone reads\n", readFile(t, filepath.Join(w, "public")))
	ls := readFile(t, filepath.Join(mnt, "ctl"))
	assert.Equal(t, 1, strings.Count(ls, "\n"), "no box made: %s", ls)
	assert.Empty(t, run(t, mnt, "a", "ls /tmp/boxfs-owned-by-other 2>/dev/null"))

	// What the modes allow.
	allowed := []string{
		`ls "$1" "$1/a" "$1/a/work"`, `cat "$1/a/work/public"`,
		`echo mine > "$1/a/work/shared/mine" && cat "$1/a/work/shared/mine"`,
		`mkdir "$1/a/work/shared/dir" && echo in > "$1/a/work/shared/dir/f"`,
		`ln -s mine "$1/a/work/shared/link"`,
		`chmod 640 "$1/a/work/shared/mine"`,
	}
	for _, script := range allowed {
		out, err := as(t, uid, gid, script, mnt)
		assert.NoError(t, err, "%s: %s", script, out)
	}
	owner := fmt.Sprintf("%d:%d", uid, gid)
	got := run(t, mnt, "a", "stat -c '%n %u:%g %a' shared/mine shared/dir shared/dir/f; stat -c '%n %u:%g' shared/link public")
	assert.Equal(t, fmt.Sprintf("shared/mine %[1]s 640\nshared/dir %[1]s 755\nshared/dir/f %[1]s 644\nshared/link %[1]s\npublic 0:0\n", owner), got)
	for _, p := range []string{"shared/mine", "shared/dir", "shared/dir/f", "shared/link"} {
		fi, err := os.Lstat(filepath.Join(w, p))
		require.NoError(t, err, p)
		st := fi.Sys().(*syscall.Stat_t)
		assert.Equal(t, owner, fmt.Sprintf("%d:%d", st.Uid, st.Gid), p)
	}
	out, err := as(t, uid, gid, `echo more >> "$1/a/work/shared/mine" && cat "$1/a/work/shared/mine"`, mnt)
	assert.NoError(t, err, out)
	assert.Equal(t, "mine\nmore\n", out)
	fi, err := os.Stat(filepath.Join(w, "shared", "mine"))
	require.NoError(t, err)
	assert.Equal(t, owner, fmt.Sprintf("%d:%d", fi.Sys().(*syscall.Stat_t).Uid, fi.Sys().(*syscall.Stat_t).Gid), "a push keeps the owner")
}

// With a group given at mount, its members get the owner's access to the
// control files: they can run commands and read their output.
func TestOtherUserGroupMount(t *testing.T) {
	uid, gid := otherUser(t)
	mnt := mountWith(t, boxfs.MountOptions{AllowOther: true, Group: gid})
	reachable(t, mnt)
	newBox(t, mnt, "a")
	fi, err := os.Stat(filepath.Join(mnt, "a", "exec"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), fi.Mode().Perm())
	assert.Equal(t, gid, fi.Sys().(*syscall.Stat_t).Gid)
	fi, err = os.Stat(filepath.Join(mnt, "a", "facts.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o440), fi.Mode().Perm())

	out, err := as(t, uid, gid, `exec 3<>"$1/a/exec" && echo 'echo from-group' >&3 && cat <&3 && cat "$1/a/cmds/1/status" "$1/ctl"`, mnt)
	require.NoError(t, err, out)
	assert.True(t, strings.HasPrefix(out, "from-group\nexit 0\na local "), out)
	out, err = as(t, uid, gid, `echo x > "$1/a/facts.json"`, mnt)
	assert.Error(t, err, out)
}
