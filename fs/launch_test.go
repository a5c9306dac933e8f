package fs_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/launch"
)

// readState reads launch/NAME/state.
func readState(t *testing.T, dir string) launch.State {
	t.Helper()
	var st launch.State
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "state"))), &st))
	return st
}

func waitPhase(t *testing.T, dir string, want launch.Phase) launch.State {
	t.Helper()
	var st launch.State
	require.Eventually(t, func() bool {
		st = readState(t, dir)
		return st.Phase == want
	}, 30*time.Second, 100*time.Millisecond, "phase %s", want)
	return st
}

// A launch as files: mkdir, secrets and stdin written, ctl start, state,
// out.log followed to the end, ctl stop; and a launch message in the
// box's ctl.
func TestLaunchFiles(t *testing.T) {
	mnt := mount(t)
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "b"), 0o755))
	launches := filepath.Join(mnt, "b", "launch")
	ents, err := os.ReadDir(launches)
	require.NoError(t, err)
	assert.Empty(t, ents)

	dir := filepath.Join(launches, "web")
	require.NoError(t, os.Mkdir(dir, 0o755))
	assert.Equal(t, "phase=new incarnation=0 restarts=0\n", readFile(t, filepath.Join(dir, "ctl")))
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []string
	for _, e := range names {
		files = append(files, e.Name())
	}
	assert.ElementsMatch(t, []string{"ctl", "state", "out.log", "secrets", "stdin"}, files)

	require.NoError(t, writeFile(t, filepath.Join(dir, "secrets"), "TOKEN=s3cret\nOTHER=x\n"))
	require.NoError(t, writeFile(t, filepath.Join(dir, "stdin"), "hello stdin\n"))
	_, err = os.ReadFile(filepath.Join(dir, "secrets"))
	assert.ErrorIs(t, err, syscall.EACCES, "secrets are never read back")
	fi, err := os.Stat(filepath.Join(dir, "secrets"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	startWithInput(t, dir)
	followToStop(t, dir)

	// The secrets were taken by the start: a restart of the ended launch
	// needs them again.
	err = writeFile(t, filepath.Join(dir, "ctl"), "restart\n")
	assert.ErrorIs(t, err, syscall.EPERM, "restart without the secrets")
	assert.Contains(t, readFile(t, filepath.Join(mnt, "b", "err")), "secrets")
	launchFilesRefusals(t, mnt, launches, dir)
}

// startWithInput starts the launch in dir with the secrets and stdin
// written for it; the program prints what it got.
func startWithInput(t *testing.T, dir string) {
	prog := `read -r line; echo "got $line"; tr "\0" "\n" <&$BOXFS_SECRETS_FD | sort | tr "\n" " "; echo; echo ready; exec sleep 300`
	require.NoError(t, writeFile(t, filepath.Join(dir, "ctl"), "start grace=1s -- sh -c '"+prog+"'\n"))
	st := waitPhase(t, dir, launch.Running)
	assert.True(t, st.Secrets)
	assert.Contains(t, readFile(t, filepath.Join(dir, "ctl")), "phase=running incarnation=1")
}

// followToStop reads out.log as the launch runs, then stops it: the
// reader gets EOF.
func followToStop(t *testing.T, dir string) {
	// out.log follows: a reader sees the output as it comes, and EOF once
	// the launch is stopped.
	f, err := os.Open(filepath.Join(dir, "out.log"))
	require.NoError(t, err)
	defer f.Close()
	r := bufio.NewReader(f)
	for _, want := range []string{"got hello stdin\n", "OTHER=x TOKEN=s3cret \n", "ready\n"} {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, want, line)
	}
	// Opened non-blocking, the end of a running launch's output is EAGAIN.
	fd, err := unix.Open(filepath.Join(dir, "out.log"), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	require.NoError(t, err)
	assert.Equal(t, "got hello stdin\nOTHER=x TOKEN=s3cret \nready\n", string(buf[:n]))
	_, err = unix.Read(fd, buf)
	assert.ErrorIs(t, err, unix.EAGAIN)
	unix.Close(fd)

	done := make(chan error, 1)
	go func() {
		rest, err := io.ReadAll(r)
		if err == nil && len(rest) > 0 {
			err = errors.New("more output: " + string(rest))
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("out.log ended while the launch runs: %v", err)
	case <-time.After(time.Second):
	}
	require.NoError(t, writeFile(t, filepath.Join(dir, "ctl"), "stop grace=0\n"))
	select {
	case err := <-done:
		assert.NoError(t, err, "out.log ends at the stop, with nothing more")
	case <-time.After(30 * time.Second):
		t.Fatal("out.log did not end after the stop")
	}
	assert.Equal(t, launch.Stopped, readState(t, dir).Phase)
}

// launchFilesRefusals: a launch message in the box's ctl, bad messages,
// and rmdir.
func launchFilesRefusals(t *testing.T, mnt, launches, dir string) {
	// A launch message in the box's ctl.
	require.NoError(t, writeFile(t, filepath.Join(mnt, "b", "ctl"), "launch api restart=off -- sh -c 'echo api up'\n"))
	waitPhase(t, filepath.Join(launches, "api"), launch.Exited)
	assert.Equal(t, "api up\n", readFile(t, filepath.Join(launches, "api", "out.log")))
	ents, err := os.ReadDir(launches)
	require.NoError(t, err)
	assert.Len(t, ents, 2)

	// Bad messages fail the whole write.
	for _, bad := range []string{"start\n", "frob\n", "start restart=maybe -- true\n", "start env.API_KEY=x -- true\n", "stop now\n"} {
		assert.ErrorIs(t, writeFile(t, filepath.Join(dir, "ctl"), bad), syscall.EINVAL, "%q", bad)
	}
	assert.ErrorIs(t, writeFile(t, filepath.Join(dir, "secrets"), "no equals sign\n"), syscall.EINVAL)
	assert.ErrorIs(t, os.Mkdir(filepath.Join(launches, ".hidden"), 0o755), syscall.EINVAL)
	_, err = os.Stat(filepath.Join(launches, "nosuch"))
	assert.ErrorIs(t, err, syscall.ENOENT)

	// Nothing of a launch can be removed or renamed (rm -rf MOUNT/* leaves
	// it); remove in its ctl forgets an ended one, not a running one; rmdir
	// forgets only a name made and never started.
	require.NoError(t, writeFile(t, filepath.Join(dir, "ctl"), "start -- sleep 300\n"))
	waitPhase(t, dir, launch.Running)
	out, err := exec.Command("sh", "-c", "rm -rf "+mnt+"/*").CombinedOutput()
	assert.Error(t, err, "rm -rf: %s", out)
	for _, f := range []string{"ctl", "state", "out.log", "secrets", "stdin"} {
		_, err := os.Lstat(filepath.Join(dir, f))
		assert.NoError(t, err, "%s after rm -rf", f)
	}
	assert.ErrorIs(t, os.Rename(dir, dir+"2"), syscall.EPERM)
	assert.ErrorIs(t, syscall.Rmdir(filepath.Join(launches, "api")), syscall.EPERM, "an ended launch the box has")
	assert.Equal(t, launch.Running, readState(t, dir).Phase, "rm -rf stopped nothing")
	assert.ErrorIs(t, writeFile(t, filepath.Join(dir, "ctl"), "remove\n"), syscall.EPERM, "a running launch stays")
	require.NoError(t, writeFile(t, filepath.Join(dir, "ctl"), "stop grace=0\nremove\n"))
	require.NoError(t, os.Mkdir(filepath.Join(launches, "fresh"), 0o755))
	require.NoError(t, syscall.Rmdir(filepath.Join(launches, "fresh")))
	ents, err = os.ReadDir(launches)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.Equal(t, "api", ents[0].Name())
	assert.False(t, strings.Contains(readFile(t, filepath.Join(mnt, "b", "facts.json")), "s3cret"))
}
