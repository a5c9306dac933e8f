package wrapper

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

// run runs c on this machine's /bin/sh as a box would, and returns its
// stdout, stderr and exit status.
func run(t *testing.T, c Command, join bool) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if join {
		cmd.Stderr = &out
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestScript runs Script through /bin/sh and checks what the host reads:
// the marker, the command's output and exit status, the trailer on both
// streams, argv and env byte for byte.
func TestScript(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid on this machine")
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sh := func(script string, args ...string) []string {
		return append([]string{"/bin/sh", "-c", script, "sh"}, args...)
	}
	cases := []struct {
		name      string
		req       providers.ExecRequest
		dir       string
		join      bool
		marker    byte
		out, errs string
		code      int
		anyErr    bool // the shell may report the signal on stderr
	}{
		{name: "started", req: providers.ExecRequest{Argv: sh(`printf '%s|%s|%s' "$1" "$V" "$(pwd)"; echo oops >&2`, "a b\377'\"\\"), Env: map[string]string{"V": "x\376y"}}, dir: tmp,
			marker: providers.MarkerStarted, out: "a b\377'\"\\|x\376y|" + tmp, errs: "oops\n"},
		{name: "no dir stays", req: providers.ExecRequest{Argv: []string{"true"}}, dir: "", marker: providers.MarkerStarted},
		{name: "exit status", req: providers.ExecRequest{Argv: sh("exit 7")}, dir: tmp, marker: providers.MarkerStarted, code: 7},
		{name: "signal", req: providers.ExecRequest{Argv: sh("kill -TERM $$")}, dir: tmp, marker: providers.MarkerStarted, code: 128 + 15, anyErr: true},
		{name: "joined", req: providers.ExecRequest{Argv: sh("echo a; echo b >&2")}, dir: tmp, join: true, marker: providers.MarkerStarted, out: "a\nb\n"},
		{name: "missing dir", req: providers.ExecRequest{Argv: []string{"true"}}, dir: tmp + "/nope", marker: providers.MarkerNoDir, code: 126},
		{name: "not a dir", req: providers.ExecRequest{Argv: []string{"true"}}, dir: file, marker: providers.MarkerNotDir, code: 126},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			if c.join {
				var w bytes.Buffer
				req.Stdout, req.Stderr = &w, &w
			}
			cmd := NewCommand(req, c.dir)
			end := string(trailer(cmd.Name))
			stdout, stderr, code := run(t, cmd, c.join)
			wantOut := string([]byte{c.marker}) + c.out + end
			wantErr := c.errs + end
			if c.join {
				wantOut += end
				wantErr = ""
			}
			if c.anyErr && strings.HasSuffix(stderr, end) {
				wantErr = stderr
			}
			if stdout != wantOut || stderr != wantErr || code != c.code {
				t.Errorf("got stdout %q stderr %q exit %d, want %q %q %d", stdout, stderr, code, wantOut, wantErr, c.code)
			}
			if _, err := os.Stat(pidFile(cmd.Name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("pid file left behind: %v", err)
			}
		})
	}
}

// pidFile is where Script records a group on this machine.
func pidFile(name string) string {
	return "/tmp/.boxfs-" + strconv.Itoa(os.Getuid()) + "/" + name
}

// TestKillScript starts a command that leaves a child behind, kills its
// group with KillScript and checks that no process of it is left; a
// second kill finds nothing recorded.
func TestKillScript(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid on this machine")
	}
	c := NewCommand(providers.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 600 & echo $!; wait"}}, "")
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(pipe).ReadString('\n')
	if err != nil || len(line) < 2 || line[0] != providers.MarkerStarted {
		t.Fatalf("read %q, %v; want the marker and the child's pid", line, err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		t.Fatal(err)
	}
	kill := func() int {
		k := KillArgv(c.Name)
		err := exec.Command(k[0], k[1:]...).Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if code := kill(); code != 0 {
		t.Fatalf("kill: exit %d, want 0 (gone)", code)
	}
	if err := cmd.Wait(); err == nil {
		t.Errorf("the wrapper exited normally after its group was killed")
	}
	// The script confirmed the group gone: the child is dead or a zombie
	// left for its new parent to reap.
	if syscall.Kill(child, 0) == nil {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		if !bytes.Contains(stat, []byte(") Z ")) {
			t.Fatalf("the command's child %d outlived the kill: %q", child, stat)
		}
	}
	if code := kill(); code != 3 {
		t.Errorf("second kill: exit %d, want 3 (nothing recorded)", code)
	}
}
