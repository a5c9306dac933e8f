//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// A channel is tested against every kind of box that can run the agent:
// providers/local (the agent runs on this host) and providers/docker (in a
// container, when an engine answers).

type boxKind struct {
	name string
	make func(t *testing.T) providers.Box
	// root is a fresh directory for a test to work in, box-side.
	root func(t *testing.T, box providers.Box) string
	// hostView reports whether box-side paths are host paths.
	hostView bool
}

var boxKinds = []boxKind{
	{
		name: "local",
		make: func(t *testing.T) providers.Box {
			p := local.New(t.TempDir())
			box, err := p.Create(bg(t), providers.Spec{Lifetime: 30 * time.Minute})
			if err != nil {
				t.Fatalf("local Create: %v", err)
			}
			t.Cleanup(func() { box.Destroy(context.Background()) })
			return box
		},
		root:     func(t *testing.T, box providers.Box) string { return t.TempDir() },
		hostView: true,
	},
	{
		name: "docker",
		make: testbox.NewDocker,
		root: func(t *testing.T, box providers.Box) string {
			return "/tmp/agent-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		},
	},
}

func newChannel(t *testing.T, box providers.Box, liveness time.Duration) *Channel {
	ch := NewChannel(box, ChannelOptions{Binary: boxfsbin.Path(t), Liveness: liveness})
	t.Cleanup(func() { ch.Close() })
	return ch
}

// signalAgents sends sig ("KILL", "STOP", "CONT", or "none") to every
// process in the box running the agent at path, found through /proc in
// the box, and returns how many there were.
func signalAgents(t *testing.T, box providers.Box, path, sig string) int {
	t.Helper()
	// One find over /proc: the agent's /proc/PID/exe points at path (no
	// glob characters in the test paths).
	const script = `n=0
for p in $(find /proc -mindepth 2 -maxdepth 2 -name exe -lname "$2" 2>/dev/null); do
	n=$((n+1))
	p=${p#/proc/}
	[ "$1" = none ] || kill -"$1" "${p%/exe}"
done
echo $n`
	var out, errb bytes.Buffer
	proc, err := box.Exec(bg(t), providers.ExecRequest{Argv: []string{"/bin/sh", "-c", script, "sig", sig, path}, Dir: "/", Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("signal agents: %v", err)
	}
	if code, err := proc.Wait(); err != nil || code != 0 {
		t.Fatalf("signal agents: exit %d %v: %s", code, err, errb.String())
	}
	n, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("signal agents: output %q", out.String())
	}
	return n
}

func (ch *Channel) agentPath() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.dest
}

// eventually polls cond until it holds or the bound passes.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestChannel(t *testing.T) {
	for _, kind := range boxKinds {
		t.Run("box="+kind.name, func(t *testing.T) {
			box := kind.make(t)
			t.Run("MatchesOS", func(t *testing.T) {
				ch := newChannel(t, box, 10*time.Second)
				root := kind.root(t, box)
				if !kind.hostView {
					if err := ch.Mkdir(bg(t), root, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				snap := func() (map[string]string, error) { return snapshotFiles(bg(t), ch, root) }
				if kind.hostView {
					snap = func() (map[string]string, error) { return snapshot(root) }
				}
				ref := t.TempDir()
				os.Chmod(ref, 0o755)
				runDifferential(t, ch, ref, root, snap)
				st := ch.Stats()
				if !st.Up || st.Opens != 1 || st.Restarts != 0 || st.RoundTrips < int64(len(fileOps)) {
					t.Errorf("stats %+v", st)
				}
			})
			t.Run("OddNames", func(t *testing.T) { testOddNamesChannel(t, kind, box) })
			t.Run("ReusesBinary", func(t *testing.T) { testReusesBinary(t, box) })
			t.Run("KilledAgentRestarts", func(t *testing.T) { testKilledAgent(t, box) })
			t.Run("KilledInFlight", func(t *testing.T) { testKilledInFlight(t, box) })
			t.Run("StoppedAgentLiveness", func(t *testing.T) { testStoppedAgent(t, box) })
			t.Run("CloseEndsAgent", func(t *testing.T) { testCloseEndsAgent(t, box) })
		})
	}
}

func testOddNamesChannel(t *testing.T, kind boxKind, box providers.Box) {
	ch := newChannel(t, box, 10*time.Second)
	ctx := bg(t)
	root := kind.root(t, box)
	if !kind.hostView {
		if err := ch.Mkdir(ctx, root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"with space", "new\nline", `q"uo'te`, "-dash", "$(touch pwned)", "\xff\xfe bytes", "a=b&c%2Fd?e"}
	for _, n := range names {
		p := filepath.Join(root, n)
		if err := ch.WriteFile(ctx, p, strings.NewReader(n), 0o644); err != nil {
			t.Fatalf("writefile %q: %v", n, err)
		}
		if s, err := readAll(ctx, ch, p); err != nil || s != n {
			t.Fatalf("readfile %q: %q %v", n, s, err)
		}
	}
	fis, err := ch.ReadDir(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fi := range fis {
		got = append(got, fi.Name)
	}
	want := append([]string(nil), names...)
	sortStrings(want)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("readdir: %q, want %q", got, want)
	}
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// testReusesBinary: a second channel to the same box finds the binary in
// place; a binary damaged in the box is found out by its checksum and
// replaced.
func testReusesBinary(t *testing.T, box providers.Box) {
	ctx := bg(t)
	first := newChannel(t, box, 10*time.Second)
	if err := first.Open(ctx); err != nil {
		t.Fatal(err)
	}
	second := newChannel(t, box, 10*time.Second)
	if _, err := second.Stat(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	if st := second.Stats(); st.Uploads != 0 || st.Opens != 1 {
		t.Errorf("second channel: %+v, want no upload", st)
	}
	second.Close()

	// Damage the binary in the box: same size, one byte changed.
	dest := first.agentPath()
	var errb bytes.Buffer
	proc, err := box.Exec(ctx, providers.ExecRequest{
		// A copy renamed over it: the running binary cannot be written.
		Argv: []string{"/bin/sh", "-c", `cp "$1" "$1.x" && printf X | dd of="$1.x" bs=1 seek=100 conv=notrunc 2>/dev/null && mv -f "$1.x" "$1"`, "damage", dest},
		Dir:  "/", Stderr: &errb,
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := proc.Wait(); err != nil || code != 0 {
		t.Fatalf("damaging the binary: %d %v %s", code, err, errb.String())
	}
	third := newChannel(t, box, 10*time.Second)
	if _, err := third.Stat(ctx, "/"); err != nil {
		t.Fatalf("stat with a damaged binary in place: %v", err)
	}
	if st := third.Stats(); st.Uploads != 1 {
		t.Errorf("third channel: %+v, want one upload", st)
	}

	// A channel told where the binary was starts it there without
	// looking: it is, and serves; then it is not, and is uploaded.
	likely := func() *Channel {
		ch := NewChannel(box, ChannelOptions{Binary: boxfsbin.Path(t), Liveness: 10 * time.Second, InstalledAt: dest})
		t.Cleanup(func() { ch.Close() })
		return ch
	}
	fourth := likely()
	_, err = fourth.Stat(ctx, "/")
	require.NoError(t, err)
	assert.Zero(t, fourth.Stats().Uploads, "the binary was there")
	fourth.Close()
	proc, err = box.Exec(ctx, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", `rm -f "$1" "$1.sum"`, "rm", dest}, Dir: "/"})
	require.NoError(t, err)
	code, err := proc.Wait()
	require.NoError(t, err)
	require.Zero(t, code)
	fifth := likely()
	_, err = fifth.Stat(ctx, "/")
	require.NoError(t, err, "stat when the binary was not there")
	assert.Equal(t, 1, fifth.Stats().Uploads)
}

// testKilledAgent: an agent killed while idle is reported to the next call
// as TransportLost; the call after that runs on a new agent.
func testKilledAgent(t *testing.T, box providers.Box) {
	ctx := bg(t)
	ch := newChannel(t, box, 10*time.Second)
	if _, err := ch.Stat(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	if n := signalAgents(t, box, ch.agentPath(), "KILL"); n != 1 {
		t.Fatalf("killed %d agents, want 1", n)
	}
	_, err := ch.Stat(ctx, "/")
	if providers.CodeOf(err) != providers.TransportLost {
		t.Fatalf("stat after kill: %v, want transport_lost", err)
	}
	fi, err := ch.Stat(ctx, "/")
	if err != nil || !fi.IsDir() {
		t.Fatalf("stat after restart: %v", err)
	}
	st := ch.Stats()
	if st.Restarts != 1 || st.LastCode != providers.TransportLost || !st.Up {
		t.Errorf("stats %+v", st)
	}
	if n := signalAgents(t, box, ch.agentPath(), "none"); n != 1 {
		t.Errorf("%d agents run, want 1", n)
	}
}

// testKilledInFlight: calls in flight when the agent dies fail at once;
// since they reported it, the next call restarts.
func testKilledInFlight(t *testing.T, box providers.Box) {
	ctx := bg(t)
	ch := newChannel(t, box, 30*time.Second)
	if _, err := ch.Stat(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	path := ch.agentPath()
	signalAgents(t, box, path, "STOP")
	errs := make(chan error, 2)
	go func() { _, err := ch.Stat(ctx, "/"); errs <- err }()
	go func() { errs <- ch.Mkdir(ctx, "/tmp/never-made-"+providers.NewID(8), 0o755) }()
	time.Sleep(200 * time.Millisecond) // let both be sent
	start := time.Now()
	signalAgents(t, box, path, "KILL")
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, providers.ErrTransportLost) {
				t.Errorf("call in flight: %v, want transport_lost", err)
			}
			if providers.CodeOf(err) == providers.OutcomeUnknown && !strings.Contains(err.Error(), "Mkdir") {
				t.Errorf("only the mutation should be outcome_unknown: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("calls in flight did not fail after the agent was killed")
		}
	}
	t.Logf("calls in flight failed %v after the kill", time.Since(start))
	if _, err := ch.Stat(ctx, "/"); err != nil {
		t.Fatalf("stat after restart: %v", err)
	}
}

// testStoppedAgent: a stopped agent (SIGSTOP) returns Liveness within the
// bound; the channel kills it and the next call runs on a new agent.
func testStoppedAgent(t *testing.T, box providers.Box) {
	ctx := bg(t)
	const bound = time.Second
	ch := newChannel(t, box, bound)
	if _, err := ch.Stat(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	path := ch.agentPath()
	signalAgents(t, box, path, "STOP")
	start := time.Now()
	_, err := ch.Stat(context.Background(), "/")
	took := time.Since(start)
	if providers.CodeOf(err) != providers.Liveness {
		t.Fatalf("stat on a stopped agent: %v, want liveness", err)
	}
	if took < bound || took > bound+10*time.Second {
		t.Errorf("liveness after %v with a %v bound", took, bound)
	}
	t.Logf("liveness after %v (bound %v)", took, bound)
	if _, err := ch.Stat(ctx, "/"); err != nil {
		t.Fatalf("stat after restart: %v", err)
	}
	// The stopped agent was killed: one agent runs, the new one.
	eventually(t, 30*time.Second, "the stopped agent gone", func() bool {
		return signalAgents(t, box, path, "none") == 1
	})
	if st := ch.Stats(); st.Restarts != 1 || st.LastCode != providers.Liveness {
		t.Errorf("stats %+v", st)
	}
}

func testCloseEndsAgent(t *testing.T, box providers.Box) {
	ctx := bg(t)
	ch := newChannel(t, box, 10*time.Second)
	if _, err := ch.Stat(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	path := ch.agentPath()
	before := signalAgents(t, box, path, "none")
	start := time.Now()
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if n := signalAgents(t, box, path, "none"); n != before-1 {
		t.Errorf("%d agents after Close, want %d", n, before-1)
	}
	if took > closeGrace {
		t.Errorf("Close took %v: the agent did not exit when its stdin closed", took)
	}
	t.Logf("Close took %v", took)
	_, err := ch.Stat(ctx, "/")
	if providers.CodeOf(err) != providers.Invalid {
		t.Errorf("stat after Close: %v, want invalid", err)
	}
}

// TestChannelRefusesForeignBox: a box the binary cannot run in is
// Unsupported, before anything is uploaded.
func TestChannelRefusesForeignBox(t *testing.T) {
	box := &factsBox{facts: providers.Facts{OS: "linux", Arch: "riscv64", LiveProcesses: providers.Bool(true), Stdin: providers.Bool(true)}}
	ch := newChannel(t, box, time.Second)
	_, err := ch.Stat(bg(t), "/")
	if providers.CodeOf(err) != providers.Unsupported {
		t.Fatalf("stat on a riscv64 box: %v, want unsupported", err)
	}
	box.facts = providers.Facts{OS: "linux", Arch: boxArch(t)}
	ch = newChannel(t, box, time.Second)
	_, err = ch.Stat(bg(t), "/")
	if providers.CodeOf(err) != providers.Unsupported {
		t.Fatalf("stat on a box without live processes: %v, want unsupported", err)
	}
	if box.execs != 0 {
		t.Errorf("%d execs on a box the agent cannot run in", box.execs)
	}
}

func boxArch(t *testing.T) string {
	b, err := readBinaryInfo(boxfsbin.Path(t))
	if err != nil {
		t.Fatal(err)
	}
	return b.arch
}

type factsBox struct {
	facts providers.Facts
	execs int
}

func (b *factsBox) ID() string                { return "facts" }
func (b *factsBox) Labels() map[string]string { return nil }
func (b *factsBox) Facts(context.Context) (providers.Facts, error) {
	return b.facts, nil
}
func (b *factsBox) Exec(context.Context, providers.ExecRequest) (providers.Process, error) {
	b.execs++
	return nil, providers.Errorf(providers.Unsupported, "factsBox.Exec", "no")
}
func (b *factsBox) Status(context.Context) (providers.Status, error) {
	return providers.Status{State: providers.StateRunning}, nil
}
func (b *factsBox) Destroy(context.Context) error { return nil }

// TestAgentProcess runs the real binary as "boxfs agent" over pipes: it
// serves, writes nothing but protocol to stdout, refuses a wrong checksum,
// and exits promptly when its stdin closes.
func TestAgentProcess(t *testing.T) {
	bin := boxfsbin.Path(t)
	info, err := readBinaryInfo(bin)
	if err != nil {
		t.Fatal(err)
	}
	// A wrong checksum: the agent refuses to serve.
	cmd := execCommand(t, bin, "agent", "-sha256", strings.Repeat("0", 64))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "checksum") {
		t.Fatalf("agent with a wrong checksum: %v, %s", err, out)
	}
	// The right one: serve, then exit on stdin EOF.
	cmd = execCommand(t, bin, "agent", "-sha256", info.sha256)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(bg(t), stdout, stdin, ClientOptions{Box: "process"})
	if err != nil {
		t.Fatalf("handshake: %v (stderr %s)", err, stderr.String())
	}
	dir := t.TempDir()
	if err := c.WriteFile(bg(t), filepath.Join(dir, "f"), strings.NewReader("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := readAll(bg(t), c, filepath.Join(dir, "f")); err != nil || s != "data" {
		t.Fatalf("read back: %q %v", s, err)
	}
	start := time.Now()
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent exit: %v (stderr %s)", err, stderr.String())
	}
	t.Logf("the agent exited %v after its stdin closed", time.Since(start))
	if time.Since(start) > closeGrace {
		t.Errorf("the agent took %v to exit", time.Since(start))
	}
	if stderr.Len() > 0 {
		t.Errorf("the agent wrote to stderr: %s", stderr.String())
	}
}

// TestAgentRecordsItsChecksum: a verified start records the checksum
// beside the binary, and a binary changed since is hashed again, so the
// record never hides a change.
func TestAgentRecordsItsChecksum(t *testing.T) {
	src, err := os.ReadFile(boxfsbin.Path(t))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "agent")
	require.NoError(t, os.WriteFile(bin, src, 0o755))
	info, err := readBinaryInfo(bin)
	require.NoError(t, err)
	serve := func() ([]byte, error) {
		cmd := execCommand(t, bin, "agent", "-sha256", info.sha256)
		cmd.Stdin = strings.NewReader("") // EOF: the agent ends at once
		return cmd.CombinedOutput()
	}
	out, err := serve()
	require.NoError(t, err, "%s", out)
	rec, err := os.ReadFile(bin + ".sum")
	require.NoError(t, err, "the verified start's record")
	assert.Contains(t, string(rec), info.sha256)
	out, err = serve()
	require.NoError(t, err, "a start trusting its record: %s", out)

	// Change one byte in place: the record names the file as it was.
	f, err := os.OpenFile(bin, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{src[100] ^ 0xff}, 100)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	out, err = serve()
	require.Error(t, err, "a changed binary served: %s", out)
	assert.Contains(t, string(out), "checksum")
}

func execCommand(t *testing.T, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(bg(t), name, args...)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// tmpBox is a box with another TmpDir in its facts.
type tmpBox struct {
	providers.Box
	tmp string
}

func (b tmpBox) Facts(ctx context.Context) (providers.Facts, error) {
	f, err := b.Box.Facts(ctx)
	f.TmpDir = b.tmp
	return f, err
}

// TestChannelFallsBackToDevShm: a TmpDir the agent cannot be put in (read
// only, noexec) is passed over for /dev/shm.
func TestChannelFallsBackToDevShm(t *testing.T) {
	if fi, err := os.Stat(fallbackDir); err != nil || !fi.IsDir() {
		t.Skipf("no %s here", fallbackDir)
	}
	box := tmpBox{Box: boxKinds[0].make(t), tmp: "/proc/no-such-dir"}
	ch := newChannel(t, box, 10*time.Second)
	if _, err := ch.Stat(bg(t), "/"); err != nil {
		t.Fatalf("stat with an unusable TmpDir: %v", err)
	}
	dest := ch.agentPath()
	if filepath.Dir(dest) != fallbackDir {
		t.Errorf("the agent runs from %s, want %s", dest, fallbackDir)
	}
	ch.Close()
	os.Remove(dest)
}

// hangBox is a box whose Exec never starts anything: it returns only when
// its ctx ends.
type hangBox struct{ factsBox }

func (b *hangBox) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	<-ctx.Done()
	return nil, providers.E(0, "hangBox.Exec", ctx.Err())
}

// TestChannelHungExec: a box whose exec hangs returns the caller's
// Timeout when its deadline passes.
func TestChannelHungExec(t *testing.T) {
	box := &hangBox{factsBox{facts: providers.Facts{OS: "linux", Arch: boxArch(t), TmpDir: "/tmp",
		LiveProcesses: providers.Bool(true), Stdin: providers.Bool(true)}}}
	ch := newChannel(t, box, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ch.Stat(ctx, "/")
	if providers.CodeOf(err) != providers.Timeout {
		t.Fatalf("stat on a box whose exec hangs: %v, want timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v with a 300ms deadline", took)
	}
	if st := ch.Stats(); st.LastCode != providers.Timeout || st.Up {
		t.Errorf("stats %+v", st)
	}
}
