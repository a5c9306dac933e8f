package fs_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writerEnv, when set in the environment, makes the test binary a writer
// instead: it opens the file named by the first argument, writes the
// second to it in one write(2), says "written" on stdout and then, with
// the file still open, waits to be killed ("wait") or exits 0 ("exit").
// A shell cannot stand in: its redirections dup the file and close the
// copy, and a close runs a message written without its newline.
const writerEnv = "BOXFS_TEST_WRITER"

func init() {
	how := os.Getenv(writerEnv)
	if how == "" {
		return
	}
	f, err := os.OpenFile(os.Args[1], os.O_RDWR, 0)
	if err == nil {
		_, err = f.Write([]byte(os.Args[2]))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("written")
	if how == "exit" {
		os.Exit(0) // f is closed by the exit, not by close(2)
	}
	time.Sleep(time.Hour) // until killed
	os.Exit(3)
}

// writer starts the test binary as a writer of text to name that ends as
// how says, and returns once its write returned.
func writer(t *testing.T, how, name, text string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], name, text)
	cmd.Env = append(os.Environ(), writerEnv+"="+how)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "written\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("writer said %q, %v", line, err)
	}
	return cmd
}

// killMidLine writes text to name from a process that is then killed with
// SIGKILL, the file still open, and waits for it to end (its close, a
// FLUSH, is answered before it is reaped).
func killMidLine(t *testing.T, name, text string) {
	t.Helper()
	cmd := writer(t, "wait", name, text)
	require.NoError(t, cmd.Process.Kill())
	err := cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee) && ee.ExitCode() == -1, "writer ended by its kill: %v", err)
}

// bash runs script with args and fails the test if it fails.
func bash(t *testing.T, script string, args ...string) {
	t.Helper()
	out, err := exec.Command("bash", append([]string{"-c", script, "bash"}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s: %s", script, out)
}

// A message or command line whose writer was killed before its newline is
// dropped at the close the kill makes, and err says so; one written whole
// without a newline still runs at close(2) and at a normal exit.
func TestKilledWriterFragment(t *testing.T) {
	mnt := mount(t)
	ctl := filepath.Join(mnt, "ctl")

	killMidLine(t, ctl, "new frag")
	_, err := os.Stat(filepath.Join(mnt, "frag"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a killed writer's fragment made a box")
	assert.Contains(t, readErr(mnt), "killed by signal 9")
	assert.NotContains(t, readFile(t, ctl), "frag")

	// A whole line before the kill runs: its newline came.
	killMidLine(t, ctl, "new full\n")
	_, err = os.Stat(filepath.Join(mnt, "full"))
	assert.NoError(t, err, "a line whose newline came did not run")

	// Without a newline, at close(2) and at an exit with a status.
	bash(t, `printf 'new closed' > "$1"`, ctl)
	_, err = os.Stat(filepath.Join(mnt, "closed"))
	assert.NoError(t, err, "printf without newline, closed: %s", readErr(mnt))
	require.NoError(t, writer(t, "exit", ctl, "new exited").Wait())
	_, err = os.Stat(filepath.Join(mnt, "exited"))
	assert.NoError(t, err, "printf without newline, then exit: %s", readErr(mnt))

	// A box's ctl: a killed writer's "destroy" leaves the box be.
	box := filepath.Join(mnt, "full")
	killMidLine(t, filepath.Join(box, "ctl"), "destroy")
	assert.Contains(t, readFile(t, filepath.Join(box, "ctl")), "state=ready")
	assert.Contains(t, readFile(t, filepath.Join(box, "err")), "killed by signal 9")

	// exec: the killed writer's line starts no command.
	killMidLine(t, filepath.Join(box, "exec"), "touch frag")
	ents, err := os.ReadDir(filepath.Join(box, "cmds"))
	require.NoError(t, err)
	assert.Empty(t, ents, "a killed writer's fragment started a command")
	_, err = os.Stat(filepath.Join(box, "work", "frag"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	e := readFile(t, filepath.Join(box, "err"))
	assert.True(t, strings.Contains(e, "a command line without its newline") && strings.Contains(e, "killed by signal 9"), "err %q", e)

	// A command line without its newline still starts at close(2).
	bash(t, `printf 'touch whole' > "$1"`, filepath.Join(box, "exec"))
	waitStatus(t, box, "1")
	_, err = os.Stat(filepath.Join(box, "work", "whole"))
	assert.NoError(t, err)
}
