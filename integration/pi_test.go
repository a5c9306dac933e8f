package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
)

// piVersion is the pi coding agent the test drives, pinned.
const piVersion = "0.73.1"

// piLong is the argument of the long command the test aborts: a number
// nothing else in a box runs with.
const piLong = "3636"

// TestPi drives the real pi coding agent (npm, RPC mode) with a scripted
// model, its working directory at work/ of a local and of a Docker box,
// and its shellPath set to boxfs sh. The script runs all seven of pi's
// tools; the test shows each one's effect in the box, that bash runs in
// the box (hostname, pwd -P), that the write tool's file is in the box
// for the next bash command, that a compiler-style path a box command
// prints is one the next read opens, and that an aborted command (pi
// kills its shell's process group with SIGKILL) leaves nothing running
// in the box.
func TestPi(t *testing.T) {
	if testing.Short() {
		t.Skip("installs and runs the pi agent; -short skips it")
	}
	cli := installPi(t)
	tools := piSearchTools(t)
	// The rows the issue asks for: a box whose paths are the host's, and
	// one on another machine (its own hostname and root).
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) { testPi(t, cli, tools, prov) })
	}
}

func testPi(t *testing.T, cli, tools, prov string) {
	m := startDaemon(t, prov)
	b := m.newBox(t, "pi", "provider="+prov, "lifetime=10m")

	// What the box says of itself, through exec (no pi, no boxfs sh).
	b.must(t, `mkdir -p src && printf 'package main\n\nfunc main() {}\n' > src/main.go && echo 'the needle-36 line' > src/notes.txt`)
	boxHost := strings.TrimSpace(b.must(t, "hostname"))
	boxDir := strings.TrimSpace(b.must(t, "pwd -P"))
	hostName, _ := os.Hostname()
	t.Logf("box: hostname %s, workspace %s; host: hostname %s, cwd %s", boxHost, boxDir, hostName, b.work)
	if boxDir == b.work {
		t.Fatalf("the box's workspace is the mount path %s", b.work)
	}
	if prov == "docker" && boxHost == hostName {
		t.Fatalf("the Docker box's hostname is the host's (%s)", hostName)
	}

	const written = "written by pi's write tool\n"
	const edited = `func main() { println("edited by pi") }`
	compilerLine := regexp.MustCompile(`(?m)^(\S+\.go):(\d+):\d+: error: (abs|rel)$`)
	// compilerPath is the path of the compiler-style line of kind in
	// out (abs or rel), as a model would take it for its next read.
	compilerPath := func(out, kind string) map[string]any {
		for _, m := range compilerLine.FindAllStringSubmatch(out, -1) {
			if m[3] == kind {
				line, _ := strconv.Atoi(m[2])
				return map[string]any{"path": m[1], "offset": line, "limit": 1}
			}
		}
		return map[string]any{"path": "no compiler line of kind " + kind + " in the output"}
	}
	call := func(tool string, args map[string]any) func([]string) modelCall {
		return func([]string) modelCall { return modelCall{tool, args} }
	}
	// The turns, by name, so the checks below say which tool they look at.
	const (
		tWhere = iota
		tRead
		tWrite
		tBashSees
		tEdit
		tCompiler
		tReadRel
		tReadAbs
		tGrep
		tFind
		tLs
		tLong
	)
	script := []func([]string) modelCall{
		tWhere:    call("bash", map[string]any{"command": "hostname; pwd -P"}),
		tRead:     call("read", map[string]any{"path": "src/main.go"}),
		tWrite:    call("write", map[string]any{"path": "gen/hello.txt", "content": written}),
		tBashSees: call("bash", map[string]any{"command": "cat gen/hello.txt && mkdir -p made && echo made in the box > made/by-bash-36.txt"}),
		tEdit:     call("edit", map[string]any{"path": "src/main.go", "edits": []any{map[string]any{"oldText": "func main() {}", "newText": edited}}}),
		// A compiler's error lines: one with the box's absolute path, one
		// relative to the cwd; exit 1 as a failed build.
		tCompiler: call("bash", map[string]any{"command": `echo "$PWD/src/main.go:3:1: error: abs"; echo "src/main.go:3:1: error: rel" >&2; exit 1`}),
		tReadRel:  func(r []string) modelCall { return modelCall{"read", compilerPath(at(r, tCompiler), "rel")} },
		tReadAbs:  func(r []string) modelCall { return modelCall{"read", compilerPath(at(r, tCompiler), "abs")} },
		tGrep:     call("grep", map[string]any{"pattern": "needle-36", "path": "."}),
		tFind:     call("find", map[string]any{"pattern": "*.txt"}),
		tLs:       call("ls", map[string]any{"path": "."}),
		tLong:     call("bash", map[string]any{"command": "sleep " + piLong + " & sleep " + piLong + "; wait"}),
	}
	model := newScriptedModel(t, script)
	p := startPi(t, cli, tools, b.work, model)

	p.send(t, map[string]any{"type": "prompt", "message": "Work on this project."})
	p.await(t, "the prompt's response", 30*time.Second, func(e piEvent) bool { return e.Type == "response" && e.Command == "prompt" })

	// The long command: seen running in the box, then aborted.
	deadline := time.Now().Add(3 * time.Minute)
	for served := -1; served != tLong; {
		select {
		case served = <-model.served:
		case <-p.exited:
			t.Fatalf("pi exited before the long command; model errors %q", model.failures())
		case <-time.After(time.Until(deadline)):
			t.Fatalf("the model did not serve the long command in 3 min; model errors %q", model.failures())
		}
	}
	if n := boxCount(t, b, 2, time.Minute); n < 2 {
		t.Fatalf("the long command runs %d sleep(s) in the box, want 2", n)
	}
	p.send(t, map[string]any{"type": "abort"})
	aborted := time.Now()
	left := boxGone(t, b, 5*time.Second)
	took := time.Since(aborted)
	if left != 0 {
		t.Errorf("%d processes of the aborted command still run in the box %v after the abort", left, took)
	} else if took > 2*time.Second {
		t.Errorf("the aborted command's processes were gone from the box only %v after the abort", took)
	}
	t.Logf("nothing of the aborted command ran in the box %v after pi's abort", took)
	end := p.await(t, "the aborted bash's end", 30*time.Second, func(e piEvent) bool {
		return e.Type == "tool_execution_end" && e.ToolCallID == fmt.Sprintf("call_%d", tLong)
	})
	if !end.IsError {
		t.Errorf("the aborted bash ended without an error: %s", end.text())
	}
	p.await(t, "agent_end", 30*time.Second, func(e piEvent) bool { return e.Type == "agent_end" })
	if f := model.failures(); len(f) > 0 {
		t.Errorf("the model could not answer: %q", f)
	}

	result := func(turn int) string {
		t.Helper()
		r, ok := model.result(turn)
		if !ok {
			t.Fatalf("pi never sent the result of turn %d (%s)", turn, script[turn](make([]string, len(script))).tool)
		}
		return r
	}
	// bash ran in the box: the box's hostname and directory.
	if got := result(tWhere); got != boxHost+"\n"+boxDir+"\n" {
		t.Errorf("bash `hostname; pwd -P` printed %q, want the box's %q", got, boxHost+"\n"+boxDir+"\n")
	}
	// read: a file made in the box, through the mount.
	if got := result(tRead); !strings.Contains(got, "func main() {}") {
		t.Errorf("read src/main.go: %q", got)
	}
	// write: the bytes are in the box, and the next bash command saw them.
	if got := b.must(t, "cat gen/hello.txt"); got != written {
		t.Errorf("the write tool's file in the box: %q, want %q", got, written)
	}
	if got := result(tBashSees); !strings.HasPrefix(got, written) {
		t.Errorf("bash after write printed %q, want the written file %q first", got, written)
	}
	if got := b.must(t, "cat made/by-bash-36.txt"); got != "made in the box\n" {
		t.Errorf("the file bash made, in the box: %q", got)
	}
	// edit: the box's file has the new text.
	if got := b.must(t, "cat src/main.go"); got != "package main\n\n"+edited+"\n" {
		t.Errorf("the edited file in the box: %q", got)
	}
	// A compiler-style path the box printed is one read opens: relative
	// on every box; the box's absolute path only where the box's paths are
	// the host's (a local box).
	if got := result(tCompiler); !strings.Contains(got, boxDir+"/src/main.go:3:1: error: abs") || !strings.Contains(got, "src/main.go:3:1: error: rel") {
		t.Errorf("the compiler-style lines: %q", got)
	}
	if got := result(tReadRel); !strings.Contains(got, edited) {
		t.Errorf("read of the relative compiler path %v: %q, want the edited line", compilerPath(result(tCompiler), "rel"), got)
	}
	absRead := result(tReadAbs)
	switch {
	case prov == "local" && !strings.Contains(absRead, edited):
		t.Errorf("read of the absolute compiler path %v: %q, want the edited line", compilerPath(result(tCompiler), "abs"), absRead)
	case prov != "local" && strings.Contains(absRead, edited):
		t.Logf("read of the box's absolute path %s opened the file: the box's paths are the host's", boxDir)
	case prov != "local":
		// Known: docs/agents.md, "Paths": the box's workspace path is not
		// on the host; the host opens MOUNT/NAME/work/... instead.
		t.Logf("known: the box's absolute path %s/src/main.go is not on the host: %q", boxDir, absRead)
	}
	// grep (ripgrep over the mount) finds a line written in the box.
	if got := result(tGrep); !strings.Contains(got, "src/notes.txt") || !strings.Contains(got, "the needle-36 line") {
		t.Errorf("grep needle-36: %q", got)
	}
	// find (fd over the mount) lists files made in the box by exec, by
	// the write tool and by bash.
	for _, want := range []string{"src/notes.txt", "gen/hello.txt", "made/by-bash-36.txt"} {
		if got := result(tFind); !strings.Contains(got, want) {
			t.Errorf("find *.txt: %q lacks %s", got, want)
		}
	}
	// ls lists the workspace as the box has it.
	boxLs := strings.Fields(b.must(t, "ls -A"))
	for _, want := range boxLs {
		if got := result(tLs); !strings.Contains(got, want) {
			t.Errorf("ls: %q lacks %s, which the box has (%v)", got, want, boxLs)
		}
	}
	t.Logf("each tool call, start to end: %s", p.toolTimes())
	p.stop(t)
}

// at is results[i], or "" before turn i's result.
func at(results []string, i int) string {
	if i < len(results) {
		return results[i]
	}
	return ""
}

// boxCount polls until at least want processes in the box run sleep with
// piLong, or within has passed, and returns how many run.
func boxCount(t *testing.T, b *boxT, want int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		// -z: a cmdline's arguments are its lines; the pattern does not
		// match the script's own arguments.
		n := boxInt(t, b, `grep -zlxE '`+piLong[:len(piLong)-1]+`[`+piLong[len(piLong)-1:]+`]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l`)
		if n >= want || !time.Now().Before(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// boxGone polls until no process in the box has an argument holding
// piLong (the sleeps and their shell), or within has passed, and returns
// how many are left.
func boxGone(t *testing.T, b *boxT, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n := boxInt(t, b, `grep -zlE '`+piLong[:len(piLong)-1]+`[`+piLong[len(piLong)-1:]+`]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l`)
		if n == 0 || !time.Now().Before(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func boxInt(t *testing.T, b *boxT, line string) int {
	t.Helper()
	out := b.must(t, line)
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("in box: %q printed %q", line, out)
	}
	return n
}

// installPi installs the pinned pi package once into the user's cache, as
// the npm checks install theirs, and returns the path of its command.
// Without Node and npm it skips (fails under BOXFS_REQUIRE_NPM=1).
func installPi(t *testing.T) string {
	t.Helper()
	testbox.RequireNPM(t)
	out, err := exec.Command("node", "-p", "process.versions.node").Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if v := strings.Split(strings.TrimSpace(string(out)), "."); len(v) < 2 || atoiOr0(v[0]) < 20 || atoiOr0(v[0]) == 20 && atoiOr0(v[1]) < 6 {
		testbox.NPMUnavailable(t, "pi %s needs Node 20.6 or later; this is %s", piVersion, out)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "boxfs", "npm-pi-coding-agent-"+piVersion)
	entry := filepath.Join(dir, "node_modules", "@mariozechner", "pi-coding-agent", "dist", "cli.js")
	if _, err := os.Stat(entry); err == nil {
		return entry
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", "@mariozechner/pi-coding-agent@"+piVersion)
	if msg, err := cmd.CombinedOutput(); err != nil {
		testbox.NPMUnavailable(t, "npm install @mariozechner/pi-coding-agent@%s: %v\n%s", piVersion, err, msg)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(entry); serr != nil { // another test process got there first
			t.Fatalf("installing pi: %v", err)
		}
	}
	return entry
}

func atoiOr0(s string) int { n, _ := strconv.Atoi(s); return n }

// piSearchTools returns a directory for the front of pi's PATH that
// holds what its grep and find tools run, ripgrep (rg) and fd, which pi
// would otherwise download. Without them the test skips (fails under
// BOXFS_REQUIRE_NPM=1); scripts/setup installs them. pi passes fd
// --no-require-git, which Debian 12's fd 8.6 (installed as fdfind) does
// not know: there the directory's fd is a wrapper that leaves it out, a
// flag that only matters for .gitignore files outside a git repository,
// and the workspace has none.
func piSearchTools(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := exec.LookPath("rg"); err != nil {
		testbox.NPMUnavailable(t, "ripgrep (rg), which pi's grep tool runs, is not installed (scripts/setup installs it): %v", err)
	}
	fd, err := exec.LookPath("fd")
	if err != nil {
		if fd, err = exec.LookPath("fdfind"); err != nil {
			testbox.NPMUnavailable(t, "fd, which pi's find tool runs, is not installed (scripts/setup installs it): %v", err)
		}
	}
	help, _ := exec.Command(fd, "--help").Output()
	if strings.Contains(string(help), "--no-require-git") {
		if err := os.Symlink(fd, filepath.Join(dir, "fd")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	wrapper := "#!/bin/sh\n# fd without --no-require-git, which " + fd + " does not know.\n" +
		"for a; do shift; [ \"$a\" = --no-require-git ] || set -- \"$@\" \"$a\"; done\n" +
		"exec " + fd + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "fd"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s has no --no-require-git, which pi passes: pi runs it through a wrapper that leaves the flag out", fd)
	return dir
}

// startDaemon serves a fresh namespace with the boxfs command itself
// (`boxfs mount`, in the foreground), which, unlike the test binary's
// serve mode, serves boxfs sh. provider's row skips or fails as
// startMount's do when its service is not there. env (BOXFS_PPROF=1) is
// added to the daemon's environment, which holds no other BOXFS_ variable
// of the test's.
func startDaemon(t *testing.T, provider string, env ...string) *mountT {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	requireProvider(t, provider)
	bin := boxfsbin.Path(t)
	m := &mountT{mnt: t.TempDir(), state: t.TempDir(), log: &syncBuffer{}, ended: make(chan struct{})}
	m.cmd = exec.Command(bin, "--state", m.state, "--config", "", "mount", m.mnt)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BOXFS_") || strings.HasPrefix(kv, "BOXFS_REQUIRE_") {
			m.cmd.Env = append(m.cmd.Env, kv)
		}
	}
	m.cmd.Env = append(m.cmd.Env, env...)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		m.exitErr = m.cmd.Wait()
		close(m.ended)
	}()
	t.Cleanup(func() {
		m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.ended:
		case <-time.After(60 * time.Second):
			m.cmd.Process.Kill()
			<-m.ended
			t.Errorf("boxfs mount did not stop within 60 s of SIGTERM")
		}
		if isMounted(m.mnt) {
			exec.Command("umount", "-l", m.mnt).Run()
			t.Errorf("the mount was still there after boxfs mount ended")
		}
		m.destroyBoxes()
		if t.Failed() || testing.Verbose() {
			t.Logf("boxfs mount log:\n%s", m.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The mount record is written once the mount and boxfs sh's
		// socket answer.
		if _, err := os.Stat(filepath.Join(m.state, "mount.json")); err == nil && isMounted(m.mnt) {
			return m
		}
		select {
		case <-m.ended:
			t.Fatalf("boxfs mount exited: %v\n%s", m.exitErr, m.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("boxfs mount not ready in 30 s\n%s", m.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// piProc is pi in RPC mode: commands on its stdin, events on its stdout.
type piProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan piEvent
	lines  *syncBuffer // what it printed, for the log
	// tools lists each tool call's run, start to end, as events came.
	toolsMu sync.Mutex
	tools   []piToolRun
	exited  chan struct{}
}

// piEvent is the part of an RPC event or response the test reads.
type piEvent struct {
	at         time.Time // when the test read it
	Type       string    `json:"type"`
	Command    string    `json:"command"`
	Success    *bool     `json:"success"`
	Error      string    `json:"error"`
	ToolCallID string    `json:"toolCallId"`
	ToolName   string    `json:"toolName"`
	IsError    bool      `json:"isError"`
	Result     struct {
		Content []struct {
			Type, Text string
		} `json:"content"`
	} `json:"result"`
}

func (e piEvent) text() string {
	var s string
	for _, c := range e.Result.Content {
		s += c.Text
	}
	return s
}

// startPi runs pi in RPC mode in cwd, with a settings directory of its
// own: the scripted model as its only provider, shellPath naming boxfs
// sh (the boxfs-sh link), nothing fetched from the network.
func startPi(t *testing.T, cli, tools, cwd string, model *scriptedModel) *piProc {
	t.Helper()
	home := t.TempDir()
	agentDir := filepath.Join(home, "agent")
	if err := os.MkdirAll(agentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "boxfs-sh")
	if err := os.Symlink(boxfsbin.Path(t), link); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(agentDir, "settings.json"), map[string]any{"shellPath": link, "quietStartup": true})
	writeJSON(t, filepath.Join(agentDir, "models.json"), map[string]any{"providers": map[string]any{
		"boxfs-script": map[string]any{
			"baseUrl": model.baseURL(), "api": "openai-completions", "apiKey": "none",
			"compat": map[string]any{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
			"models": []any{map[string]any{"id": "scripted", "reasoning": false, "contextWindow": 128000, "maxTokens": 4096}},
		},
	}})
	p := &piProc{events: make(chan piEvent, 1024), lines: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command("node", cli, "--mode", "rpc", "--provider", "boxfs-script", "--model", "scripted", "--no-session",
		"--tools", "read,write,edit,bash,grep,find,ls")
	p.cmd.Dir = cwd
	p.cmd.Env = append(os.Environ(), "HOME="+home, "PI_CODING_AGENT_DIR="+agentDir, "PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1",
		"PATH="+tools+string(os.PathListSeparator)+os.Getenv("PATH"))
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	p.cmd.Stderr = stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.events)
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				p.lines.Write(line)
				e := piEvent{at: time.Now()}
				if json.Unmarshal(line, &e) == nil {
					p.noteTool(e)
					p.events <- e
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() || testing.Verbose() {
			out := p.lines.String()
			if len(out) > 64<<10 {
				out = "...\n" + out[len(out)-64<<10:]
			}
			t.Logf("pi stderr:\n%s\npi events:\n%s", stderr.String(), out)
		}
	})
	return p
}

// piToolRun is one tool call pi ran.
type piToolRun struct {
	id, tool   string
	start, end time.Time
}

func (p *piProc) noteTool(e piEvent) {
	p.toolsMu.Lock()
	defer p.toolsMu.Unlock()
	switch e.Type {
	case "tool_execution_start":
		p.tools = append(p.tools, piToolRun{id: e.ToolCallID, tool: e.ToolName, start: e.at})
	case "tool_execution_end":
		for i := range p.tools {
			if p.tools[i].id == e.ToolCallID {
				p.tools[i].end = e.at
			}
		}
	}
}

// toolTimes says how long each tool call took, as pi's events tell.
func (p *piProc) toolTimes() string {
	p.toolsMu.Lock()
	defer p.toolsMu.Unlock()
	var parts []string
	for _, r := range p.tools {
		if !r.end.IsZero() {
			parts = append(parts, fmt.Sprintf("%s %v", r.tool, r.end.Sub(r.start).Round(100*time.Microsecond)))
		}
	}
	return strings.Join(parts, ", ")
}

func writeJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// send writes one RPC command.
func (p *piProc) send(t *testing.T, cmd map[string]any) {
	t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("pi's stdin: %v", err)
	}
}

// await returns the first event ok accepts, failing the test on a failed
// response, on pi's exit, or after within.
func (p *piProc) await(t *testing.T, what string, within time.Duration, ok func(piEvent) bool) piEvent {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case e, more := <-p.events:
			if !more {
				t.Fatalf("pi's output ended before %s", what)
			}
			if e.Type == "response" && e.Success != nil && !*e.Success {
				t.Fatalf("pi refused %s: %s", e.Command, e.Error)
			}
			if ok(e) {
				return e
			}
		case <-timer.C:
			t.Fatalf("no %s from pi in %v", what, within)
		}
	}
}

// stop ends pi by closing its stdin, as an RPC client that is done does,
// and kills it if it is still there a while later.
func (p *piProc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
}
