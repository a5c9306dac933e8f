package integration

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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boxFacts are the facts.json fields these tests read.
type boxFacts struct {
	ID          string `json:"id"`
	State       string `json:"state"`
	Suspend     string `json:"suspend"`
	ResumedFrom *struct {
		How string `json:"how"`
		Box string `json:"box"`
	} `json:"resumedFrom"`
}

func factsOf(t *testing.T, b *boxT) boxFacts {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
	require.NoError(t, err)
	var f boxFacts
	require.NoError(t, json.Unmarshal(raw, &f), "%s", raw)
	return f
}

// ctl writes msg to the box's ctl; the error names the err file's text.
func (b *boxT) ctl(msg string) error {
	if err := ctlWrite(filepath.Join(b.dir, "ctl"), msg+"\n"); err != nil {
		e, _ := os.ReadFile(filepath.Join(b.dir, "err"))
		return errors.Join(err, errors.New(strings.TrimSpace(string(e))))
	}
	return nil
}

// TestSuspendResumeDocker writes through the mount, suspends the box
// (its container stops), resumes it, and reads back what the host and the
// box wrote before.
func TestSuspendResumeDocker(t *testing.T) {
	m := startMount(t, "docker", 8*time.Second)
	b := m.newBox(t, "sus", "provider=docker")
	require.NoError(t, os.WriteFile(filepath.Join(b.work, "host.txt"), []byte("written through the mount\n"), 0o644))
	b.must(t, "echo from-the-box > box.txt")
	id := factsOf(t, b).ID

	require.NoError(t, b.ctl("suspend"))
	f := factsOf(t, b)
	assert.Equal(t, "suspended", f.State)
	assert.Equal(t, "filesystem", f.Suspend)
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", id).Output()
	require.NoError(t, err)
	assert.Equal(t, "false\n", string(out), "the container of a suspended box runs")
	_, err = os.ReadFile(filepath.Join(b.work, "host.txt"))
	assert.True(t, errors.Is(err, syscall.EHOSTDOWN), "a read in work/ of a suspended box: %v", err)

	require.NoError(t, b.ctl("resume"))
	got, err := os.ReadFile(filepath.Join(b.work, "host.txt"))
	require.NoError(t, err)
	assert.Equal(t, "written through the mount\n", string(got))
	got, err = os.ReadFile(filepath.Join(b.work, "box.txt"))
	require.NoError(t, err)
	assert.Equal(t, "from-the-box\n", string(got))
	f = factsOf(t, b)
	assert.Equal(t, "ready", f.State)
	require.NotNil(t, f.ResumedFrom)
	assert.Equal(t, "resume", f.ResumedFrom.How)
	assert.Equal(t, "written through the mount\n", b.must(t, "cat host.txt"))
}

// TestSuspendWithCommandDocker: a suspend with a command running is
// refused (EBUSY, the reason in err); suspend force ends the command as
// killed, and its reader reaches EOF.
func TestSuspendWithCommandDocker(t *testing.T) {
	m := startMount(t, "docker", 8*time.Second)
	b := m.newBox(t, "busy", "provider=docker")
	ex, err := os.OpenFile(filepath.Join(b.dir, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer ex.Close()
	_, err = ex.Write([]byte("echo started; sleep 300; echo never\n"))
	require.NoError(t, err)
	// The command runs once its first line is out; a reader then follows
	// the rest.
	br := bufio.NewReader(ex)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", first)
	read := make(chan string, 1)
	go func() {
		out, _ := io.ReadAll(br)
		read <- string(out)
	}()

	err = b.ctl("suspend")
	assert.True(t, errors.Is(err, syscall.EBUSY), "suspend with a command running: %v", err)
	assert.Contains(t, err.Error(), "cmds/1")
	st, _ := os.ReadFile(filepath.Join(b.dir, "ctl"))
	assert.Contains(t, string(st), "state=ready")

	require.NoError(t, b.ctl("suspend force"))
	select {
	case out := <-read:
		assert.Empty(t, out, "what the reader of exec got after the first line, before EOF")
	case <-time.After(30 * time.Second):
		t.Fatal("the reader of exec was left waiting after suspend force")
	}
	status, err := os.ReadFile(filepath.Join(b.dir, "cmds", "1", "status"))
	require.NoError(t, err)
	assert.Equal(t, "killed\n", string(status))
	out, err := os.ReadFile(filepath.Join(b.dir, "cmds", "1", "out"))
	require.NoError(t, err, "cmds/1/out reads to its end")
	assert.Equal(t, "started\n", string(out))

	require.NoError(t, b.ctl("resume"))
	// fstat of exec answers for the first open of it (go-fuse is not told
	// which open asks): close this one before b.must opens another.
	ex.Close()
	assert.Equal(t, "back\n", b.must(t, "echo back"))
}

// TestDaemonKilledDocker kills the daemon (kill -9) while a command runs,
// mounts the same state again: the box is found again, the command is
// lost, and facts.json says the box was reconnected.
func TestDaemonKilledDocker(t *testing.T) {
	m := startMount(t, "docker", 8*time.Second)
	b := m.newBox(t, "kept", "provider=docker")
	b.must(t, "echo before > f.txt")
	id := factsOf(t, b).ID
	ex, err := os.OpenFile(filepath.Join(b.dir, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = ex.Write([]byte("sleep 300\n"))
	require.NoError(t, err)

	require.NoError(t, m.cmd.Process.Kill())
	select {
	case <-m.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not die of kill -9")
	}
	ex.Close() // ENOTCONN: the daemon is gone
	require.NoError(t, exec.Command("umount", "-l", m.mnt).Run(), "clearing the dead mount")

	m2 := startMountOn(t, m.mnt, m.state, "docker", 8*time.Second, time.Second, false)
	listing, err := os.ReadFile(filepath.Join(m2.mnt, "ctl"))
	require.NoError(t, err)
	assert.Contains(t, string(listing), "kept docker "+id+" ready")
	b2 := &boxT{m: m2, name: "kept", dir: b.dir, work: b.work}
	status, err := os.ReadFile(filepath.Join(b2.dir, "cmds", "2", "status"))
	require.NoError(t, err)
	assert.Equal(t, "lost\n", string(status))
	assert.Equal(t, "before\n", b2.must(t, "cat f.txt"))
	f := factsOf(t, b2)
	require.NotNil(t, f.ResumedFrom, "facts.json of a box found again")
	assert.Equal(t, "reconnect", f.ResumedFrom.How)
	assert.Equal(t, id, f.ResumedFrom.Box)
}
