package main

// These tests run the built binary (internal/boxfsbin), as a user does:
// the mount is a separate daemon process, through the kernel.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
)

// cmdTimeout bounds one boxfs run in these tests (a shared, noisy machine).
const cmdTimeout = 3 * time.Minute

// harness runs boxfs with one state directory and configuration.
type harness struct {
	t      *testing.T
	bin    string
	state  string
	config string // "" reads none
}

type result struct {
	stdout, stderr string
	code           int
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return &harness{t: t, bin: boxfsbin.Path(t), state: t.TempDir()}
}

// needMount skips tests that mount when this machine cannot.
func needMount(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("not root and no fusermount3: cannot mount")
		}
	}
}

// cmd builds a boxfs command: --state and --config first, args after.
func (h *harness) cmd(ctx context.Context, args ...string) *exec.Cmd {
	all := append([]string{"--state", h.state, "--config", h.config}, args...)
	cmd := exec.CommandContext(ctx, h.bin, all...)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 10 * time.Second
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BOXFS_") || strings.HasPrefix(kv, "BOXFS_REQUIRE_DOCKER=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	return cmd
}

// run runs boxfs and returns what it printed and its exit status.
func (h *harness) run(args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := h.cmd(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			h.t.Fatalf("boxfs %q: %v", args, err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// ok runs boxfs and fails the test unless it exits 0; it returns stdout.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("boxfs %q: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// boxes returns `boxfs ls --json`.
func (h *harness) boxes() []boxRow {
	h.t.Helper()
	var rows []boxRow
	if err := json.Unmarshal([]byte(h.ok("ls", "--json")), &rows); err != nil {
		h.t.Fatalf("ls --json: %v", err)
	}
	return rows
}

func findBox(rows []boxRow, name string) (boxRow, bool) { return findBoxRow(rows, name) }

// mountBackground mounts in the background and registers the cleanup: an
// unmount, else kill -9 and a lazy unmount; then every box is destroyed.
func (h *harness) mountBackground(mnt string, extra ...string) int {
	h.t.Helper()
	h.ok(append(append([]string{"mount"}, extra...), mnt, "--background")...)
	rec, err := readMountRecord(h.state)
	if err != nil {
		h.t.Fatalf("mount.json after mount --background: %v", err)
	}
	if rec.Mountpoint != mnt || !pidAlive(rec.PID) {
		h.t.Fatalf("mount.json = %+v, want mountpoint %s and a live pid", rec, mnt)
	}
	return rec.PID
}

// cleanup ends whatever mount of the state directory is left and destroys
// every box, so no local watchdog or container outlives the test.
func (h *harness) cleanup(mnt string) {
	h.t.Cleanup(func() {
		if rec, err := readMountRecord(h.state); err == nil && pidAlive(rec.PID) {
			if r := h.run("umount", rec.Mountpoint); r.code != 0 {
				h.t.Logf("cleanup: umount: %s", r.stderr)
				syscall.Kill(rec.PID, syscall.SIGKILL)
				waitGone(h.t, rec.PID)
			}
		}
		if _, err := statMountpoint(mnt); isStale(err) || isMountpoint(mnt) {
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
		r := h.run("ls", "--json")
		var rows []boxRow
		json.Unmarshal([]byte(r.stdout), &rows)
		for _, b := range rows {
			if b.ID != "" {
				if r := h.run("rm", b.Name); r.code != 0 {
					h.t.Logf("cleanup: rm %s: %s", b.Name, r.stderr)
				}
			}
		}
	})
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive after a minute", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestMountLifecycle is the life of a mount as a user lives it: mount in
// the background, a declared box made at first use, a new box, exec with a
// failing command, seed and pull, kill -9 of the daemon with a dirty file,
// a remount that finds the box and pushes the dirty data, unmount.
func TestMountLifecycle(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	h.config = writeConfig(t, `
[environments.dev]
provider = "local"
lifetime = "30m"
env = { GREETING = "hello from a declared box" }

[boxes.api]
environment = "dev"
`)
	mnt := filepath.Join(t.TempDir(), "mnt") // mount makes it
	h.cleanup(mnt)
	pid := h.mountBackground(mnt)

	// A second mount of the same state directory at the same place is a
	// no-op; at another place it is refused.
	if out := h.run("mount", mnt, "--background"); out.code != 0 || !strings.Contains(out.stderr, "already mounted") {
		t.Errorf("second mount --background: exit %d, stderr %q; want 0 and 'already mounted'", out.code, out.stderr)
	}
	if r := h.run("mount", filepath.Join(t.TempDir(), "other")); r.code != 1 || !strings.Contains(r.stderr, mnt) {
		t.Errorf("mount of a served state dir elsewhere: exit %d, stderr %q; want 1 naming %s", r.code, r.stderr, mnt)
	}

	// The declared box is listed before it exists, made at its first
	// command; rm before that makes nothing.
	if b, ok := findBox(h.boxes(), "api"); !ok || b.State != "declared" || b.ID != "" {
		t.Fatalf("ls: api = %+v (found %v), want declared without an id", b, ok)
	}
	if r := h.run("rm", "api"); r.code != 0 || !strings.Contains(r.stderr, "never made") {
		t.Errorf("rm of a declared box: exit %d, stderr %q", r.code, r.stderr)
	}
	if b, _ := findBox(h.boxes(), "api"); b.State != "declared" {
		t.Errorf("after rm of a declared box: %+v, want it still declared and not made", b)
	}
	if got := h.ok("exec", "api", "--", "sh", "-c", "echo $GREETING"); got != "hello from a declared box\n" {
		t.Errorf("exec api: stdout %q", got)
	}
	if b, _ := findBox(h.boxes(), "api"); b.State != "ready" || b.ID == "" {
		t.Errorf("ls after the first command: api = %+v, want ready with an id", b)
	}

	// new, through MOUNT/ctl: the box appears in the mount and in ls.
	h.ok("new", "demo", "lifetime=30m", `env.MSG=it's a "test"`) // quoted for the ctl tokenizer
	if _, err := os.Stat(filepath.Join(mnt, "demo", "work")); err != nil {
		t.Fatalf("new demo: %v", err)
	}
	demo, ok := findBox(h.boxes(), "demo")
	if !ok || demo.Provider != "local" || demo.ID == "" || demo.State != "ready" {
		t.Fatalf("ls: demo = %+v, found %v", demo, ok)
	}
	if got := h.ok("exec", "demo", "--", "sh", "-c", `echo "$MSG"`); got != "it's a \"test\"\n" {
		t.Errorf("env given to new through the mount: %q", got)
	}
	if r := h.run("new", "demo"); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("new demo twice: exit %d, stderr %q; want 1 and 'exists'", r.code, r.stderr)
	}

	// exec: output streams back, the exit status is the command's, argv
	// arrives as given.
	r := h.run("exec", "demo", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "out\nerr\n" {
		t.Errorf("exec exit 3: exit %d stdout %q stderr %q; want 3, \"out\\nerr\\n\" (one stream through the mount)", r.code, r.stdout, r.stderr)
	}
	if got := h.ok("exec", "demo", "printf", "%s|", "a b", "it's", "$HOME", ""); got != "a b|it's|$HOME||" {
		t.Errorf("exec argv: %q", got)
	}
	if r := h.run("exec", "nosuch", "--", "true"); r.code != 1 || !strings.Contains(r.stderr, "nosuch") {
		t.Errorf("exec in a missing box: exit %d, stderr %q", r.code, r.stderr)
	}

	// seed a host tree, see it through the mount and in the box; pull it
	// back with a file the box made.
	src := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	must(t, os.MkdirAll(filepath.Join(src, "a", "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "top.txt"), []byte("top\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "a", "b", "big.bin"), big, 0o644))
	must(t, os.Symlink("top.txt", filepath.Join(src, "link")))
	out := h.ok("seed", "demo", src)
	if !strings.Contains(out, "2 files") || !strings.Contains(out, "skipped (symlink 1)") {
		t.Errorf("seed receipt: %q; want 2 files and the symlink skipped", out)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "demo", "work", "a", "b", "big.bin")); err != nil || !bytes.Equal(got, big) {
		t.Errorf("seeded big.bin through the mount: %d bytes, %v", len(got), err)
	}
	if got := h.ok("exec", "demo", "cat", "top.txt"); got != "top\n" {
		t.Errorf("seeded top.txt in the box: %q", got)
	}
	h.ok("exec", "demo", "--", "sh", "-c", "echo made in the box > made.txt")
	dst := filepath.Join(t.TempDir(), "pulled")
	out = h.ok("pull", "demo", dst)
	if !strings.Contains(out, "3 files") {
		t.Errorf("pull receipt: %q; want 3 files", out)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "made.txt")); string(got) != "made in the box\n" {
		t.Errorf("pulled made.txt: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "a", "b", "big.bin")); !bytes.Equal(got, big) {
		t.Errorf("pulled big.bin: %d bytes, want %d", len(got), len(big))
	}
	var rc struct{ Files, Unchanged, Archives int }
	if err := json.Unmarshal([]byte(h.ok("pull", "demo", dst, "--json")), &rc); err != nil || rc.Files != 0 || rc.Archives != 0 || rc.Unchanged == 0 {
		t.Errorf("second pull: %+v %v; want nothing moved", rc, err)
	}

	// A dirty file: written through the mount by a process that keeps it
	// open (no close, so no flush), then the daemon is killed. In a box
	// with write-behind: a local box's own files are written in place in
	// write-through, with nothing left to journal.
	h.ok("new", "jn", "lifetime=30m", "write=behind")
	dirty := filepath.Join(mnt, "jn", "work", "dirty.txt")
	f, err := os.OpenFile(dirty, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("precious, journaled")); err != nil {
		t.Fatal(err)
	}
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	waitGone(t, pid)
	f.Close() // fails: the daemon is gone
	// The kernel answers a stat from its attribute cache, without asking
	// the dead daemon, until the attributes it holds time out (1 s).
	var err2 error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err2 = statMountpoint(mnt); isStale(err2) {
			break
		}
	}
	if !isStale(err2) {
		t.Fatalf("stat of the mount after kill -9: %v, want 'transport endpoint is not connected'", err2)
	}
	// Nothing serves the state directory: commands run directly, and the
	// box does not have the data yet.
	if got := h.run("exec", "jn", "cat", "dirty.txt"); strings.Contains(got.stdout, "precious") {
		t.Fatalf("the dirty data reached the box before any flush: %q", got.stdout)
	}

	// Mount again: the stale mount is cleaned up, the box found by its
	// recorded id, the journaled data pushed.
	pid2 := h.mountBackground(mnt)
	if pid2 == pid {
		t.Fatalf("same pid after a remount")
	}
	if b, ok := findBox(h.boxes(), "demo"); !ok || b.ID != demo.ID {
		t.Errorf("after the remount: demo = %+v, want id %s", b, demo.ID)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got := h.run("exec", "jn", "cat", "dirty.txt")
		if got.stdout == "precious, journaled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journaled data did not reach the box: cat says %q (exit %d, %s)", got.stdout, got.code, got.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got, err := os.ReadFile(dirty); err != nil || string(got) != "precious, journaled" {
		t.Errorf("dirty.txt through the new mount: %q, %v", got, err)
	}

	// facts, through the mount.
	var facts struct {
		Provider string `json:"provider"`
		Name     string `json:"name"`
		State    string `json:"state"`
	}
	if err := json.Unmarshal([]byte(h.ok("facts", "demo")), &facts); err != nil || facts.Provider != "local" || facts.Name != "demo" {
		t.Errorf("facts: %+v, %v", facts, err)
	}

	// umount: the daemon ends and the mount goes.
	h.ok("umount", mnt)
	waitGone(t, pid2)
	if isMountpoint(mnt) {
		t.Errorf("%s still mounted after umount", mnt)
	}
	if _, err := os.Stat(filepath.Join(h.state, mountFile)); !os.IsNotExist(err) {
		t.Errorf("mount.json after umount: %v", err)
	}

	// Without a mount, rm works directly and the box is gone.
	h.ok("rm", "jn")
	h.ok("rm", "demo")
	if _, ok := findBox(h.boxes(), "demo"); ok {
		t.Errorf("demo still listed after rm")
	}
	if r := h.run("exec", "demo", "true"); r.code != 1 {
		t.Errorf("exec after rm: exit %d, want 1", r.code)
	}
}

// TestForegroundSignal: a foreground mount ends at SIGTERM after pushing a
// file still held open, and exits 0.
func TestForegroundSignal(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.ok("new", "fg", "lifetime=10m") // directly: nothing is mounted yet
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	daemon := h.cmd(ctx, "mount", mnt)
	var logs bytes.Buffer
	daemon.Stderr = &logs
	must(t, daemon.Start())
	deadline := time.Now().Add(time.Minute)
	for !answers(mnt, time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the foreground mount did not answer:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	f, err := os.OpenFile(filepath.Join(mnt, "fg", "work", "held.txt"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("flushed at SIGTERM")); err != nil {
		t.Fatal(err)
	}
	must(t, daemon.Process.Signal(syscall.SIGTERM))
	err = daemon.Wait()
	f.Close()
	if err != nil {
		t.Fatalf("mount after SIGTERM: %v\n%s", err, logs.String())
	}
	if isMountpoint(mnt) {
		t.Errorf("still mounted after SIGTERM")
	}
	if got := h.ok("exec", "fg", "cat", "held.txt"); got != "flushed at SIGTERM" {
		t.Errorf("held.txt in the box: %q\n%s", got, logs.String())
	}
}

// TestExecInterrupt: Ctrl-C kills the command in the box; exec exits 137,
// through a mount and without one.
func TestExecInterrupt(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.ok("new", "sleepy", "lifetime=10m")
	for _, mode := range []string{"direct", "mounted"} {
		t.Run("mode="+mode, func(t *testing.T) {
			if mode == "mounted" {
				h.mountBackground(mnt)
			}
			ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
			defer cancel()
			cmd := h.cmd(ctx, "exec", "sleepy", "--", "sh", "-c", "echo started; sleep 6007; echo not killed")
			stdout, err := cmd.StdoutPipe()
			must(t, err)
			must(t, cmd.Start())
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "started\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			start := time.Now()
			must(t, cmd.Process.Signal(syscall.SIGINT))
			err = cmd.Wait()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != exitInterrupted {
				t.Fatalf("exec after SIGINT: %v, want exit %d", err, exitInterrupted)
			}
			t.Logf("killed in %v", time.Since(start))
			// A local box's processes are this machine's.
			if pids := processesLeft(10*time.Second, "sleep", "6007"); len(pids) > 0 {
				t.Errorf("sleep still runs in the box: pids %v", pids)
			}
			if mode == "mounted" {
				if b, err := os.ReadFile(filepath.Join(mnt, "sleepy", "cmds", "1", "status")); err != nil || string(b) != "killed\n" {
					t.Errorf("cmds/1/status = %q, %v", b, err)
				}
			}
		})
	}
}

// TestDirect drives boxes with nothing mounted: new, ls, exec, facts,
// seed, pull, release.
func TestDirect(t *testing.T) {
	h := newHarness(t)
	h.cleanup(filepath.Join(t.TempDir(), "unused"))
	h.ok("new", "d1", "env.FOO=a b", "lifetime=5m")
	if r := h.run("exec", "d1", "--", "sh", "-c", `echo "$FOO"; echo oops >&2; exit 7`); r.code != 7 || r.stdout != "a b\n" || r.stderr != "oops\n" {
		t.Errorf("direct exec: exit %d stdout %q stderr %q; want 7, \"a b\\n\", \"oops\\n\"", r.code, r.stdout, r.stderr)
	}
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f.txt"), []byte("seeded"), 0o644))
	h.ok("seed", "d1", src)
	if got := h.ok("exec", "d1", "cat", "f.txt"); got != "seeded" {
		t.Errorf("seeded file: %q", got)
	}
	dst := t.TempDir()
	h.ok("pull", "d1", dst)
	if got, _ := os.ReadFile(filepath.Join(dst, "f.txt")); string(got) != "seeded" {
		t.Errorf("pulled: %q", got)
	}
	var facts map[string]any
	if err := json.Unmarshal([]byte(h.ok("facts", "d1")), &facts); err != nil || facts["provider"] != "local" {
		t.Errorf("facts: %v %v", facts, err)
	}
	// release: the box runs on, its name goes.
	h.ok("release", "d1")
	if _, ok := findBox(h.boxes(), "d1"); ok {
		t.Errorf("d1 listed after release")
	}
	if out := h.ok("ls"); !strings.HasPrefix(out, "NAME") {
		t.Errorf("ls table: %q", out)
	}
	if r := h.run("rm", "d1"); r.code != 1 || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("rm of a released box: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestHeldByDeadMount: a state directory whose lock is held while its
// mount does not answer is an error naming the mount and its pid.
func TestHeldByDeadMount(t *testing.T) {
	h := newHarness(t)
	lock, err := lockState(h.state, true)
	must(t, err)
	defer lock.release()
	mnt := filepath.Join(t.TempDir(), "nothing-mounted")
	must(t, writeMountRecord(h.state, mountRecord{Mountpoint: mnt, PID: os.Getpid()}))
	r := h.run("ls")
	if r.code != 1 || !strings.Contains(r.stderr, mnt) || !strings.Contains(r.stderr, "does not answer") {
		t.Errorf("ls on a held state dir: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestUsageErrors: bad flags, arguments and configuration give one line
// on stderr and exit 2.
func TestUsageErrors(t *testing.T) {
	h := newHarness(t)
	good := writeConfig(t, "[environments.x]\nprovider = \"local\"\n")
	// This test's own: a fixed path in /tmp would be shared with every
	// other run on the machine, and one left behind would fail them all.
	neverMounted := filepath.Join(t.TempDir(), "never-mounted")
	cases := []struct {
		name   string
		config string
		args   []string
		want   string
	}{
		{"unknown flag", "", []string{"ls", "--nope"}, "nope"},
		{"unknown global flag", "", []string{"--frob", "ls"}, "frob"},
		{"unknown command", "", []string{"frobnicate"}, "frobnicate"},
		{"exec without a name", "", []string{"exec"}, "box name"},
		{"exec without a command", "", []string{"exec", "b"}, "no command"},
		{"exec newline argument", "", []string{"exec", "b", "echo", "a\nb"}, "newline"},
		{"bad box name", "", []string{"rm", ".hidden"}, "hidden"},
		{"rm two names", "", []string{"rm", "a", "b"}, "argument"},
		{"new bad key", "", []string{"new", "b", "colour=red"}, "colour"},
		{"new bad value", "", []string{"new", "b", "memory=lots"}, "memory"},
		{"new unknown env", good, []string{"new", "b", "--env", "nope"}, "nope"},
		{"seed one arg", "", []string{"seed", "b"}, "host directory"},
		{"pull bad overwrite", "", []string{"pull", "b", "/tmp", "--overwrite", "sometimes"}, "sometimes"},
		{"mount no mountpoint", "", []string{"mount"}, "mount point"},
		{"mount bad -o", "", []string{"mount", "/tmp/x", "-o", "allow_other,frob=1"}, "frob"},
		{"mount -o ro", "", []string{"mount", "/tmp/x", "-o", "ro"}, "read-write"},
		{"mount bad request_bound", "", []string{"mount", "/tmp/x", "-o", "request_bound=soon"}, "request_bound"},
		{"mount zero --request-bound", "", []string{"mount", "/tmp/x", "--request-bound", "0s"}, "positive"},
		{"bad log format", "", []string{"--log-format", "xml", "ls"}, "xml"},
		{"unknown provider", "", []string{"--provider", "nope", "ls"}, "nope"},
		{"config unknown key", "provder = \"local\"\n", []string{"ls"}, "provder"},
		{"config syntax", "[environments.x\n", []string{"ls"}, "toml"},
		{"config bad lifetime", "[environments.x]\nlifetime = \"forever\"\n", []string{"ls"}, "lifetime"},
		{"config unknown provider", "[environments.x]\nprovider = \"cloudy\"\n", []string{"ls"}, "cloudy"},
		{"config box without env", "[boxes.b]\nenvironment = \"none\"\n", []string{"ls"}, "none"},
		{"config bad price", "[prices.local]\nusd_per_second = 1\n", []string{"ls"}, "source"},
		{"config bad box name", "[boxes.\".x\"]\n", []string{"ls"}, ".x"},
		{"config checked before detaching", "provder = 1\n", []string{"mount", neverMounted, "--background"}, "provder"},
		{"config missing", "MISSING", []string{"ls"}, "no such file"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			h.config = ""
			switch c.config {
			case "":
			case "MISSING":
				h.config = filepath.Join(t.TempDir(), "missing.toml")
			case good:
				h.config = good
			default:
				h.config = writeConfig(t, c.config)
			}
			r := h.run(c.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
			}
			if lines := strings.Count(r.stderr, "\n"); lines != 1 || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("stderr is %d lines, want one: %q", lines, r.stderr)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr %q does not say %q", r.stderr, c.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
	if _, err := os.Stat(neverMounted); err == nil {
		t.Errorf("a refused mount made its mount point")
	}
}

// processesLeft waits up to within for no process's command line to be
// exactly args, and returns the pids still found then. exec exits once the
// command's leader has ended; the rest of its group was sent SIGKILL by
// then but may still be exiting on a loaded machine, so one look right
// after would race it.
func processesLeft(within time.Duration, args ...string) []int {
	deadline := time.Now().Add(within)
	for {
		pids := processesWithArgs(args...)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesWithArgs returns the pids whose command line is exactly args.
func processesWithArgs(args ...string) []int {
	want := strings.Join(args, "\x00") + "\x00"
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(b) == want && pidAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDockerRow: the same life on a Docker box, when an engine answers
// (under BOXFS_REQUIRE_DOCKER=1 it must).
func TestDockerRow(t *testing.T) {
	needMount(t)
	testbox.Docker(t)
	h := newHarness(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.mountBackground(mnt)
	h.ok("new", "dk", "provider=docker", "lifetime=10m")
	if b, ok := findBox(h.boxes(), "dk"); !ok || b.Provider != "docker" || b.State != "ready" {
		t.Fatalf("ls: dk = %+v, found %v", b, ok)
	}
	r := h.run("exec", "dk", "--", "sh", "-c", "pwd; exit 5")
	if r.code != 5 || r.stdout != "/workspace\n" {
		t.Errorf("exec in docker: exit %d stdout %q stderr %q; want 5 and /workspace", r.code, r.stdout, r.stderr)
	}
	// Edit a file through the mount, as an editor would, and run it.
	script := filepath.Join(mnt, "dk", "work", "hello.sh")
	must(t, os.WriteFile(script, []byte("echo hello from $(uname -s)\n"), 0o755))
	if got := h.ok("exec", "dk", "sh", "hello.sh"); got != "hello from Linux\n" {
		t.Errorf("running a file written through the mount: %q", got)
	}
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "in.txt"), []byte("seeded into docker"), 0o644))
	h.ok("seed", "dk", src)
	if got, err := os.ReadFile(filepath.Join(mnt, "dk", "work", "in.txt")); err != nil || string(got) != "seeded into docker" {
		t.Errorf("seeded file through the mount: %q %v", got, err)
	}
	h.ok("exec", "dk", "--", "sh", "-c", "echo from the container > out.txt")
	dst := t.TempDir()
	h.ok("pull", "dk", dst)
	if got, _ := os.ReadFile(filepath.Join(dst, "out.txt")); string(got) != "from the container\n" {
		t.Errorf("pulled out.txt: %q", got)
	}
	h.ok("rm", "dk")
	if _, ok := findBox(h.boxes(), "dk"); ok {
		t.Errorf("dk listed after rm")
	}
}

// TestReceipts: with a price configured, a box made through the mount
// shows its running cost in receipt.json and gets a receipt when it ends.
func TestReceipts(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	h.config = writeConfig(t, `
[prices."local/none"]
usd_per_second = 0.5
source = "https://example.com/test-prices"
priced = "2025-01-02"
`)
	if out := h.ok("receipts"); !strings.Contains(out, "no receipts") {
		t.Errorf("receipts before any box: %q", out)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.mountBackground(mnt)
	h.ok("new", "paid", "lifetime=10m")
	var est struct {
		Provider string   `json:"provider"`
		Kind     string   `json:"kind"`
		CostUSD  *float64 `json:"cost_usd"`
	}
	b, err := os.ReadFile(filepath.Join(mnt, "paid", "receipt.json"))
	if err != nil || json.Unmarshal(b, &est) != nil || est.Provider != "local" || est.Kind != "none" || est.CostUSD == nil {
		t.Fatalf("receipt.json while it runs: %s %v", b, err)
	}
	time.Sleep(1100 * time.Millisecond)
	h.ok("rm", "paid")
	var got struct {
		Receipts []struct {
			Provider string   `json:"provider"`
			Seconds  float64  `json:"seconds"`
			CostUSD  *float64 `json:"cost_usd"`
			Source   string   `json:"source"`
		} `json:"receipts"`
		Totals []struct {
			Boxes   int     `json:"boxes"`
			CostUSD float64 `json:"cost_usd"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(h.ok("receipts", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Receipts) != 1 || got.Receipts[0].CostUSD == nil || got.Receipts[0].Seconds < 1 ||
		math.Abs(*got.Receipts[0].CostUSD-got.Receipts[0].Seconds*0.5) > 1e-8 || got.Receipts[0].Source != "https://example.com/test-prices" {
		t.Errorf("receipts: %+v", got.Receipts)
	}
	if len(got.Totals) != 1 || got.Totals[0].Boxes != 1 {
		t.Errorf("totals: %+v", got.Totals)
	}
	if out := h.ok("receipts"); !strings.Contains(out, "local") || !strings.Contains(out, "TOTAL") {
		t.Errorf("receipts table: %q", out)
	}
}

// TestMountDashO: mount(8)-style options, as an fstab line gives them,
// after the mount point: background and state= take effect, the usual
// mount(8) options are accepted.
func TestMountDashO(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	other := &harness{t: t, bin: h.bin, state: t.TempDir()}
	mnt := filepath.Join(t.TempDir(), "mnt")
	other.cleanup(mnt)
	h.ok("mount", mnt, "-o", "rw,nofail,_netdev,noatime,background,attr_timeout=2s,request_bound=90s,state="+other.state)
	rec, err := readMountRecord(other.state)
	if err != nil || rec.Mountpoint != mnt || !pidAlive(rec.PID) {
		t.Fatalf("mount.json in the -o state dir: %+v %v", rec, err)
	}
	if _, err := readMountRecord(h.state); err == nil {
		t.Errorf("the --state dir got a mount record too")
	}
	if typ, ok := mountedAt(mnt); !ok || typ != "fuse.boxfs" {
		t.Errorf("mount table at %s: %q %v, want fuse.boxfs", mnt, typ, ok)
	}
	// The detached daemon serves with the bound -o gave.
	if log, err := os.ReadFile(filepath.Join(other.state, mountLog)); err != nil || !strings.Contains(string(log), "requestBound=1m30s") {
		t.Errorf("mount.log does not say the -o request_bound (err %v):\n%s", err, log)
	}
	other.ok("umount", mnt)
	waitGone(t, rec.PID)
}
