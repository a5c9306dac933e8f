package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	_ "github.com/boxfs/boxfs/providers/all"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBoxChangesShowWithoutWaiting: a change made in a box behind boxfs's
// back (not through its exec: a background job, docker exec, a program on
// the host in a local box's directory) shows through the mount at once,
// though the mount trusts what it has seen for an hour (the attribute
// timeout): the box's workspace is watched (the agent's inotify in a
// Docker box, the daemon's own on a local box's directory) and boxfs drops
// what it knows of each changed path.
func TestBoxChangesShowWithoutWaiting(t *testing.T) {
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMountAttr(t, prov, 8*time.Second, time.Hour, true)
			b := m.newBox(t, "w")
			f := waitFreshness(t, b, "watch")
			assert.Positive(t, f.FreshnessMs)
			assert.Less(t, f.FreshnessMs, 1000.0)
			for name, body := range map[string]string{"f": "one\n", "gone": "x\n"} {
				if err := os.WriteFile(filepath.Join(b.work, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The host has seen it all: f's content, the listing, g's absence.
			if got := readString(t, filepath.Join(b.work, "f")); got != "one\n" {
				t.Fatalf("f reads %q", got)
			}
			if _, err := os.Stat(filepath.Join(b.work, "g")); !os.IsNotExist(err) {
				t.Fatalf("stat g before: %v", err)
			}
			os.ReadDir(b.work)

			behindTheBack(t, b, `echo two, longer > f; echo new > g; mkdir -p d/e; echo deep > d/e/x; rm gone`)
			t0 := time.Now()

			deadline := time.Now().Add(10 * time.Second)
			for {
				f, _ := os.ReadFile(filepath.Join(b.work, "f"))
				g, _ := os.ReadFile(filepath.Join(b.work, "g"))
				x, _ := os.ReadFile(filepath.Join(b.work, "d", "e", "x"))
				_, gerr := os.Stat(filepath.Join(b.work, "gone"))
				if string(f) == "two, longer\n" && string(g) == "new\n" && string(x) == "deep\n" && os.IsNotExist(gerr) {
					t.Logf("the box's change showed %v after its command ended", time.Since(t0))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10 s after the box changed, the host reads f=%q g=%q d/e/x=%q, gone: %v", f, g, x, gerr)
				}
				time.Sleep(20 * time.Millisecond)
			}
			// The box writes a file the host wrote a moment before: the
			// report's attributes are not those the host's write left, so
			// it is taken at once (F-echo, F-watch), not held as a
			// possible echo of the host's write.
			if err := os.WriteFile(filepath.Join(b.work, "h"), []byte("host\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			behindTheBack(t, b, `echo box, later > h`)
			t1 := time.Now()
			deadline = time.Now().Add(10 * time.Second)
			for {
				h, _ := os.ReadFile(filepath.Join(b.work, "h"))
				if string(h) == "box, later\n" {
					took := time.Since(t1)
					t.Logf("the box's change to a file the host just wrote showed %v after its command ended", took)
					assert.Less(t, took, 1000*time.Millisecond, "held as the echo of the host's write")
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10 s after the box rewrote h, the host reads %q", h)
				}
				time.Sleep(20 * time.Millisecond)
			}

			names := map[string]bool{}
			ents, err := os.ReadDir(b.work)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				names[e.Name()] = true
			}
			if !names["g"] || !names["d"] || names["gone"] {
				t.Errorf("the listing after the change: %v", names)
			}
		})
	}
}

// freshFacts is what facts.json says of how the box's changes reach the host.
type freshFacts struct {
	Freshness     string  `json:"freshness"`
	FreshnessMs   float64 `json:"freshnessMs"`
	FreshnessNote string  `json:"freshnessNote"`
	WatchReports  struct {
		Taken  uint64 `json:"taken"`
		Echoes uint64 `json:"echoes"`
	} `json:"watchReports"`
}

// TestHostWritesComeBackAsEchoes (F-echo): the watch reports the host's
// own writes too, each with the attributes it left; the host drops every
// one as an echo, with no round trip, and the box's change made right
// after among them is taken. facts.json counts both.
func TestHostWritesComeBackAsEchoes(t *testing.T) {
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMountAttr(t, prov, 8*time.Second, time.Hour, true)
			b := m.newBox(t, "e")
			before := waitFreshness(t, b, "watch").WatchReports
			const n = 100
			require.NoError(t, os.Mkdir(filepath.Join(b.work, "d"), 0o755))
			// The writes go once the watch has reported d (taken: a
			// directory is never an echo), so it watches d by then: a
			// file made in a directory not watched yet is reported with
			// the directory, not on its own.
			for deadline := time.Now().Add(10 * time.Second); waitFreshness(t, b, "watch").WatchReports.Taken == before.Taken; {
				if time.Now().After(deadline) {
					t.Fatal("the watch did not report d")
				}
				time.Sleep(20 * time.Millisecond)
			}
			for i := range n {
				require.NoError(t, os.WriteFile(filepath.Join(b.work, "d", fmt.Sprintf("f%03d", i)), []byte(fmt.Sprintf("host %d\n", i)), 0o644))
			}
			deadline := time.Now().Add(10 * time.Second)
			var f freshFacts
			for {
				f = waitFreshness(t, b, "watch")
				if f.WatchReports.Echoes-before.Echoes >= n {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10 s after %d writes of the host: %+v (before %+v)", n, f.WatchReports, before)
				}
				time.Sleep(20 * time.Millisecond)
			}
			// The directory's report is taken (a directory is never taken
			// for an echo); no file's is.
			taken := f.WatchReports.Taken - before.Taken
			t.Logf("%d host writes: %d reports dropped as echoes, %d taken", n, f.WatchReports.Echoes-before.Echoes, taken)
			assert.LessOrEqual(t, taken, uint64(2), "reports of the host's own writes taken")
			for i := range n {
				if got := readString(t, filepath.Join(b.work, "d", fmt.Sprintf("f%03d", i))); got != fmt.Sprintf("host %d\n", i) {
					t.Fatalf("d/f%03d reads %q", i, got)
				}
			}
		})
	}
}

// waitFreshness waits (10 s at most) for facts.json to say mode.
func waitFreshness(t *testing.T, b *boxT, mode string) freshFacts {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var f freshFacts
		raw, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &f))
		if f.Freshness == mode {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("facts.json says freshness %+v, want %s", f, mode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// behindTheBack runs script in the box's workspace through the provider
// directly, as a program boxfs did not start would.
func behindTheBack(t *testing.T, b *boxT, script string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var facts struct{ Provider, ID, Workspace string }
	if err := json.Unmarshal(raw, &facts); err != nil {
		t.Fatal(err)
	}
	p, err := providers.Open(facts.Provider, providers.Config{StateDir: filepath.Join(b.m.state, "providers", facts.Provider)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box, err := p.Attach(ctx, facts.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	proc, err := box.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", script}, Dir: facts.Workspace, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := proc.Wait(); err != nil || code != 0 {
		t.Fatalf("%s: exit %d, %v: %s", script, code, err, out.String())
	}
}

// TestGitGCWatched: git gc through the mount, again and again, with the
// workspace watched: gc packs loose objects, removes them and their
// directories, and renames packs and refs while the watch reports each
// change; every run must succeed and leave a repository fsck accepts.
func TestGitGCWatched(t *testing.T) {
	needTool(t, "git")
	m := startMountAttr(t, "docker", 20*time.Second, time.Second, true)
	b := m.newBox(t, "gc")
	repo := filepath.Join(b.work, "repo")
	host(t, b.work, "git", "init", "-q", "-b", "main", "repo")
	for i := 0; i < 20; i++ {
		for f := 0; f < 5; f++ {
			name := filepath.Join(repo, fmt.Sprintf("d%d", f%2), fmt.Sprintf("f%d", f))
			require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
			require.NoError(t, os.WriteFile(name, []byte(fmt.Sprintf("run %d file %d\n", i, f)), 0o644))
		}
		host(t, repo, "git", "add", "-A")
		host(t, repo, "git", "commit", "-qm", fmt.Sprintf("c%d", i))
		args := []string{"gc", "-q", "--prune=now"}
		if i%4 == 3 {
			args = append(args, "--aggressive")
		}
		if out, err := hostErr(repo, "git", args...); err != nil {
			t.Fatalf("run %d: git %v: %v\n%s\nmount log:\n%s", i, args, err, out, m.log.String())
		}
		host(t, repo, "git", "fsck", "--strict", "--no-dangling")
		assert.Equal(t, fmt.Sprint(i+1), strings.TrimSpace(host(t, repo, "git", "rev-list", "--count", "HEAD")), "run %d", i)
	}
}

// TestGitWorkflowRepeated runs the git workflow of TestClients (clone,
// rebase, stash, worktree, gc, checkouts, a box-side change, format-patch,
// am, apply) again and again on one box, watched and not: a failure that
// shows once in many runs (a stale change time, a report racing a rename)
// shows here.
func TestGitWorkflowRepeated(t *testing.T) {
	n := 20
	if testing.Short() {
		n = 3
	}
	for _, row := range []struct {
		prov  string
		watch bool
	}{{"local", true}, {"docker", true}, {"local", false}, {"docker", false}} {
		t.Run(fmt.Sprintf("provider=%s/watch=%v", row.prov, row.watch), func(t *testing.T) {
			m := startMountAttr(t, row.prov, 20*time.Second, time.Second, row.watch)
			b := m.newBox(t, "gw")
			for i := 0; i < n; i++ {
				dir := filepath.Join(b.work, fmt.Sprintf("run%d", i))
				require.NoError(t, os.Mkdir(dir, 0o755))
				sub := *b
				sub.work = dir
				if !t.Run(fmt.Sprintf("run=%d", i), func(t *testing.T) { testClientGit(t, &sub) }) {
					break
				}
			}
		})
	}
}

// TestWatchOverflowFallsBack: a workspace that outgrows its watch (here
// made to, with a limit of a few directories) is served with timeouts:
// facts.json says "timeout" and why, and a change made in the box behind
// boxfs's back still shows, after the attribute timeout.
func TestWatchOverflowFallsBack(t *testing.T) {
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 20 * time.Second, attr: time.Second, watchMax: 4})
	b := m.newBox(t, "o")
	waitFreshness(t, b, "watch")
	for i := 0; i < 6; i++ {
		require.NoError(t, os.MkdirAll(filepath.Join(b.work, fmt.Sprintf("d%d", i), "sub"), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(b.work, "d5", "sub", "f"), []byte("one\n"), 0o644))
	f := waitFreshness(t, b, "timeout")
	assert.Equal(t, 1000.0, f.FreshnessMs)
	assert.NotEmpty(t, f.FreshnessNote)
	assert.Equal(t, "one\n", readString(t, filepath.Join(b.work, "d5", "sub", "f")))

	behindTheBack(t, b, `echo two > d5/sub/f; mkdir d9; echo new > d9/g`)
	start := time.Now()
	for {
		f, _ := os.ReadFile(filepath.Join(b.work, "d5", "sub", "f"))
		g, _ := os.ReadFile(filepath.Join(b.work, "d9", "g"))
		if string(f) == "two\n" && string(g) == "new\n" {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("10 s after the box changed, the host reads f=%q g=%q", f, g)
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, "timeout", waitFreshness(t, b, "timeout").Freshness, "the watch is not set again at once")
}
