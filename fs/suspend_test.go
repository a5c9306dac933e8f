package fs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// mountSuspendable serves a namespace over a fake provider (which can
// suspend, resume and snapshot) whose boxes run command lines with a fake
// sh: "sleep" runs until killed, "echo WORDS" prints WORDS.
func mountSuspendable(t *testing.T) string {
	t.Helper()
	fp := fake.New(fake.WithFacts(func(f *providers.Facts) { f.Shell = "" }))
	fp.Program("sh", func(ctx context.Context, pc *fake.Proc) int {
		line := pc.Argv[len(pc.Argv)-1]
		switch {
		case line == "sleep":
			<-ctx.Done()
			return 137
		case strings.HasPrefix(line, "echo "):
			io.WriteString(pc.Stdout, strings.TrimPrefix(line, "echo ")+"\n")
		}
		return 0
	})
	mnt, _ := serve(t, boxes.Options{
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		OpTimeout:       5 * time.Second,
	})
	return mnt
}

func ctl(box, msg string) error { return writeCtl(filepath.Join(box, "ctl"), msg) }

func writeCtl(name, msg string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(msg + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func TestSuspendThroughCtl(t *testing.T) {
	mnt := mountSuspendable(t)
	box := newBox(t, mnt, "a")
	require.NoError(t, os.WriteFile(filepath.Join(box, "work", "f"), []byte("before the suspend"), 0o644))

	ex, err := os.OpenFile(filepath.Join(box, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer ex.Close()
	_, err = ex.Write([]byte("sleep\n"))
	require.NoError(t, err)
	read := make(chan error, 1)
	go func() { _, err := io.ReadAll(ex); read <- err }()

	err = ctl(box, "suspend")
	assert.True(t, errors.Is(err, syscall.EBUSY), "suspend with a command running: %v", err)
	assert.Contains(t, readFile(t, filepath.Join(box, "err")), "cmds/1")
	assert.Contains(t, readFile(t, filepath.Join(box, "ctl")), "state=ready")

	require.NoError(t, ctl(box, "suspend force"), "err: %s", readFile(t, filepath.Join(box, "err")))
	select {
	case err := <-read:
		assert.NoError(t, err, "the reader of exec")
	case <-time.After(10 * time.Second):
		t.Fatal("the reader of exec was left waiting after suspend force")
	}
	assert.Equal(t, "killed\n", readFile(t, filepath.Join(box, "cmds", "1", "status")))
	out, err := os.ReadFile(filepath.Join(box, "cmds", "1", "out"))
	assert.NoError(t, err, "cmds/1/out of the killed command reads to its end")
	assert.Empty(t, out)
	assert.Contains(t, readFile(t, filepath.Join(box, "ctl")), "state=suspended")
	assert.Regexp(t, `(?m)^a fake \S+ suspended$`, readFile(t, filepath.Join(mnt, "ctl")))

	_, err = os.ReadFile(filepath.Join(box, "work", "f"))
	assert.True(t, errors.Is(err, syscall.EHOSTDOWN), "a read in work/ of a suspended box: %v", err)
	assert.Contains(t, readFile(t, filepath.Join(box, "err")), "is suspended")
	err = os.WriteFile(filepath.Join(box, "work", "g"), []byte("x"), 0o644)
	assert.True(t, errors.Is(err, syscall.EHOSTDOWN), "a write in work/ of a suspended box: %v", err)

	require.NoError(t, ctl(box, "resume"), "err: %s", readFile(t, filepath.Join(box, "err")))
	assert.Equal(t, "before the suspend", readFile(t, filepath.Join(box, "work", "f")))
	var facts struct {
		State       string
		ResumedFrom struct{ How string }
	}
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(box, "facts.json"))), &facts))
	assert.Equal(t, "ready", facts.State)
	assert.Equal(t, "resume", facts.ResumedFrom.How)
	assert.Equal(t, "back\n", run(t, mnt, "a", "echo back"))
}

func TestSnapshotThroughCtl(t *testing.T) {
	mnt := mountSuspendable(t)
	box := newBox(t, mnt, "a")
	require.NoError(t, os.WriteFile(filepath.Join(box, "work", "f"), []byte("at the snapshot"), 0o644))
	require.NoError(t, ctl(box, "snapshot first"), "err: %s", readFile(t, filepath.Join(box, "err")))
	fields := strings.Fields(readFile(t, filepath.Join(box, "snapshots")))
	require.Len(t, fields, 3, "snapshots: one line of name, id, time")
	assert.Equal(t, "first", fields[0])
	_, err := time.Parse(time.RFC3339, fields[2])
	assert.NoError(t, err)
	err = ctl(box, "snapshot first")
	assert.True(t, errors.Is(err, syscall.EEXIST), "a second snapshot named first: %v", err)

	require.NoError(t, writeCtl(filepath.Join(mnt, "ctl"), "new b snapshot="+fields[1]), "err: %s", readErr(mnt))
	assert.Equal(t, "at the snapshot", readFile(t, filepath.Join(mnt, "b", "work", "f")))
}

func TestResumeAutoThroughCtl(t *testing.T) {
	mnt := mountSuspendable(t)
	require.NoError(t, writeCtl(filepath.Join(mnt, "ctl"), "new a resume=auto"), "err: %s", readErr(mnt))
	box := filepath.Join(mnt, "a")
	require.NoError(t, os.WriteFile(filepath.Join(box, "work", "f"), []byte("kept"), 0o644))
	require.NoError(t, ctl(box, "suspend"))
	assert.Contains(t, readFile(t, filepath.Join(box, "ctl")), "state=suspended")
	assert.Equal(t, "kept", readFile(t, filepath.Join(box, "work", "f")), "a read in work/ of a resume=auto box")
	assert.Contains(t, readFile(t, filepath.Join(box, "ctl")), "state=ready")

	// A lookup (the kernel holds work/ meanwhile) resumes it too.
	require.NoError(t, ctl(box, "suspend"))
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(box, "work", "never-looked-up"))
		done <- err
	}()
	select {
	case err := <-done:
		assert.True(t, errors.Is(err, syscall.ENOENT), "a lookup in work/ of a resume=auto box: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("a lookup that resumed the box did not return")
	}
	assert.Contains(t, readFile(t, filepath.Join(box, "ctl")), "state=ready")
}
