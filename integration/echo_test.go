package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoWorkload is a common host workload run through the mount, with the
// most reports of it the watch may see taken, by provider: a directory's
// report is always taken (F-echo), so a workload that changes directories
// has some, as many as the watch's timing makes (a directory may be
// reported once or several times): each bound leaves room for its
// workload's directories and stays well under what it would be with the
// files' (or, for mkdir-rmdir, the removals') echoes taken.
type echoWorkload struct {
	name     string
	maxTaken map[string]uint64
	run      func(t *testing.T, work string)
}

// TestHostWorkloadsComeBackAsEchoes (F-echo): every report of the host's
// own change to a file, through common workloads (untar, git, renames
// over files, mkdir and rmdir, chmod), is dropped as an echo; only
// directories' reports are taken. Each workload's counts are logged.
func TestHostWorkloadsComeBackAsEchoes(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ball := echoTarball(t, 600)
	workloads := []echoWorkload{
		// 600 files in 6 directories, and the directory tar makes; on a
		// local box a report may catch a file between tar's write and its
		// fchmod or utimens (a state no answer of the host recorded): 1
		// to 13 of them in a run here.
		{"untar", map[string]uint64{"local": 60, "docker": 60}, func(t *testing.T, work string) {
			runHost(t, work, "tar", "-xf", ball)
		}},
		// git's directories (objects/xx, refs, logs) are many (about 34
		// reports; 34 to 37 in runs here, more when a directory is
		// reported twice). Each object is linked from a temporary name
		// that is then removed: both boxes answer the unlink with the
		// object's new link count and change time, so the object's report
		// is the unlink's echo (taken, it would be ~90).
		{"git", map[string]uint64{"local": 60, "docker": 60}, func(t *testing.T, work string) {
			require.NoError(t, os.Mkdir(filepath.Join(work, "repo"), 0o755))
			repo := filepath.Join(work, "repo")
			for i := range 20 {
				require.NoError(t, os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%02d.go", i)), []byte(fmt.Sprintf("package p // %d\n", i)), 0o644))
			}
			runHost(t, repo, "git", "init", "-q")
			runHost(t, repo, "git", "add", ".")
			runHost(t, repo, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
		}},
		// A rename over a file, in one directory and into another.
		{"rename", map[string]uint64{"local": 10, "docker": 10}, func(t *testing.T, work string) {
			require.NoError(t, os.Mkdir(filepath.Join(work, "r"), 0o755))
			for i := range 20 {
				for _, n := range []string{"a", "b", "r/c"} {
					require.NoError(t, os.WriteFile(filepath.Join(work, fmt.Sprintf("%s%02d", n, i)), []byte(n+"\n"), 0o644))
				}
			}
			echoSettle(t, work)
			for i := range 20 {
				require.NoError(t, os.Rename(filepath.Join(work, fmt.Sprintf("a%02d", i)), filepath.Join(work, fmt.Sprintf("b%02d", i))))
				require.NoError(t, os.Rename(filepath.Join(work, fmt.Sprintf("b%02d", i)), filepath.Join(work, fmt.Sprintf("r/c%02d", i))))
			}
		}},
		{"mkdir-rmdir", map[string]uint64{"local": 25, "docker": 25}, func(t *testing.T, work string) {
			for i := range 20 {
				require.NoError(t, os.Mkdir(filepath.Join(work, fmt.Sprintf("d%02d", i)), 0o755))
			}
			for i := range 20 {
				require.NoError(t, os.Remove(filepath.Join(work, fmt.Sprintf("d%02d", i))))
			}
		}},
		// Both boxes answer a chmod with the change time it left, so its
		// report is the echo (none taken on Docker in a run here; the
		// bound leaves room for timing).
		{"chmod", map[string]uint64{"local": 5, "docker": 5}, func(t *testing.T, work string) {
			for i := range 20 {
				require.NoError(t, os.WriteFile(filepath.Join(work, fmt.Sprintf("m%02d", i)), []byte("m\n"), 0o644))
			}
			echoSettle(t, work)
			for i := range 20 {
				require.NoError(t, os.Chmod(filepath.Join(work, fmt.Sprintf("m%02d", i)), 0o755))
			}
		}},
	}
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMountAttr(t, prov, 8*time.Second, time.Hour, true)
			for _, w := range workloads {
				t.Run(w.name, func(t *testing.T) {
					b := m.newBox(t, "e"+w.name)
					waitFreshness(t, b, "watch")
					before := echoSettle(t, b.work)
					w.run(t, b.work)
					after := echoSettle(t, b.work)
					taken, echoes := after.Taken-before.Taken, after.Echoes-before.Echoes
					t.Logf("%s on %s: %d reports taken, %d echoes", w.name, prov, taken, echoes)
					assert.LessOrEqual(t, taken, w.maxTaken[prov], "reports of the host's own changes taken")
				})
			}
		})
	}
}

// echoCounts are facts.json's watchReports.
type echoCounts struct{ Taken, Echoes uint64 }

// echoSettle waits for the watch's reports to stop coming (no new one for
// half a second; 15 s at most) and returns their counts.
func echoSettle(t *testing.T, work string) echoCounts {
	t.Helper()
	read := func() echoCounts {
		var f freshFacts
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(work), "facts.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &f))
		return echoCounts{f.WatchReports.Taken, f.WatchReports.Echoes}
	}
	deadline := time.Now().Add(15 * time.Second)
	last, since := read(), time.Now()
	for time.Since(since) < 500*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if c := read(); c != last {
			last, since = c, time.Now()
		}
	}
	return last
}

// echoTarball writes a tar of n small files in 6 directories under "u".
func echoTarball(t *testing.T, n int) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "u/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now}))
	for d := range 6 {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("u/d%d/", d), Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now}))
	}
	for i := range n {
		body := []byte(fmt.Sprintf("file %d\n", i))
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("u/d%d/f%03d", i%6, i), Mode: 0o644, Size: int64(len(body)), ModTime: now}))
		_, err := tw.Write(body)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	name := filepath.Join(t.TempDir(), "u.tar")
	require.NoError(t, os.WriteFile(name, buf.Bytes(), 0o644))
	return name
}

// runHost runs a program on the host in dir (in the mount).
func runHost(t *testing.T, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%v: %s", argv, out)
}
