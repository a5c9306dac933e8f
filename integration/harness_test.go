package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// mountT is one boxfs mount served by a child process.
type mountT struct {
	mnt, state string
	cmd        *exec.Cmd
	log        *syncBuffer
	ended      chan struct{} // closed once the child has exited
	exitErr    error         // its Wait's answer, once ended
	keepBoxes  bool          // a later mount of the same state ends them
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// providerChecks are the checks of providers whose own test file adds a
// row (in init): each skips the row, or fails it under its BOXFS_REQUIRE_*
// variable, when its service is not there, and may set the environment the
// serving process opens the provider with.
var providerChecks = map[string]func(t *testing.T){}

// requireProvider skips a row whose provider is not there; Docker rows fail
// instead under BOXFS_REQUIRE_DOCKER=1 (CI).
func requireProvider(t *testing.T, name string) {
	t.Helper()
	if check, ok := providerChecks[name]; ok {
		check(t)
		return
	}
	if name != "docker" {
		return
	}
	testbox.Docker(t)
}

// startMount serves a fresh namespace whose default provider is provider,
// with the defaults of a mount (the watch on).
func startMount(t *testing.T, provider string, opTimeout time.Duration) *mountT {
	t.Helper()
	return startMountAttr(t, provider, opTimeout, time.Second, true)
}

// startMountAttr is startMount with the attribute timeout attr, and the
// workspace watch only when watch is set.
func startMountAttr(t *testing.T, provider string, opTimeout, attr time.Duration, watch bool) *mountT {
	t.Helper()
	return startMountCfg(t, mountCfg{provider: provider, opTimeout: opTimeout, attr: attr, noWatch: !watch})
}

// startMountOn serves the namespace of the state directory state at mnt
// (a remount, when an earlier mount served them).
func startMountOn(t *testing.T, mnt, state, provider string, opTimeout, attr time.Duration, watch bool) *mountT {
	t.Helper()
	return startMountCfg(t, mountCfg{provider: provider, opTimeout: opTimeout, attr: attr, noWatch: !watch, mnt: mnt, state: state})
}

// startMountEnv is startMountOn with serve-mode settings env (envWatch=1,
// envAllowOther=1) for the serving process.
func startMountEnv(t *testing.T, mnt, state, provider string, opTimeout, attr time.Duration, env ...string) *mountT {
	t.Helper()
	return startMountCfg(t, mountCfg{provider: provider, opTimeout: opTimeout, attr: attr, mnt: mnt, state: state, env: env})
}

// mountCfg is how startMountCfg serves a namespace.
type mountCfg struct {
	provider        string
	opTimeout, attr time.Duration
	noWatch         bool   // the workspace watch off (a mount's default is on)
	watchMax        int    // the directories one watch covers; 0 for the default
	write           string // the mount's write mode; "" for the default
	mnt, state      string // the mount point and state directory; "" for new ones
	budget          int64  // the content cache's bound; 0 for the default
	// behindDelay is write-behind's batch delay; 0 for the default. A long
	// one leaves pushing to the barriers and full batches.
	behindDelay time.Duration
	env         []string // more serve-mode settings (envAllowOther=1)
}

// startMountCfg serves a namespace as cfg says.
func startMountCfg(t *testing.T, cfg mountCfg) *mountT {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	provider := cfg.provider
	requireProvider(t, provider)
	m := &mountT{mnt: cfg.mnt, state: cfg.state, log: &syncBuffer{}, ended: make(chan struct{})}
	if m.mnt == "" {
		m.mnt = t.TempDir()
	}
	if m.state == "" {
		m.state = t.TempDir()
	}
	m.cmd = exec.Command(os.Args[0], "-test.run=^$")
	m.cmd.Env = append(os.Environ(),
		envServe+"="+m.mnt, envState+"="+m.state, envProvider+"="+provider,
		envAgent+"="+boxfsbin.Path(t), envOpTime+"="+cfg.opTimeout.String(), envAttrTime+"="+cfg.attr.String())
	if cfg.noWatch {
		m.cmd.Env = append(m.cmd.Env, envWatch+"=0")
	}
	if cfg.watchMax != 0 {
		m.cmd.Env = append(m.cmd.Env, envWatchMax+"="+strconv.Itoa(cfg.watchMax))
	}
	if cfg.write != "" {
		m.cmd.Env = append(m.cmd.Env, envWrite+"="+cfg.write)
	}
	if cfg.behindDelay != 0 {
		m.cmd.Env = append(m.cmd.Env, envBehind+"="+cfg.behindDelay.String())
	}
	if cfg.budget != 0 {
		m.cmd.Env = append(m.cmd.Env, envBudget+"="+strconv.FormatInt(cfg.budget, 10))
	}
	m.cmd.Env = append(m.cmd.Env, cfg.env...)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	// A process the server started that outlives it (and holds its log
	// open) must not keep Wait from returning.
	m.cmd.WaitDelay = 5 * time.Second
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
			t.Errorf("the mount did not stop within 60 s of SIGTERM")
		}
		if isMounted(m.mnt) {
			exec.Command("umount", "-l", m.mnt).Run()
			t.Errorf("the mount was still there after its server stopped")
		}
		if !m.keepBoxes {
			m.destroyBoxes()
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("mount server log:\n%s", m.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(m.mnt) {
		select {
		case <-m.ended:
			t.Fatalf("mount server exited: %v\n%s", m.exitErr, m.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount not ready in 30 s\n%s", m.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return m
}

func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// destroyBoxes ends every box the mount made (its records name them).
func (m *mountT) destroyBoxes() {
	ents, _ := os.ReadDir(filepath.Join(m.state, "boxes"))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(m.state, "boxes", e.Name()))
		if err != nil {
			continue
		}
		var prov, id string
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if v, ok := strings.CutPrefix(l, `"provider": "`); ok {
				prov = strings.TrimSuffix(strings.TrimSuffix(v, ","), `"`)
			}
			if v, ok := strings.CutPrefix(l, `"id": "`); ok {
				id = strings.TrimSuffix(strings.TrimSuffix(v, ","), `"`)
			}
		}
		if prov == "" || id == "" {
			continue
		}
		p, err := providers.Open(prov, providers.Config{StateDir: filepath.Join(m.state, "providers", prov)})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if box, err := p.Attach(ctx, id); err == nil {
			box.Destroy(ctx)
		}
		cancel()
	}
}

// boxT is one box of a mount.
type boxT struct {
	m    *mountT
	name string
	dir  string // MOUNT/NAME
	work string // MOUNT/NAME/work
	// small: the box is reached without the agent (every file operation
	// is a command of its own), and the suites give it smaller trees.
	small bool
}

// newBox makes a box through the root ctl.
func (m *mountT) newBox(t *testing.T, name string, args ...string) *boxT {
	t.Helper()
	msg := strings.Join(append([]string{"new", name}, args...), " ") + "\n"
	if err := ctlWrite(filepath.Join(m.mnt, "ctl"), msg); err != nil {
		e, _ := os.ReadFile(filepath.Join(m.mnt, "err"))
		t.Fatalf("%s: %v (err: %s)", strings.TrimSpace(msg), err, e)
	}
	return &boxT{m: m, name: name, dir: filepath.Join(m.mnt, name), work: filepath.Join(m.mnt, name, "work")}
}

// ctlWrite writes one message as `echo msg > ctl` does.
func ctlWrite(name, msg string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(msg))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// run runs a command line in the box through exec and returns its output
// and exit status line.
func (b *boxT) run(t *testing.T, line string) (string, string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(b.dir, "exec"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(line + "\n")); err != nil {
		e, _ := os.ReadFile(filepath.Join(b.dir, "err"))
		t.Fatalf("exec %q: %v (err: %s)", line, err, e)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("exec %q: read: %v", line, err)
	}
	st, err := os.ReadFile(filepath.Join(b.dir, "cmds", itoa(fi.Size()), "status"))
	if err != nil {
		t.Fatalf("status of command %d: %v", fi.Size(), err)
	}
	return string(out), strings.TrimSpace(string(st))
}

// must runs a command line that must exit 0, and returns its output.
func (b *boxT) must(t *testing.T, line string) string {
	t.Helper()
	out, st := b.run(t, line)
	if st != "exit 0" {
		t.Fatalf("in box: %q: %s\n%s", line, st, out)
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// liveProcesses reports what the box's facts.json says of processes
// outliving their command: where they do not, a command's output arrives
// when it ends, and nothing runs between commands.
func (b *boxT) liveProcesses(t *testing.T) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
	if err != nil {
		t.Fatalf("facts.json: %v", err)
	}
	var f providers.Facts
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("facts.json: %v\n%s", err, data)
	}
	return f.HasLiveProcesses()
}

// needCheapFileOps skips a test that makes thousands of file operations
// through the mount (a git clone, gc and repack), on a box whose facts say
// no process lives past its command: with no agent there, every operation
// the box's own file API does not serve is one serverless call, and such
// a test runs far past its bounds.
func (b *boxT) needCheapFileOps(t *testing.T) {
	t.Helper()
	if !b.liveProcesses(t) {
		t.Skip("the box's facts say liveProcesses: false; each file operation is a call of its own")
	}
}

// needLiveProcesses skips a test whose steps need a process that outlives
// its command, a command's output while it runs, or other work in the box
// while a command runs, on a box whose facts say no process lives past
// its own command (one serverless call per command, one at a time).
func (b *boxT) needLiveProcesses(t *testing.T) {
	t.Helper()
	if !b.liveProcesses(t) {
		t.Skip("the box's facts say liveProcesses: false; this needs a process that outlives its command")
	}
}

// host runs a host tool with its working directory in dir (on the mount)
// and returns its combined output; it fails the test on a non-zero exit.
func host(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	out, err := hostErr(dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func hostErr(dir string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return string(out), err
}
