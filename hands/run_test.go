package hands_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

// helperEnv makes the test binary a host process that starts a command in a
// box and then waits to be killed (TestEndLeftCommands).
const helperEnv = "BOXFS_HANDS_TEST_HELPER"

// helperAgentEnv, when set, is the agent binary the helper runs its command
// through (the agent's command stream).
const helperAgentEnv = "BOXFS_HANDS_TEST_HELPER_AGENT"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helperMain(dir))
	}
	os.Exit(m.Run())
}

// helperMain runs in a re-executed test binary: it opens the box spec names
// ("hostbox:DIR" or "docker:ID"), starts a command that leaves its
// background child's pid in left.pid in the workspace, says "ready" and
// waits to be killed.
func helperMain(spec string) int {
	ctx := context.Background()
	var box providers.Box
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "hostbox":
		b, err := hostBoxAt(arg)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		box = b
	case "docker":
		p, err := docker.New(providers.Config{})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if box, err = p.Attach(ctx, arg); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	opts := hands.Options{}
	if bin := os.Getenv(helperAgentEnv); bin != "" {
		opts = hands.Options{Force: hands.ViaAgent, AgentBinary: bin}
	}
	h, err := hands.New(ctx, box, opts)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := h.Run(ctx, hands.Command{Line: `sleep 300 & echo $! > left.tmp && mv left.tmp left.pid; wait`}); err != nil {
		fmt.Println(err)
		return 1
	}
	for range 400 {
		if _, err := h.Stat(ctx, h.Facts().Workspace+"/left.pid"); err == nil {
			fmt.Println("ready")
			select {}
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("no pid file")
	return 1
}

func newScriptHands(t *testing.T, box providers.Box, liveness time.Duration) *hands.Hands {
	t.Helper()
	h, err := hands.New(context.Background(), box, hands.Options{Force: hands.ViaScript, Liveness: liveness})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// runRoutes are the two ways Run starts a command: a provider exec of a
// wrapper script, and the agent's command stream.
var runRoutes = []struct {
	name  string
	hands func(t *testing.T, box providers.Box, liveness time.Duration) *hands.Hands
}{
	{"route=script", func(t *testing.T, box providers.Box, liveness time.Duration) *hands.Hands {
		return newScriptHands(t, box, liveness)
	}},
	{"route=agent", func(t *testing.T, box providers.Box, liveness time.Duration) *hands.Hands {
		h, err := hands.New(context.Background(), box, hands.Options{Force: hands.ViaAgent, AgentBinary: boxfsbin.Path(t), Liveness: liveness})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}},
}

func TestRunLineAndArgv(t *testing.T) {
	for _, r := range runRoutes {
		t.Run(r.name, func(t *testing.T) {
			box := newHostBox(t)
			testRunLineAndArgv(t, box, r.hands(t, box, 0))
		})
	}
}

func testRunLineAndArgv(t *testing.T, box *hostBox, h *hands.Hands) {
	ctx := context.Background()

	var out, errb bytes.Buffer
	p, err := h.Run(ctx, hands.Command{Line: `pwd; printf '%s' "$X" >&2; read -r l; echo "in:$l"; exit 3`,
		Env: map[string]string{"X": "from env"}, Stdin: strings.NewReader("line\n"), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil || code != 3 {
		t.Fatalf("Wait = %d, %v; want 3, nil", code, err)
	}
	if got, want := out.String(), box.dir+"\nin:line\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if errb.String() != "from env" {
		t.Errorf("stderr %q", errb.String())
	}

	argv := []string{"printf", `%s\0`}
	argv = append(argv, hostileNames...)
	out.Reset()
	p, err = h.Run(ctx, hands.Command{Argv: argv, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	if got, want := out.String(), strings.Join(hostileNames, "\x00")+"\x00"; got != want {
		t.Errorf("argv came back as %q, want %q", got, want)
	}

	if _, err := h.Run(ctx, hands.Command{}); !providers.IsCode(err, providers.Invalid) {
		t.Errorf("empty command: %v, want invalid", err)
	}
	// A finished command leaves no record behind.
	ents, _ := os.ReadDir(filepath.Join(box.tmp, ".boxfs", "cmds"))
	if len(ents) != 0 {
		t.Errorf("records left after the commands ended: %v", ents)
	}
}

// pidGone waits until pid runs no more.
func pidGone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if !hostRuns(pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// hostRuns reports whether pid is a process of this machine that runs: a
// zombie does not. A killed command's orphans are reaped by whatever init
// the machine has, which may take its time; Kill promises that nothing
// runs, not that the zombies are gone.
func hostRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	for range 200 {
		b, err := os.ReadFile(file)
		if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil {
				return pid
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", file)
	return 0
}

func TestRunCancelAndTimeout(t *testing.T) {
	for _, r := range runRoutes {
		t.Run(r.name, func(t *testing.T) {
			box := newHostBox(t)
			testRunCancelAndTimeout(t, box, r.hands(t, box, 0))
		})
	}
}

func testRunCancelAndTimeout(t *testing.T, box *hostBox, h *hands.Hands) {
	pidfile := filepath.Join(box.dir, "bg.pid")

	ctx, cancel := context.WithCancel(context.Background())
	p, err := h.Run(ctx, hands.Command{Line: `sleep 300 & echo $! > bg.pid; wait`})
	if err != nil {
		t.Fatal(err)
	}
	pid := readPid(t, pidfile)
	cancel()
	if _, err := p.Wait(); !providers.IsCode(err, providers.Aborted) {
		t.Errorf("Wait after cancel: %v, want aborted", err)
	}
	if !pidGone(pid, 10*time.Second) {
		t.Errorf("background process %d of the group survived the cancel", pid)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	p, err = h.Run(ctx, hands.Command{Argv: []string{"sleep", "30"}})
	switch {
	case providers.IsCode(err, providers.Timeout):
		// A loaded machine took the whole deadline to start it: the
		// deadline still ended it, as it should.
	case err != nil:
		t.Fatal(err)
	default:
		if _, err := p.Wait(); !providers.IsCode(err, providers.Timeout) {
			t.Errorf("Wait past the deadline: %v, want timeout", err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %v", d)
	}

	// Kill ends the group and confirms it.
	os.Remove(pidfile)
	p, err = h.Run(context.Background(), hands.Command{Line: `sleep 300 & echo $! > bg.pid; wait`})
	if err != nil {
		t.Fatal(err)
	}
	pid = readPid(t, pidfile)
	kctx, kcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer kcancel()
	if err := p.Kill(kctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if hostRuns(pid) {
		t.Errorf("Kill returned but %d still runs", pid)
	}
	if code, err := p.Wait(); err != nil || code != 128+9 {
		t.Errorf("Wait after Kill = %d, %v; want 137", code, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(box.tmp, ".boxfs", "cmds")); len(ents) != 0 {
		t.Errorf("records left after Kill: %v", ents)
	}
}

// TestHungBox: a box whose provider stops answering returns Liveness within
// the bound for file operations and commands, and Timeout at the caller's
// deadline when that comes first.
func TestHungBox(t *testing.T) {
	const bound = 500 * time.Millisecond
	box := newHostBox(t)
	h := newScriptHands(t, box, bound)
	ctx := context.Background()

	// A command that is silent but alive is not ended by the bound.
	p, err := h.Run(ctx, hands.Command{Argv: []string{"sleep", "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("a silent live command: %d, %v", code, err)
	}

	// Now the provider hangs mid-command: its status probe never answers.
	p, err = h.Run(ctx, hands.Command{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	box.setHang(true)
	defer box.setHang(false)
	start := time.Now()
	if _, err := p.Wait(); !providers.IsCode(err, providers.Liveness) {
		t.Errorf("Wait on a hung box: %v, want liveness", err)
	}
	if d := time.Since(start); d > 10*bound {
		t.Errorf("liveness took %v with a bound of %v", d, bound)
	}

	for _, tc := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"stat", func(ctx context.Context) error { _, err := h.Stat(ctx, box.dir); return err }},
		{"writefile", func(ctx context.Context) error {
			return h.WriteFile(ctx, box.dir+"/x", strings.NewReader("x"), 0o644)
		}},
		{"run", func(ctx context.Context) error {
			_, err := h.Run(ctx, hands.Command{Line: "true"})
			return err
		}},
	} {
		start := time.Now()
		err := tc.do(ctx)
		if !providers.IsCode(err, providers.Liveness) {
			t.Errorf("%s on a hung box: %v, want liveness", tc.name, err)
		}
		if d := time.Since(start); d > 10*bound {
			t.Errorf("%s: liveness took %v with a bound of %v", tc.name, d, bound)
		}
	}

	// The caller's deadline before the bound: Timeout.
	h2 := newScriptHands(t, box, time.Minute)
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := h2.Stat(dctx, box.dir); !providers.IsCode(err, providers.Timeout) {
		t.Errorf("stat past the deadline on a hung box: %v, want timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

// boxPid waits for a pid file in the box's workspace.
func boxPid(t *testing.T, h *hands.Hands, name string) string {
	t.Helper()
	ctx := context.Background()
	for range 200 {
		rc, err := h.ReadFile(ctx, h.Facts().Workspace+"/"+name)
		if err == nil {
			b, err := io.ReadAll(rc)
			rc.Close()
			if pid := strings.TrimSpace(string(b)); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
				return pid
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", name)
	return ""
}

// boxRuns reports whether process pid (or its group) runs in the box; a
// zombie waiting for the box's init to reap it does not.
func boxRuns(t *testing.T, h *hands.Hands, pid string) bool {
	t.Helper()
	p, err := h.Run(context.Background(), hands.Command{Argv: []string{"sh", "-c", shell.KillGroup + `groupalive "$1"`, "sh", pid}})
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return code == 0
}

// TestEndLeftCommands: a host process starts a command in a box and is
// killed; a new host process ends the command's group, and keeps its own.
func TestEndLeftCommands(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		box  func(*testing.T) (providers.Box, string)
	}{
		{"box=hostbox", func(t *testing.T) (providers.Box, string) {
			dir := t.TempDir()
			b, err := hostBoxAt(dir)
			if err != nil {
				t.Fatal(err)
			}
			return b, "hostbox:" + dir
		}},
		{"box=docker", func(t *testing.T) (providers.Box, string) {
			b := testbox.NewDocker(t)
			return b, "docker:" + b.ID()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box, spec := tc.box(t)
			helper := startHelper(t, exe, helperEnv+"="+spec)
			helper.Process.Kill()
			helper.Wait()

			h := newScriptHands(t, box, 0)
			ctx := context.Background()
			leftPid := boxPid(t, h, "left.pid")
			if !boxRuns(t, h, leftPid) {
				t.Fatalf("the left command should still run after its host died")
			}
			mine, err := h.Run(ctx, hands.Command{Line: `sleep 300 & echo $! > own.tmp && mv own.tmp own.pid; wait`})
			if err != nil {
				t.Fatal(err)
			}
			ownPid := boxPid(t, h, "own.pid")

			n, err := h.EndLeftCommands(ctx)
			if err != nil || n != 1 {
				t.Fatalf("EndLeftCommands = %d, %v; want 1, nil", n, err)
			}
			if boxRuns(t, h, leftPid) {
				t.Errorf("the left command %s still runs", leftPid)
			}
			if !boxRuns(t, h, ownPid) {
				t.Errorf("EndLeftCommands ended this host's own command")
			}
			if n, err := h.EndLeftCommands(ctx); n != 0 || err != nil {
				t.Errorf("second EndLeftCommands = %d, %v; want 0", n, err)
			}
			kctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := mine.Kill(kctx); err != nil {
				t.Fatal(err)
			}
			if boxRuns(t, h, ownPid) {
				t.Errorf("Kill returned but the command's child %s runs", ownPid)
			}
		})
	}
}

// startHelper re-executes the test binary as a host process with env added
// (helperMain) and waits for it to say its command runs.
func startHelper(t *testing.T, exe string, env ...string) *exec.Cmd {
	t.Helper()
	helper := exec.Command(exe, "-test.run=^$")
	helper.Env = append(os.Environ(), env...)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper said %q", line)
	}
	return helper
}
