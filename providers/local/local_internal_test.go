//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// The test binary doubles as a host process that makes a box and is then
// killed (TestWatchdogOutlivesHost), selected by this variable.
const (
	hostHelperEnv = "BOXFS_LOCAL_TEST_HOST"
	hostRootEnv   = "BOXFS_LOCAL_TEST_ROOT"
	hostLifeEnv   = "BOXFS_LOCAL_TEST_LIFETIME"
)

// hostScript leaves processes of every kind a box can have: one in the
// background, one in a session of its own (setsid), one double-forked (its
// parent gone), one ignoring catchable signals, and the shell itself. Each
// prints its pid.
const hostScript = `sleep 300 & echo $!
setsid sleep 301 & echo $!
(sleep 302 & echo $!)
sh -c 'trap "" TERM HUP INT; echo $$; exec sleep 303' &
echo $$
wait`

func TestMain(m *testing.M) {
	if os.Getenv(hostHelperEnv) == "1" {
		os.Exit(hostHelper())
	}
	os.Exit(m.Run())
}

// hostHelper makes a box, starts hostScript in it, prints "box ID" and the
// script's output, and waits to be killed.
func hostHelper() int {
	lifetime, err := time.ParseDuration(os.Getenv(hostLifeEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	b, err := New(os.Getenv(hostRootEnv)).Create(ctx, providers.Spec{Lifetime: lifetime})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("box %s\n", b.ID())
	if _, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", hostScript}, Stdout: os.Stdout}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	time.Sleep(2 * time.Minute) // the test kills us long before
	return 3
}

// live returns those of pids that are alive and not zombies.
func live(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil && !st.dead() {
			out = append(out, pid)
		}
	}
	return out
}

// watchdogsOf returns the watchdog processes of the box in dir.
func watchdogsOf(t *testing.T, dir string) []int {
	t.Helper()
	all, err := pids()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, pid := range all {
		if st, err := readStat(pid); err == nil && !st.dead() && watchdogAlive(pid, dir) {
			out = append(out, pid)
		}
	}
	return out
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("want a pid, got %q", s)
	}
	return n
}

// TestWatchdogOutlivesHost kills the process that made a box and shows the
// box's watchdog still ends it at its lifetime, leaving no process behind.
func TestWatchdogOutlivesHost(t *testing.T) {
	// The host helper (a re-executed test binary) must make the box, start
	// five processes and report them within lifetime/2, and be killed
	// before 3/4 of it: 10 s leaves a loaded 2-core machine room for that
	// (at 4 s it had 2 s, for a process start, a box and five more).
	const lifetime = 10 * time.Second
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hostHelperEnv+"=1", hostRootEnv+"="+root, hostLifeEnv+"="+lifetime.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var id string
	var procs []int
	timeout := time.After(lifetime / 2)
	for id == "" || len(procs) < 5 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the host helper ended early: %s", stderr.String())
			}
			if rest, ok := strings.CutPrefix(l, "box "); ok {
				id = rest
			} else {
				procs = append(procs, atoi(t, l))
			}
		case <-timeout:
			t.Fatalf("the host helper did not report its box within %v (box %q, pids %v): %s", lifetime/2, id, procs, stderr.String())
		}
	}
	dir := filepath.Join(root, id)
	t.Logf("box %s, processes %v", id, procs)
	if got := live(procs); len(got) != len(procs) {
		t.Fatalf("of the box's processes %v only %v run", procs, got)
	}
	found, err := boxProcs(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range procs {
		if !slices.Contains(found, pid) {
			t.Errorf("the sweep would not find process %d (found %v)", pid, found)
		}
	}

	// Kill the host. The box's processes and its watchdog stay.
	cmd.Process.Kill()
	cmd.Wait()
	if time.Since(start) >= lifetime*3/4 {
		t.Fatalf("the machine is too slow for this test: the host was killed %v after start, lifetime %v", time.Since(start), lifetime)
	}
	if got := live(procs); len(got) != len(procs) {
		t.Fatalf("killing the host ended the box's processes: of %v only %v run", procs, got)
	}
	if w := watchdogsOf(t, dir); len(w) != 1 {
		t.Fatalf("want one watchdog for %s after the host died, found %v", dir, w)
	}

	// Do nothing with the provider: the watchdog must end the box on its own.
	deadline := start.Add(lifetime + 20*time.Second)
	for len(live(procs)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the box still run %v after start, lifetime %v", live(procs), time.Since(start), lifetime)
		}
		time.Sleep(50 * time.Millisecond)
	}
	endedAfter := time.Since(start)
	t.Logf("the box's processes ended %v after the host started, lifetime %v", endedAfter.Round(time.Millisecond), lifetime)
	if endedAfter < lifetime {
		t.Errorf("the box ended after %v, before its lifetime of %v", endedAfter, lifetime)
	}
	for time.Now().Before(deadline) && len(watchdogsOf(t, dir)) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if w := watchdogsOf(t, dir); len(w) > 0 {
		t.Errorf("the watchdog %v still runs after ending the box", w)
	}
	if left, err := boxProcs(id); err != nil || len(left) > 0 {
		t.Errorf("processes of the box left behind: %v, %v", left, err)
	}

	// A new host finds the box ended.
	ctx := context.Background()
	b, err := New(root).Attach(ctx, id)
	if err != nil {
		t.Fatalf("Attach after the host died: %v", err)
	}
	st, err := b.Status(ctx)
	if err != nil || st.State != providers.StateEnded || st.Reason != "lifetime" || st.EndedAt.IsZero() {
		t.Errorf("Status = %+v, %v; want ended by lifetime", st, err)
	}
	if _, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}}); !providers.IsCode(err, providers.Gone) {
		t.Errorf("Exec in an ended box: %v, want Gone", err)
	}
	if err := b.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Destroy left %s: %v", dir, err)
	}
}

func newBox(t *testing.T, p *Provider, spec providers.Spec) *Box {
	t.Helper()
	b, err := p.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { b.Destroy(context.Background()) })
	return b.(*Box)
}

func run(t *testing.T, b *Box, req providers.ExecRequest) (string, int) {
	t.Helper()
	var out bytes.Buffer
	req.Stdout = &out
	p, err := b.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("Exec(%q): %v", req.Argv, err)
	}
	code, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait(%q): %v", req.Argv, err)
	}
	return out.String(), code
}

// A command that leaves children behind holding its stdout still ends
// when its own process does; Destroy then ends the children, wherever
// they went.
func TestDestroyEndsEscapedProcesses(t *testing.T) {
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	start := time.Now()
	out, code := run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", `sleep 300 & echo $!
setsid sleep 301 & echo $!
(sleep 302 & echo $!)
(setsid sh -c 'sleep 303 & echo $!' &)
sleep 0.2`}})
	if took := time.Since(start); code != 0 || took > 5*time.Second {
		t.Fatalf("the command exited %d after %v; want 0, soon after its own process ended", code, took)
	}
	var procs []int
	for _, l := range strings.Fields(out) {
		procs = append(procs, atoi(t, l))
	}
	if len(procs) != 4 || len(live(procs)) != 4 {
		t.Fatalf("want 4 processes left running, got %v (live %v)", procs, live(procs))
	}
	if err := b.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if got := live(procs); len(got) > 0 {
		t.Errorf("after Destroy processes %v still run", got)
	}
	if _, err := os.Stat(b.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Destroy left %s", b.Dir())
	}
	if w := watchdogsOf(t, b.Dir()); len(w) > 0 {
		t.Errorf("Destroy left the watchdog %v", w)
	}
}

// Destroy while commands are being started: it neither deadlocks with them
// nor lets one slip past its sweep.
func TestDestroyDuringExecs(t *testing.T) {
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	ctx := context.Background()
	const workers = 4
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for {
				proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sleep", "300"}})
				if err != nil {
					errs <- err
					return
				}
				go proc.Wait()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.Destroy(dctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for range workers {
		select {
		case err := <-errs:
			if !providers.IsCode(err, providers.Gone) {
				t.Errorf("Exec during Destroy: %v, want Gone", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Exec still starts commands 20s after Destroy")
		}
	}
	if left, err := boxProcs(b.ID()); err != nil || len(left) > 0 {
		t.Errorf("processes left after Destroy: %v, %v", left, err)
	}
}

// A box whose directory is removed behind the provider's back (say, a
// test's temporary directory cleaned up without Destroy) still has its
// processes ended, by its watchdog.
func TestRemovedDirEndsProcesses(t *testing.T) {
	root := t.TempDir()
	b := newBox(t, New(root), providers.Spec{Lifetime: time.Hour})
	out := newLines()
	if _, err := b.Exec(context.Background(), providers.ExecRequest{Argv: []string{"sh", "-c", "setsid sleep 300 & echo $!"}, Stdout: out}); err != nil {
		t.Fatal(err)
	}
	pid := atoi(t, out.first(t))
	if err := os.RemoveAll(b.Dir()); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(live([]int{pid})) > 0 || len(watchdogsOf(t, b.Dir())) > 0; i++ {
		if i > 300 {
			t.Fatalf("10s after its directory was removed: process %v, watchdog %v", live([]int{pid}), watchdogsOf(t, b.Dir()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The environment is exactly the fixed base, the spec's, the request's and
// the marker.
func TestExecEnvironment(t *testing.T) {
	t.Setenv("BOXFS_TEST_HOST_ONLY", "1")
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{Env: map[string]string{"FROM_SPEC": "s", "BOTH": "spec", "HOME": "/custom"}})
	out, _ := run(t, b, providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"FROM_REQ": "r", "BOTH": "req", MarkerEnv: "forged"}})
	got := strings.Split(strings.TrimSpace(out), "\n")
	slices.Sort(got)
	want := []string{
		"BOTH=req", MarkerEnv + "=" + b.ID(), "FROM_REQ=r", "FROM_SPEC=s", "HOME=/custom",
		"PATH=" + FixedPath, "TMPDIR=" + filepath.Join(b.Dir(), "tmp"),
	}
	// sh may add PWD; env itself adds nothing.
	got = slices.DeleteFunc(got, func(s string) bool { return strings.HasPrefix(s, "PWD=") })
	if !slices.Equal(got, want) {
		t.Errorf("env = %q\nwant %q", got, want)
	}
	out, _ = run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", `echo "$HOME"`}, Env: map[string]string{}})
	if strings.TrimSpace(out) != "/custom" {
		t.Errorf("HOME = %q", out)
	}
}

// Each command is its own process group, not the host's.
func TestExecOwnProcessGroup(t *testing.T) {
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	for range 2 {
		out, _ := run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", `echo $$; cut -d' ' -f5 /proc/$$/stat`}})
		f := strings.Fields(out)
		if len(f) != 2 || f[0] != f[1] {
			t.Errorf("pid and process group: %q, want equal", f)
		}
		if f[1] == strconv.Itoa(syscall.Getpgrp()) {
			t.Errorf("the command runs in the host's process group %s", f[1])
		}
	}
}

// A program gets stdin, stdout and stderr and no other descriptor, also
// none the test process inherited without close-on-exec.
func TestExecDescriptors(t *testing.T) {
	leak, err := unix.Dup(2) // dup gives a descriptor without close-on-exec
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	out := newLines()
	proc, err := b.Exec(context.Background(), providers.ExecRequest{Argv: []string{"sh", "-c", "echo $$; exec sleep 300"}, Stdout: out, Stdin: strings.NewReader("")})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill(context.Background())
	pid := out.first(t)
	// sleep opens locale files for a moment as it starts (setlocale), so
	// one reading may catch a descriptor it is about to close: an inherited
	// one stays, so it is a leak only if it is still there after a while.
	var fds []string
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ents, err := os.ReadDir("/proc/" + pid + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		fds = fds[:0]
		for _, e := range ents {
			fds = append(fds, e.Name())
		}
		if slices.Equal(fds, []string{"0", "1", "2"}) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(fds, []string{"0", "1", "2"}) {
		t.Errorf("the program holds descriptors %v, want 0 1 2 (the test's own inheritable one is %d)", fds, leak)
	}
}

// lines collects output; first waits for its first line.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLines() *lines { return &lines{} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) first(t *testing.T) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		l.mu.Lock()
		s := l.buf.String()
		l.mu.Unlock()
		if line, _, ok := strings.Cut(s, "\n"); ok {
			return line
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no line of output within 10s")
	return ""
}

// Kill of a command that has exited still kills what it left in its group.
func TestKillAfterExit(t *testing.T) {
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	var out bytes.Buffer
	proc, err := b.Exec(context.Background(), providers.ExecRequest{Argv: []string{"sh", "-c", "sleep 300 & echo $!"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := proc.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	pid := atoi(t, out.String())
	if len(live([]int{pid})) != 1 {
		t.Fatalf("background sleep %d does not run", pid)
	}
	if err := proc.Kill(context.Background()); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	for i := 0; len(live([]int{pid})) > 0; i++ {
		if i > 100 {
			t.Fatalf("background sleep %d outlived Kill", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A restarted host finds its boxes again: List by labels, Attach, Exec.
func TestRestart(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	b := newBox(t, New(root), providers.Spec{Labels: map[string]string{"app": "x"}, Env: map[string]string{"KEPT": "yes"}})
	other := newBox(t, New(root), providers.Spec{Labels: map[string]string{"app": "y"}})

	p2 := New(root)
	got, err := p2.List(ctx, map[string]string{"app": "x"})
	if err != nil || len(got) != 1 || got[0].ID() != b.ID() {
		t.Fatalf("List after restart = %v, %v; want %s", got, err, b.ID())
	}
	all, err := p2.List(ctx, map[string]string{LabelProvider: Name})
	if err != nil || len(all) != 2 || all[0].ID() != b.ID() || all[1].ID() != other.ID() {
		t.Errorf("List(boxfs.provider=local) = %v, %v; want both boxes, oldest first", all, err)
	}
	a, err := p2.Attach(ctx, b.ID())
	if err != nil {
		t.Fatalf("Attach after restart: %v", err)
	}
	out, _ := run(t, a.(*Box), providers.ExecRequest{Argv: []string{"sh", "-c", `echo "$KEPT"`}})
	if strings.TrimSpace(out) != "yes" {
		t.Errorf("the spec's env after restart: %q", out)
	}
	info, err := os.Stat(filepath.Join(b.Dir(), recordName))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, %v; want 0600 (it holds env values)", info.Mode(), err)
	}
}

// Attach gives a running box whose watchdog died a new one; a box past
// its deadline with no watchdog is ended by the next host that looks.
func TestWatchdogReplaced(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	p := New(root)
	b := newBox(t, p, providers.Spec{Lifetime: time.Hour})
	rec, err := readRecord(b.Dir())
	if err != nil || !watchdogAlive(rec.Watchdog, b.Dir()) {
		t.Fatalf("no live watchdog for a new box: %+v, %v", rec, err)
	}
	syscall.Kill(rec.Watchdog, syscall.SIGKILL)
	for i := 0; watchdogAlive(rec.Watchdog, b.Dir()); i++ {
		if i > 200 {
			t.Fatal("the watchdog outlived SIGKILL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := p.Attach(ctx, b.ID()); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	rec2, err := readRecord(b.Dir())
	if err != nil || rec2.Watchdog == rec.Watchdog || !watchdogAlive(rec2.Watchdog, b.Dir()) {
		t.Errorf("after Attach: watchdog %d (was %d), alive %v", rec2.Watchdog, rec.Watchdog, watchdogAlive(rec2.Watchdog, b.Dir()))
	}

	short := newBox(t, p, providers.Spec{Lifetime: time.Second})
	rec, _ = readRecord(short.Dir())
	syscall.Kill(rec.Watchdog, syscall.SIGKILL)
	out := newLines()
	if _, err := short.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", "sleep 300 & echo $!"}, Stdout: out}); err != nil {
		t.Fatal(err)
	}
	pid := atoi(t, out.first(t))
	time.Sleep(1500 * time.Millisecond)
	if len(live([]int{pid})) != 1 {
		t.Fatalf("with its watchdog killed, nothing should have ended the box yet")
	}
	a, err := New(root).Attach(ctx, short.ID())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if st, err := a.Status(ctx); err != nil || st.State != providers.StateEnded {
		t.Errorf("Status of a box past its deadline = %+v, %v; want ended", st, err)
	}
	if len(live([]int{pid})) != 0 {
		t.Errorf("a box ended on Attach left process %d running", pid)
	}
}

// The watchdog holds nothing of its parent: its own session, stdio on
// /dev/null, no environment but its mode.
func TestWatchdogDetached(t *testing.T) {
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{Lifetime: time.Hour})
	rec, err := readRecord(b.Dir())
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(rec.Watchdog)
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if f[3] != pid {
		t.Errorf("watchdog session %s, want its own (%s)", f[3], pid)
	}
	env, _ := os.ReadFile("/proc/" + pid + "/environ")
	if string(env) != watchdogEnv+"=1\x00" {
		t.Errorf("watchdog environment %q", env)
	}
	for fd := range 3 {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%s/fd/%d", pid, fd)); err != nil || l != "/dev/null" {
			t.Errorf("watchdog fd %d -> %q, %v; want /dev/null", fd, l, err)
		}
	}
	fds, _ := os.ReadDir("/proc/" + pid + "/fd")
	for _, e := range fds {
		l, _ := os.Readlink("/proc/" + pid + "/fd/" + e.Name())
		if strings.HasPrefix(l, "pipe:") || strings.HasPrefix(l, "socket:") || strings.HasPrefix(l, "/dev/pts") {
			t.Errorf("watchdog holds fd %s -> %s", e.Name(), l)
		}
	}
}

// File access stays inside the box directory.
func TestFilesConfined(t *testing.T) {
	ctx := context.Background()
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	outside := t.TempDir()
	ws := b.Workspace()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ name, target string }{
		{"abs", outside},
		{"rel", "../../../" + filepath.Base(outside)},
		{"up", "../.."},
	} {
		if err := os.Symlink(l.target, filepath.Join(ws, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	wantCode := func(err error, code providers.Code, what string) {
		t.Helper()
		if providers.CodeOf(err) != code {
			t.Errorf("%s: %v (code %v), want %v", what, err, providers.CodeOf(err), code)
		}
	}
	_, err := b.Stat(ctx, filepath.Join(outside, "secret"))
	wantCode(err, providers.Unsafe, "Stat outside the box")
	_, err = b.Stat(ctx, ws+"/../../../"+filepath.Base(outside)+"/secret")
	wantCode(err, providers.Unsafe, "Stat through ..")
	_, err = b.Stat(ctx, "work/x")
	wantCode(err, providers.Invalid, "Stat of a relative path")
	for _, l := range []string{"abs", "up"} {
		_, err = b.Stat(ctx, filepath.Join(ws, l, "secret"))
		wantCode(err, providers.Unsafe, "Stat through symlink "+l)
		_, err = b.ReadFile(ctx, filepath.Join(ws, l, "secret"))
		wantCode(err, providers.Unsafe, "ReadFile through symlink "+l)
		err = b.WriteFile(ctx, filepath.Join(ws, l, "planted"), strings.NewReader("x"), 0o644)
		wantCode(err, providers.Unsafe, "WriteFile through symlink "+l)
	}
	_, err = b.Stat(ctx, filepath.Join(ws, "rel", "secret"))
	wantCode(err, providers.Unsafe, "Stat through a relative symlink out")
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Error("a write through a symlink landed outside the box")
	}
	// Lstat of the link itself is fine, and so is a symlink within the box.
	if fi, err := b.Lstat(ctx, filepath.Join(ws, "abs")); err != nil || fi.Target != outside {
		t.Errorf("Lstat of a symlink pointing out: %+v, %v", fi, err)
	}
	if err := b.WriteFile(ctx, filepath.Join(ws, "in"), strings.NewReader("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.Symlink(ctx, "in", filepath.Join(ws, "inlink")); err != nil {
		t.Fatal(err)
	}
	if fi, err := b.Stat(ctx, filepath.Join(ws, "inlink")); err != nil || fi.Size != 6 {
		t.Errorf("Stat through a symlink within the box: %+v, %v", fi, err)
	}
	// A link that leaves the workspace, even to come back, is outside.
	if err := b.Symlink(ctx, "../work/in", filepath.Join(ws, "roundabout")); err != nil {
		t.Fatal(err)
	}
	_, err = b.Stat(ctx, filepath.Join(ws, "roundabout"))
	wantCode(err, providers.Unsafe, "Stat through a symlink out of the workspace and back")
	// The box's own directory is outside the workspace; removing the
	// workspace is refused.
	_, err = b.Stat(ctx, b.Dir())
	wantCode(err, providers.Unsafe, "Stat of the box directory")
	if err := b.Rmdir(ctx, ws); err == nil {
		t.Error("Rmdir of the workspace succeeded")
	}
}

func TestAttachIDs(t *testing.T) {
	ctx := context.Background()
	p := New(t.TempDir())
	for _, id := range []string{"", "../x", "0123456789abcdeF", "0123456789abcde/", strings.Repeat("a", 17)} {
		if _, err := p.Attach(ctx, id); !providers.IsCode(err, providers.Invalid) {
			t.Errorf("Attach(%q) = %v, want Invalid", id, err)
		}
	}
	if _, err := p.Attach(ctx, "0123456789abcdef"); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Attach of an unknown id = %v, want NotFound", err)
	}
}

func TestOpen(t *testing.T) {
	state := t.TempDir()
	p, err := providers.Open(Name, providers.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(*Provider).Root(); got != filepath.Join(state, "local") {
		t.Errorf("default root %q", got)
	}
	root := t.TempDir()
	p, err = providers.Open(Name, providers.Config{Options: map[string]string{"root": root}})
	if err != nil || p.(*Provider).Root() != root {
		t.Errorf("root option: %v, %v", p, err)
	}
	if _, err := providers.Open(Name, providers.Config{StateDir: state, Options: map[string]string{"image": "x"}}); !providers.IsCode(err, providers.Invalid) {
		t.Errorf("unknown option: %v, want Invalid", err)
	}
	if _, err := providers.Open(Name, providers.Config{}); !providers.IsCode(err, providers.Invalid) {
		t.Errorf("no root and no state dir: %v, want Invalid", err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	if _, err := lookPath("noexec", dir, "/"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("lookPath of a non-executable file: %v, want EACCES", err)
	}
	if _, err := lookPath("nope", dir, "/"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("lookPath of a missing program: %v, want ENOENT", err)
	}
	if got, err := lookPath("sh", FixedPath, "/"); err != nil || !filepath.IsAbs(got) {
		t.Errorf("lookPath(sh) = %q, %v", got, err)
	}
	if got, _ := lookPath("./x", "", "/w"); got != "/w/x" {
		t.Errorf("lookPath(./x) in /w = %q", got)
	}
}

func BenchmarkExecTrue(b *testing.B) {
	p := New(b.TempDir())
	bx, err := p.Create(context.Background(), providers.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer bx.Destroy(context.Background())
	for b.Loop() {
		proc, err := bx.Exec(context.Background(), providers.ExecRequest{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		if code, err := proc.Wait(); code != 0 || err != nil {
			b.Fatal(code, err)
		}
	}
}

func BenchmarkCreateDestroy(b *testing.B) {
	p := New(b.TempDir())
	for b.Loop() {
		bx, err := p.Create(context.Background(), providers.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		if err := bx.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStat(b *testing.B) {
	p := New(b.TempDir())
	bx, err := p.Create(context.Background(), providers.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer bx.Destroy(context.Background())
	box := bx.(*Box)
	for b.Loop() {
		if _, err := box.Stat(context.Background(), box.Workspace()); err != nil {
			b.Fatal(err)
		}
	}
}

// One writer for stdout and stderr gets one pipe: the order the command
// wrote in is kept (providers.ExecRequest).
func TestExecSameWriterKeepsOrder(t *testing.T) {
	p := New(t.TempDir())
	box, err := p.Create(t.Context(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Destroy(context.Background())
	for i := 0; i < 20; i++ {
		var out bytes.Buffer
		proc, err := box.Exec(t.Context(), providers.ExecRequest{
			Argv:   []string{"sh", "-c", "echo 1; echo 2 >&2; echo 3; echo 4 >&2"},
			Stdout: &out, Stderr: &out,
		})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := proc.Wait(); code != 0 || err != nil {
			t.Fatalf("wait: %d %v", code, err)
		}
		if out.String() != "1\n2\n3\n4\n" {
			t.Fatalf("run %d: %q", i, out.String())
		}
	}
}

// The files API is rooted at the workspace: a symlink the box swaps in
// cannot lead a host write to the box's own record, and a file the box
// hard-linked from outside is never changed in place through the link.
func TestFilesRootedAtWorkspace(t *testing.T) {
	ctx := context.Background()
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	ws := b.Workspace()
	record, err := os.ReadFile(filepath.Join(b.Dir(), recordName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(ws, "sub")); err != nil {
		t.Fatal(err)
	}
	err = b.WriteFile(ctx, filepath.Join(ws, "sub", recordName), strings.NewReader("host bytes"), 0o644)
	if providers.CodeOf(err) != providers.Unsafe {
		t.Errorf("a write through work/sub -> ..: %v, want unsafe", err)
	}
	_, err = b.WriteAt(ctx, filepath.Join(ws, "sub", recordName), []byte("host bytes"), 0)
	if providers.CodeOf(err) != providers.Unsafe {
		t.Errorf("a write in place through work/sub -> ..: %v, want unsafe", err)
	}
	if now, _ := os.ReadFile(filepath.Join(b.Dir(), recordName)); !bytes.Equal(now, record) {
		t.Errorf("the box's record changed: %q", now)
	}
	if _, err := b.Stat(ctx, b.Dir()); providers.CodeOf(err) != providers.Unsafe {
		t.Errorf("Stat of the box directory: %v, want unsafe (outside the workspace)", err)
	}

	host := filepath.Join(t.TempDir(), "host.txt")
	if err := os.WriteFile(host, []byte("the host's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(host, filepath.Join(ws, "linked")); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(ws, "linked")
	checks := map[string]error{}
	_, checks["WriteAt"] = b.WriteAt(ctx, name, []byte("X"), 0)
	checks["Truncate"] = b.Truncate(ctx, name, 0)
	checks["Create"] = b.Create(ctx, name, 0o644, false)
	checks["Chmod"] = b.Chmod(ctx, name, 0o666)
	checks["Chown"] = b.Chown(ctx, name, 1, 1)
	checks["Utimes"] = b.Utimes(ctx, name, time.Unix(1, 0), time.Unix(1, 0))
	for what, err := range checks {
		if providers.CodeOf(err) != providers.Unsafe {
			t.Errorf("%s of a file linked from outside the workspace: %v, want unsafe", what, err)
		}
	}
	if fi, err := os.Stat(host); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 11 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) || fi.ModTime().Unix() == 1 {
		t.Errorf("the host's file changed: %v %v", fi, err)
	}
	// Replacing the name is fine: the box's name gets the bytes, the host's
	// file keeps its own.
	if err := b.WriteFile(ctx, name, strings.NewReader("box's"), 0o644); err != nil {
		t.Errorf("WriteFile replacing a linked name: %v", err)
	}
	if got, _ := os.ReadFile(host); string(got) != "the host's\n" {
		t.Errorf("the host's file reads %q", got)
	}

	// Links within the workspace are changed in place, as on a disk.
	if err := os.WriteFile(filepath.Join(ws, "a"), []byte("aaa"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(ws, "a"), filepath.Join(ws, "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt(ctx, filepath.Join(ws, "b"), []byte("B"), 0); err != nil {
		t.Errorf("WriteAt of a link within the workspace: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "a")); string(got) != "Baa" {
		t.Errorf("the other name reads %q", got)
	}
}
