package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/testbox"
)

// TestSuspendCommandsUnsupported: a local box cannot be suspended or
// snapshotted, mounted or not; each says so in one line, exit 1. Bad
// arguments exit 2.
func TestSuspendCommandsUnsupported(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	h.ok("new", "a")
	check := func(what string, r result, code int, want string) {
		t.Helper()
		assert.Equal(t, code, r.code, "%s: stderr %q", what, r.stderr)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%s: stderr %q", what, r.stderr)
		assert.Contains(t, r.stderr, want, what)
	}
	check("suspend, not mounted", h.run("suspend", "a"), exitError, "cannot suspend")
	check("snapshot, not mounted", h.run("snapshot", "a", "s1"), exitError, "cannot snapshot")
	check("snapshot name", h.run("snapshot", "a", "no/slash"), exitUsage, "snapshot name")
	check("new resume=", h.run("new", "b", "resume=later"), exitUsage, "resume")

	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.mountBackground(mnt)
	check("suspend, mounted", h.run("suspend", "a"), exitError, "cannot suspend")
	h.ok("resume", "a") // a box that runs: nothing to do
}

// TestDockerSuspend: a Docker box through the CLI and the mount: a file
// written, suspended (ls says so, work/ answers EHOSTDOWN), resumed, the
// file there; a snapshot printed and a box made from it.
func TestDockerSuspend(t *testing.T) {
	needMount(t)
	testbox.Docker(t)
	h := newHarness(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.mountBackground(mnt)
	h.ok("new", "dk", "provider=docker", "lifetime=10m")
	work := filepath.Join(mnt, "dk", "work")
	must(t, os.WriteFile(filepath.Join(work, "kept.txt"), []byte("kept across the suspend"), 0o644))

	h.ok("suspend", "dk")
	b, ok := findBox(h.boxes(), "dk")
	require.True(t, ok)
	assert.Equal(t, "suspended", b.State)
	_, err := os.ReadFile(filepath.Join(work, "kept.txt"))
	assert.ErrorContains(t, err, "host is down")

	h.ok("resume", "dk")
	got, err := os.ReadFile(filepath.Join(work, "kept.txt"))
	require.NoError(t, err)
	assert.Equal(t, "kept across the suspend", string(got))

	line := strings.Fields(h.ok("snapshot", "dk", "cli-test"))
	require.Len(t, line, 3, "snapshot prints name, id, time")
	assert.Equal(t, "cli-test", line[0])
	t.Cleanup(func() { assert.NoError(t, testbox.RemoveImage(line[1])) })
	h.ok("new", "copy", "provider=docker", "lifetime=10m", "snapshot="+line[1])
	got, err = os.ReadFile(filepath.Join(mnt, "copy", "work", "kept.txt"))
	require.NoError(t, err, "the box made from the snapshot")
	assert.Equal(t, "kept across the suspend", string(got))
	h.ok("rm", "copy")
	h.ok("rm", "dk")
}
