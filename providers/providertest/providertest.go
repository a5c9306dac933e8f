package providertest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The scripts the suite runs with sh -c (see the package documentation).
const (
	// PrintfNUL is the printf format the suite uses: each argument, then NUL.
	PrintfNUL = `%s\0`
	// ScriptExit exits with status $1.
	ScriptExit = `exit "$1"`
	// ScriptSignal kills the shell itself with signal $1.
	ScriptSignal = `kill -s "$1" $$`
	// ScriptGroup puts two sleeps in the background, prints their pids and
	// its own, one per line, and waits for them: a process group of three.
	ScriptGroup = `sleep 300 & echo $!; sleep 300 & echo $!; echo $$; wait`
	// ScriptAlive prints those of its arguments that are pids of live
	// processes (a zombie is not live).
	ScriptAlive = `for p in "$@"; do s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; s=${s##*)}; s=${s# }; s=${s%% *}; [ "$s" = Z ] || [ "$s" = X ] || echo "$p"; done`
	// ScriptLarge writes the same $1 random bytes to stdout and stderr.
	ScriptLarge = `head -c "$1" /dev/urandom | tee /dev/stderr`
	// ScriptSleepPrint sleeps $1 seconds, then prints $2.
	ScriptSleepPrint = `sleep "$1"; printf %s "$2"`
	// ScriptTicks appends a line to the file $1 every 50 ms from a
	// background process, and waits for ever: a group whose work shows.
	ScriptTicks = `(while :; do echo t >> "$1"; sleep 0.05; done) & sleep 300; wait`
	// ScriptStill exits 0 when the file $1 does not grow over a second.
	ScriptStill = `a=$(wc -c < "$1" 2>/dev/null || echo 0); sleep 1; b=$(wc -c < "$1" 2>/dev/null || echo 0); [ "$a" = "$b" ]`
	// ScriptAlone fails (exit 99) when another command runs ScriptAlone in
	// the same directory at the same time; else it prints $1.
	ScriptAlone = `mkdir boxfs-conformance-alone 2>/dev/null || exit 99; sleep 0.2; rmdir boxfs-conformance-alone; printf %s "$1"`
	// MissingProgram is a program no box has.
	MissingProgram = "boxfs-conformance-no-such-program"
)

// Labels the suite puts on every box it makes.
const (
	LabelRun  = "boxfs-conformance"      // one value per Run
	LabelTest = "boxfs-conformance-test" // the subtest's name
)

// Harness describes the provider under test.
type Harness struct {
	// Provider makes the boxes.
	Provider providers.Provider
	// Spec is the base of every box the suite makes; the suite adds its
	// labels and, where a subtest needs them, env and lifetime.
	Spec providers.Spec
	// Unsupported lists the spec fields (providers.SpecFields names) the
	// provider refuses. Each is tried with a valid sample value and must be
	// refused with Unsupported. "labels" and "lifetime" may not be listed.
	Unsupported []string
	// Refused are further specs the provider must refuse with Unsupported,
	// by name (the subtest's name): values of fields it supports only in
	// part, e.g. "isolation=container" for a provider that takes only
	// isolation "none". Each is laid over Spec: the fields it sets replace
	// Spec's, its labels are added.
	Refused map[string]providers.Spec
	// NoStdin declares that Exec cannot feed a command's stdin: an Exec with
	// a non-nil Stdin must then be Unsupported, and Facts.Stdin not true.
	NoStdin bool
	// StagedStdin declares that Exec takes a Stdin whole before the command
	// starts rather than streaming it while the command runs (a provider
	// that uploads stdin as a file): the stdin subtests run as for any
	// provider, and Facts.Stdin must not be true, since nothing that needs
	// a live stdin (an agent channel) can use it.
	StagedStdin bool
	// OutputAtEnd declares that a command's output arrives only when it
	// ends (a box without live processes, one call per command): the
	// subtests that end a running command then check that its process
	// group's work stops, instead of reading its pids while it runs, and
	// Reconnect finds the box again while a command runs without looking
	// at the command's processes.
	OutputAtEnd bool
	// Serial declares that a box runs one command at a time, in the order
	// they were started: ExecConcurrent then checks that they never
	// overlap, instead of that they do.
	Serial bool
	// Lifetime is the shortest lifetime the provider takes; the Lifetime
	// subtest makes a box with it. Default 3s.
	Lifetime time.Duration
	// LifetimeSlack is how long after Lifetime the provider may take to end
	// the box. Default 30s.
	LifetimeSlack time.Duration
	// LargeOutput is the byte count ExecLargeOutput writes to each stream.
	// Default 64 MiB.
	LargeOutput int64
	// Reopen opens a second provider of the same kind and configuration,
	// with nothing in memory of the first, as a new process of boxfs would
	// (the Reconnect subtest finds a box again with it). Nil: Provider.
	Reopen func(t *testing.T) providers.Provider
	// RemoveSnapshot removes a snapshot the Snapshot subtest made, when the
	// provider keeps snapshots somewhere a test run must clean up.
	RemoveSnapshot func(id string) error
}

// Bounds the suite waits for; generous, since machines are shared and noisy.
const (
	createTimeout = 2 * time.Minute
	testTimeout   = 5 * time.Minute
	endBound      = 30 * time.Second // for a killed or cancelled command to end
)

type suite struct {
	h   Harness
	run string
}

// Run runs the conformance suite against h.Provider, one subtest per
// behaviour.
func Run(t *testing.T, h Harness) {
	if h.Provider == nil {
		t.Fatal("providertest: Harness.Provider is nil")
	}
	for _, f := range h.Unsupported {
		if !slices.Contains(providers.SpecFields, f) {
			t.Fatalf("providertest: Harness.Unsupported names %q, which is not a spec field (%v)", f, providers.SpecFields)
		}
		if f == "labels" || f == "lifetime" {
			t.Fatalf("providertest: every provider must support spec field %q; the suite relies on it", f)
		}
	}
	if h.Lifetime == 0 {
		h.Lifetime = 3 * time.Second
	}
	if h.LifetimeSlack == 0 {
		h.LifetimeSlack = 30 * time.Second
	}
	if h.LargeOutput == 0 {
		h.LargeOutput = 64 << 20
	}
	s := &suite{h: h, run: providers.NewID(6)}
	t.Logf("providertest: provider %q, run label %s=%s", h.Provider.Name(), LabelRun, s.run)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *suite)
	}{
		{"CreateAttachList", testCreateAttachList},
		{"ReservedLabel", testReservedLabel},
		{"UnsupportedSpec", testUnsupportedSpec},
		{"Facts", testFacts},
		{"Status", testStatus},
		{"ExecArgvFidelity", testExecArgvFidelity},
		{"ExecInvalid", testExecInvalid},
		{"ExecMissingProgram", testExecMissingProgram},
		{"ExecExitCodes", testExecExitCodes},
		{"ExecSignalExit", testExecSignalExit},
		{"ExecStdin", testExecStdin},
		{"ExecStdinNil", testExecStdinNil},
		{"ExecLargeOutput", testExecLargeOutput},
		{"ExecEnv", testExecEnv},
		{"ExecDir", testExecDir},
		{"ExecCancel", testExecCancel},
		{"ExecTimeout", testExecTimeout},
		{"ExecKill", testExecKill},
		{"ExecConcurrent", testExecConcurrent},
		{"Destroy", testDestroy},
		{"AttachDestroyed", testAttachDestroyed},
		{"Lifetime", testLifetime},
		{"Files", testFiles},
		{"Suspend", testSuspend},
		{"SuspendErrors", testSuspendErrors},
		{"SuspendLifetime", testSuspendLifetime},
		{"Snapshot", testSnapshot},
		{"Reconnect", testReconnect},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

// labels are the suite's labels for a box of test t.
func (s *suite) labels(t *testing.T) map[string]string {
	return map[string]string{LabelRun: s.run, LabelTest: t.Name()}
}

// spec returns a copy of the harness's base spec with the suite's labels.
func (s *suite) spec(t *testing.T) providers.Spec {
	sp := s.h.Spec
	sp.Labels = maps.Clone(s.h.Spec.Labels)
	if sp.Labels == nil {
		sp.Labels = map[string]string{}
	}
	maps.Copy(sp.Labels, s.labels(t))
	sp.Env = maps.Clone(s.h.Spec.Env)
	sp.Ports = slices.Clone(s.h.Spec.Ports)
	sp.Mounts = slices.Clone(s.h.Spec.Mounts)
	return sp
}

// ctx returns a context for one subtest's calls.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// box makes a fresh box for t, destroyed when t ends.
func (s *suite) box(t *testing.T, mutate func(*providers.Spec)) providers.Box {
	t.Helper()
	sp := s.spec(t)
	if mutate != nil {
		mutate(&sp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	b, err := s.h.Provider.Create(ctx, sp)
	if err != nil {
		t.Fatalf("Create(%v): %v", sp, err)
	}
	if b == nil {
		t.Fatalf("Create(%v) returned a nil box and no error", sp)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
		defer cancel()
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("cleanup: Destroy(%s): %v", b.ID(), err)
		}
	})
	return b
}

// result is what one command did.
type result struct {
	stdout, stderr []byte
	code           int
	err            error // from Exec, or from Wait
	execErr        bool  // err came from Exec
}

func (r result) String() string {
	s := fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, clip(r.stdout), clip(r.stderr))
	if r.err != nil {
		where := "Wait"
		if r.execErr {
			where = "Exec"
		}
		s = fmt.Sprintf("%s error (code %v): %v; %s", where, providers.CodeOf(r.err), r.err, s)
	}
	return s
}

func clip(b []byte) []byte {
	if len(b) > 300 {
		return append(slices.Clone(b[:300]), "..."...)
	}
	return b
}

// execute runs req to its end. Output goes to buffers unless req names
// writers.
func execute(ctx context.Context, b providers.Box, req providers.ExecRequest) result {
	var out, errb bytes.Buffer
	if req.Stdout == nil {
		req.Stdout = &out
	}
	if req.Stderr == nil {
		req.Stderr = &errb
	}
	p, err := b.Exec(ctx, req)
	if err != nil {
		return result{code: -1, err: err, execErr: true}
	}
	code, err := p.Wait()
	return result{stdout: out.Bytes(), stderr: errb.Bytes(), code: code, err: err}
}

// mustRun runs argv and fails t unless it exits 0; it returns stdout.
func mustRun(t *testing.T, ctx context.Context, b providers.Box, req providers.ExecRequest) []byte {
	t.Helper()
	r := execute(ctx, b, req)
	if r.err != nil || r.code != 0 {
		t.Fatalf("Exec(%q): %v", req.Argv, r)
	}
	return r.stdout
}

func sh(script string, args ...string) []string {
	return append([]string{"sh", "-c", script, "sh"}, args...)
}

// wantCode fails t unless err carries code.
func wantCode(t *testing.T, err error, code providers.Code, what string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want %v", what, code)
		return
	}
	if got := providers.CodeOf(err); got != code {
		t.Errorf("%s: got error %v (code %v), want code %v", what, err, got, code)
	}
}

// lineWriter collects output and lets a test wait for whole lines.
type lineWriter struct {
	mu     sync.Mutex
	buf    []byte
	notify chan struct{}
}

func newLineWriter() *lineWriter { return &lineWriter{notify: make(chan struct{}, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// lines waits until n complete lines have arrived and returns them.
func (w *lineWriter) lines(n int, within time.Duration) ([]string, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		w.mu.Lock()
		s := string(w.buf)
		w.mu.Unlock()
		if ls := strings.Split(s, "\n"); len(ls) > n {
			return ls[:n], nil
		}
		select {
		case <-w.notify:
		case <-timer.C:
			return nil, fmt.Errorf("got %q after %v, want %d lines", s, within, n)
		}
	}
}

// startGroup starts ScriptGroup under ctx and returns it with the pids it
// printed (two background sleeps and the shell).
func startGroup(t *testing.T, ctx context.Context, b providers.Box) (providers.Process, []string) {
	t.Helper()
	out := newLineWriter()
	p, err := b.Exec(ctx, providers.ExecRequest{Argv: sh(ScriptGroup), Stdout: out})
	if err != nil {
		t.Fatalf("Exec(ScriptGroup): %v", err)
	}
	pids, err := out.lines(3, endBound)
	if err != nil {
		p.Kill(context.Background())
		t.Fatalf("ScriptGroup did not print its pids while running (stdout must stream): %v", err)
	}
	for _, pid := range pids {
		if pid == "" || strings.Trim(pid, "0123456789") != "" {
			t.Fatalf("ScriptGroup printed %q, want pids", pids)
		}
	}
	return p, pids
}

// alive returns those of pids that are alive in the box.
func alive(t *testing.T, b providers.Box, pids []string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), endBound)
	defer cancel()
	out := mustRun(t, ctx, b, providers.ExecRequest{Argv: sh(ScriptAlive, pids...)})
	return strings.Fields(string(out))
}

// waitWithin waits for p to end, failing t after d.
func waitWithin(t *testing.T, p providers.Process, d time.Duration, what string) (int, error) {
	t.Helper()
	type res struct {
		code int
		err  error
	}
	c := make(chan res, 1)
	go func() {
		code, err := p.Wait()
		c <- res{code, err}
	}()
	select {
	case r := <-c:
		return r.code, r.err
	case <-time.After(d):
		t.Fatalf("%s: Wait did not return within %v", what, d)
		return 0, nil
	}
}

// hostSecret sets a variable in the test process's environment that no
// box may ever see, and returns its name and value.
func hostSecret(t *testing.T) (string, string) {
	name := "BOXFS_HOST_SECRET_" + strings.ToUpper(providers.NewID(4))
	value := "host-secret-" + providers.NewID(8)
	t.Setenv(name, value)
	if os.Getenv(name) != value {
		t.Fatal("Setenv did not take")
	}
	return name, value
}
