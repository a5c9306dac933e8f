package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
)

// sh runs `boxfs sh ARGS` and returns its stdout, stderr and status.
func (h *harness) sh(cwd string, stdin []byte, args ...string) (stdout, stderr []byte, code int) {
	h.t.Helper()
	cmd := h.shCmd(context.Background(), h.bin, cwd, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			h.t.Fatalf("boxfs sh %q: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.Bytes(), errb.Bytes(), code
}

// shCmd is boxfs sh as a host runs its shell: program, cwd, arguments,
// and no boxfs flags.
func (h *harness) shCmd(ctx context.Context, prog, cwd string, args ...string) *exec.Cmd {
	if filepath.Base(prog) != shLinkName {
		args = append([]string{"sh"}, args...)
	}
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	h.t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = cwd
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// workspace is the box's workspace path, from its facts.json.
func workspace(t *testing.T, mnt, box string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mnt, box, "facts.json"))
	must(t, err)
	var f struct {
		Workspace string `json:"workspace"`
	}
	must(t, json.Unmarshal(b, &f))
	if f.Workspace == "" {
		t.Fatalf("%s: facts.json has no workspace", box)
	}
	return f.Workspace
}

// TestSh runs boxfs sh as an agent host runs its shell, with the cwd in a
// box's work/: on a local box (write=through and write=behind) and, when
// an engine answers, a Docker box.
func TestSh(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.mountBackground(mnt)
	link := filepath.Join(t.TempDir(), shLinkName)
	must(t, os.Symlink(h.bin, link))
	small := boxfsbin.ShPath(t) // cmd/boxfs-sh, the program of its own

	t.Run("outside", func(t *testing.T) {
		dir := t.TempDir()
		_, stderr, code := h.sh(dir, nil, "-c", "touch ran")
		if code != exitCannotRun || !strings.Contains(string(stderr), "not inside a boxfs mount") {
			t.Errorf("outside a mount: exit %d, stderr %q; want %d and a message", code, stderr, exitCannotRun)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Errorf("the command ran on the host")
		}
		// In the mount but not in a box's work/.
		if _, stderr, code := h.sh(mnt, nil, "-c", "true"); code != exitCannotRun {
			t.Errorf("at the mount's root: exit %d, stderr %q", code, stderr)
		}
	})

	rows := []struct{ name, box string }{
		{"provider=local/write=through", "shl"},
		{"provider=local/write=behind", "shb"},
		{"provider=docker", "shd"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			box := row.box
			switch {
			case strings.HasPrefix(row.name, "provider=docker"):
				testbox.Docker(t)
				h.ok("new", box, "provider=docker", "lifetime=10m")
			case strings.HasSuffix(row.name, "behind"):
				h.ok("new", box, "lifetime=10m", "write=behind")
			default:
				h.ok("new", box, "lifetime=10m")
			}
			work := filepath.Join(mnt, box, "work")
			cwd := filepath.Join(work, "sub", "deeper")
			must(t, os.MkdirAll(cwd, 0o755))
			ws := workspace(t, mnt, box)
			testShIn(t, h, link, small, cwd, ws+"/sub/deeper")
		})
	}
}

func testShIn(t *testing.T, h *harness, link, small, cwd, boxDir string) {
	for _, c := range []struct {
		cmd  string
		code int
	}{{"exit 0", 0}, {"exit 3", 3}, {"no-such-command-36", 127}, {"kill -TERM $$", 143}} {
		if _, stderr, code := h.sh(cwd, nil, "-c", c.cmd); code != c.code {
			t.Errorf("sh -c %q: exit %d, want %d (stderr %q)", c.cmd, code, c.code, stderr)
		}
	}

	// stdout and stderr are separate byte-exact streams; stdin reaches
	// the command.
	in := []byte("in\x00\xff\x01\n")
	stdout, stderr, code := h.sh(cwd, in, "-c", `cat; printf '\000\001\377out'; printf '\376\000err' >&2`)
	if want := append(append([]byte{}, in...), "\x00\x01\xffout"...); code != 0 || !bytes.Equal(stdout, want) || !bytes.Equal(stderr, []byte("\xfe\x00err")) {
		t.Errorf("streams: exit %d stdout %q stderr %q; want 0, %q, %q", code, stdout, stderr, want, "\xfe\x00err")
	}

	// The cwd is the box directory the host's cwd stands for, through
	// the link too, with sh's $0 and arguments.
	if out, stderr, code := h.sh(cwd, nil, "-c", "pwd"); code != 0 || string(out) != boxDir+"\n" {
		t.Errorf("pwd: exit %d %q (stderr %q), want %q", code, out, stderr, boxDir)
	}
	out, err := h.shCmd(context.Background(), link, cwd, "-c", `echo "$0 $1 $(pwd)"`, "a", "b").Output()
	if want := "a b " + boxDir + "\n"; err != nil || string(out) != want {
		t.Errorf("through %s: %q, %v; want %q", shLinkName, out, err, want)
	}
	// boxfs-sh, the program of its own, is the same shell.
	scmd := h.shCmd(context.Background(), small, cwd, "-c", `echo "$0 $1 $(pwd)"; cat; exit 5`, "a", "b")
	scmd.Stdin = strings.NewReader("from stdin\n")
	out, err = scmd.Output()
	if want := "a b " + boxDir + "\nfrom stdin\n"; string(out) != want || exitCode(err) != 5 {
		t.Errorf("through %s: %q, %v; want %q and exit 5", small, out, err, want)
	}
	// exec without a box name takes the box and directory from the cwd.
	ecmd := h.shCmd(context.Background(), h.bin, cwd)
	ecmd.Args = []string{h.bin, "exec", "--", "pwd"}
	if out, err := ecmd.Output(); err != nil || string(out) != boxDir+"\n" {
		t.Errorf("exec -- pwd: %q, %v; want %q", out, err, boxDir)
	}

	// A file written through the mount is in the box when the command
	// starts (the barrier), and what the command writes shows at once.
	for i := range 3 {
		want := strings.Repeat("written on the host ", i+1)
		must(t, os.WriteFile(filepath.Join(cwd, "fresh.txt"), []byte(want), 0o644))
		if out, stderr, code := h.sh(cwd, nil, "-c", "cat fresh.txt; echo from the box > made.txt"); code != 0 || string(out) != want {
			t.Errorf("a file written right before: exit %d %q (stderr %q), want %q", code, out, stderr, want)
		}
		if b, err := os.ReadFile(filepath.Join(cwd, "made.txt")); err != nil || string(b) != "from the box\n" {
			t.Errorf("made.txt through the mount after the command: %q, %v", b, err)
		}
	}

	// SIGINT goes to the command's group: sh's 130.
	cmd := h.shCmd(context.Background(), h.bin, cwd, "-c", "echo started; sleep 6036; echo not interrupted")
	pipe, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	r := bufio.NewReader(pipe)
	if line, err := r.ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	must(t, cmd.Process.Signal(syscall.SIGINT))
	rest, _ := r.ReadString(0)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitInterrupted || rest != "" {
		t.Errorf("after SIGINT: %v, output %q; want exit %d and nothing", err, rest, exitInterrupted)
	}
	if n := boxProcesses(t, h, cwd, "sleep 6036", 10*time.Second); n != 0 {
		t.Errorf("sleep 6036 still runs in the box after SIGINT")
	}

	// The caller killed outright: the daemon kills the command's group.
	cmd = h.shCmd(context.Background(), h.bin, cwd, "-c", "sleep 6037 & echo started; wait")
	pipe, err = cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	if line, err := bufio.NewReader(pipe).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if n := boxProcesses(t, h, cwd, "sleep 6037", 0); n != 1 {
		t.Fatalf("the marker runs %d times in the box, want 1", n)
	}
	start := time.Now()
	must(t, cmd.Process.Kill())
	cmd.Wait()
	if n := boxProcesses(t, h, cwd, "sleep 6037", 5*time.Second); n != 0 {
		t.Errorf("sleep 6037 still runs in the box %v after its caller was killed", time.Since(start))
	}
	t.Logf("the box had no trace of the command %v after SIGKILL of boxfs sh", time.Since(start))
}

// boxProcesses counts the processes in the box whose command line is
// want, polling until none is left or within has passed (0: one look).
func boxProcesses(t *testing.T, h *harness, cwd, want string, within time.Duration) int {
	t.Helper()
	script := `n=0; for f in /proc/[0-9]*/cmdline; do l=$(tr '\000' ' ' < "$f" 2>/dev/null); [ "$l" = "$1 " ] && n=$((n+1)); done; echo $n`
	deadline := time.Now().Add(within)
	for {
		out, stderr, code := h.sh(cwd, nil, "-c", script, "count", want)
		if code != 0 {
			t.Fatalf("counting processes in the box: exit %d, %s", code, stderr)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("counting processes in the box: %q", out)
		}
		if n == 0 || !time.Now().Before(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exitCode is the status a command's Run or Output error carries; 0 for
// none, -1 for an error that is no exit.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
