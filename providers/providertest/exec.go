package providertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

func testExecArgvFidelity(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	args := []string{
		"plain", "", " ", "two words", "  lead and trail  ", "'single'", `"double"`, `back\slash`, `\n`,
		"new\nline", "\ttab", "cr\r", "$HOME", "${PATH}", "`id`", "$(id)", "*", "?", "[a]", "~", "#",
		";", "&&", "|", ">out", "<in", "-n", "--", "-e", "%s", "%%", "=", "a=b",
		"ünïcödé ✓ 😀", "\xff\xfe non-UTF-8 \x80\xc3", "\x01\x02\x1b[31m",
		strings.Repeat("long-", 2000),
	}
	out := mustRun(t, ctx, b, providers.ExecRequest{Argv: append([]string{"printf", PrintfNUL}, args...)})
	got := strings.Split(string(out), "\x00")
	if len(got) == 0 || got[len(got)-1] != "" {
		t.Fatalf("printf output %q does not end in NUL", clip(out))
	}
	got = got[:len(got)-1]
	if len(got) != len(args) {
		t.Fatalf("the command got %d arguments, want %d: %q", len(got), len(args), got)
	}
	for i := range args {
		if got[i] != args[i] {
			t.Errorf("argument %d: the command got %q, want %q", i, clip([]byte(got[i])), clip([]byte(args[i])))
		}
	}
}

func testExecInvalid(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	for _, c := range []struct {
		name string
		req  providers.ExecRequest
	}{
		{"empty argv", providers.ExecRequest{}},
		{"NUL in an argument", providers.ExecRequest{Argv: []string{"printf", PrintfNUL, "a\x00b"}}},
		{"env name not a variable", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"1BAD": "x"}}},
		{"NUL in an env value", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"OK": "a\x00b"}}},
	} {
		p, err := b.Exec(ctx, c.req)
		if p != nil {
			p.Kill(ctx)
			p.Wait()
		}
		wantCode(t, err, providers.Invalid, "Exec with "+c.name)
	}
}

func testExecMissingProgram(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	r := execute(ctx, b, providers.ExecRequest{Argv: []string{MissingProgram}})
	switch {
	case r.err != nil && providers.CodeOf(r.err) == providers.NotFound:
	case r.err == nil && r.code == 127:
	default:
		t.Errorf("Exec of a program that does not exist: %v; want NotFound or exit 127", r)
	}
}

func testExecExitCodes(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	const workers = 4
	codes := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range codes {
				r := execute(ctx, b, providers.ExecRequest{Argv: sh(ScriptExit, strconv.Itoa(n))})
				if r.err != nil || r.code != n {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("exit %d: %v", n, r))
					mu.Unlock()
				}
			}
		}()
	}
	for n := 0; n <= 255; n++ {
		codes <- n
	}
	close(codes)
	wg.Wait()
	slices.Sort(bad)
	for _, e := range bad {
		t.Error(e)
	}
}

func testExecSignalExit(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	for sig, want := range map[string]int{"TERM": 128 + 15, "KILL": 128 + 9} {
		r := execute(ctx, b, providers.ExecRequest{Argv: sh(ScriptSignal, sig)})
		if r.err != nil || r.code != want {
			t.Errorf("a command killed by SIG%s: %v; want exit %d", sig, r, want)
		}
	}
}

func testExecStdin(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	if s.h.NoStdin {
		p, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("x")})
		if p != nil {
			p.Kill(ctx)
			p.Wait()
		}
		wantCode(t, err, providers.Unsupported, "Exec with a Stdin on a provider declaring NoStdin")
		return
	}
	small := "first line\nsecond line without a newline, \x00 and \xff bytes"
	out := mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader(small)})
	if string(out) != small {
		t.Errorf("cat of stdin %q printed %q", small, out)
	}

	const n = 8 << 20
	in := make([]byte, n)
	rand.Read(in)
	sum := newSum()
	r := execute(ctx, b, providers.ExecRequest{Argv: []string{"cat"}, Stdin: bytes.NewReader(in), Stdout: sum})
	if r.err != nil || r.code != 0 {
		t.Fatalf("cat of %d bytes of stdin: %v", n, r)
	}
	if want := sha256.Sum256(in); sum.n != n || !bytes.Equal(sum.h.Sum(nil), want[:]) {
		t.Errorf("cat of %d random bytes of stdin printed %d bytes, sha256 %x; want sha256 %x", n, sum.n, sum.h.Sum(nil), want)
	}

	// A stdin that arrives slowly: the command must see each piece, then EOF.
	pr, pw := io.Pipe()
	go func() {
		for i := range 3 {
			fmt.Fprintf(pw, "piece %d\n", i)
			time.Sleep(50 * time.Millisecond)
		}
		pw.Close()
	}()
	out = mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"cat"}, Stdin: pr})
	if want := "piece 0\npiece 1\npiece 2\n"; string(out) != want {
		t.Errorf("cat of a slow stdin printed %q, want %q", out, want)
	}
}

func testExecStdinNil(t *testing.T, s *suite) {
	b := s.box(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), endBound)
	defer cancel()
	r := execute(ctx, b, providers.ExecRequest{Argv: []string{"cat"}})
	if r.err != nil || r.code != 0 || len(r.stdout) != 0 {
		t.Errorf("cat with a nil Stdin: %v; want it to read EOF at once and exit 0 with no output", r)
	}
}

// sum counts and hashes what is written to it.
type sum struct {
	h hash.Hash
	n int64
}

func newSum() *sum { return &sum{h: sha256.New()} }

func (s *sum) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	return s.h.Write(p)
}

func testExecLargeOutput(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	n := s.h.LargeOutput
	out, errs := newSum(), newSum()
	start := time.Now()
	r := execute(ctx, b, providers.ExecRequest{Argv: sh(ScriptLarge, strconv.FormatInt(n, 10)), Stdout: out, Stderr: errs})
	took := time.Since(start)
	if r.err != nil || r.code != 0 {
		t.Fatalf("writing %d bytes to stdout and stderr at once: %v", n, r)
	}
	if out.n != n || errs.n != n {
		t.Fatalf("got %d bytes on stdout and %d on stderr, want %d on each", out.n, errs.n, n)
	}
	if !bytes.Equal(out.h.Sum(nil), errs.h.Sum(nil)) {
		t.Errorf("stdout and stderr differ (sha256 %x and %x); the command wrote the same bytes to both", out.h.Sum(nil), errs.h.Sum(nil))
	}
	t.Logf("%d MiB on each of stdout and stderr in %v (%.0f MiB/s together)", n>>20, took.Round(time.Millisecond), float64(2*n)/(1<<20)/took.Seconds())
}

func testExecEnv(t *testing.T, s *suite) {
	secretName, secretValue := hostSecret(t)
	specEnv := !slices.Contains(s.h.Unsupported, "env")
	b := s.box(t, func(sp *providers.Spec) {
		if !specEnv {
			return
		}
		if sp.Env == nil {
			sp.Env = map[string]string{}
		}
		sp.Env["BOXFS_SPEC_VAR"] = "from the spec"
		sp.Env["BOXFS_OVERRIDE"] = "spec"
	})
	ctx := testCtx(t)
	reqEnv := map[string]string{
		"BOXFS_REQ_VAR":  `with spaces, 'single' and "double" quotes, $dollar and \backslash`,
		"BOXFS_OVERRIDE": "request",
		"BOXFS_EMPTY":    "",
	}
	out := mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"env"}, Env: reqEnv})
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if strings.Contains(string(out), secretName) || strings.Contains(string(out), secretValue) {
		t.Errorf("the host's variable %s reached the box:\n%s", secretName, out)
	}
	want := map[string]string{
		"BOXFS_REQ_VAR":  reqEnv["BOXFS_REQ_VAR"],
		"BOXFS_OVERRIDE": "request",
		"BOXFS_EMPTY":    "",
	}
	if specEnv {
		want["BOXFS_SPEC_VAR"] = "from the spec"
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("env %s = %q (set: %v), want %q", k, got, ok, v)
		}
	}
	if env["PATH"] == "" {
		t.Errorf("the command has no PATH:\n%s", out)
	}
	// A spec variable stays for the next command; a request variable does not.
	out = mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"env"}})
	if strings.Contains(string(out), "BOXFS_REQ_VAR=") {
		t.Errorf("a request's env leaked into the next command:\n%s", out)
	}
	if specEnv && !strings.Contains(string(out), "BOXFS_OVERRIDE=spec\n") {
		t.Errorf("the spec's env is missing from a command without a request env:\n%s", out)
	}
}

func testExecDir(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	f, err := b.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts: %v", err)
	}
	out := mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"pwd"}})
	if got := strings.TrimSuffix(string(out), "\n"); got != f.Workspace {
		t.Errorf("a command with no Dir ran in %q, want the workspace %q", got, f.Workspace)
	}
	if f.TmpDir != "" {
		out := mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"pwd"}, Dir: f.TmpDir})
		if got := strings.TrimSuffix(string(out), "\n"); got != f.TmpDir {
			t.Errorf("a command with Dir %q ran in %q", f.TmpDir, got)
		}
	}
	missing := strings.TrimSuffix(f.Workspace, "/") + "/boxfs-conformance-no-such-dir"
	r := execute(ctx, b, providers.ExecRequest{Argv: []string{"pwd"}, Dir: missing})
	if r.err == nil && r.code == 0 {
		t.Errorf("a command with a Dir that does not exist ran: %v", r)
	}
}

// groupEnds starts ScriptGroup, ends it with end, and checks that Wait
// returns what want accepts and that no process of the group survives.
func groupEnds(t *testing.T, s *suite, ctx context.Context, end func(providers.Process), want func(code int, err error) bool, what string) {
	if s.h.OutputAtEnd {
		ticksEnd(t, s, ctx, end, want, what)
		return
	}
	b := s.box(t, nil)
	p, pids := startGroup(t, ctx, b)
	if got := alive(t, b, pids); len(got) != len(pids) {
		t.Fatalf("before %s: of the group's pids %v only %v are alive", what, pids, got)
	}
	end(p)
	code, err := waitWithin(t, p, endBound, what)
	if !want(code, err) {
		t.Errorf("after %s: Wait = %d, %v (code %v)", what, code, err, providers.CodeOf(err))
	}
	// Wait returned, so the group must be gone already: no polling here.
	if got := alive(t, b, pids); len(got) > 0 {
		t.Errorf("after %s and Wait: processes %v of the group %v are still alive", what, got, pids)
	}
}

// ticksEnd is groupEnds for a provider whose output arrives at the end:
// it starts ScriptTicks, ends it with end, checks Wait, and then that the
// group's background work has stopped.
func ticksEnd(t *testing.T, s *suite, ctx context.Context, end func(providers.Process), want func(code int, err error) bool, what string) {
	b := s.box(t, nil)
	const ticks = "boxfs-conformance-ticks"
	p, err := b.Exec(ctx, providers.ExecRequest{Argv: sh(ScriptTicks, ticks)})
	if err != nil {
		t.Fatalf("Exec(ScriptTicks): %v", err)
	}
	end(p)
	code, err := waitWithin(t, p, endBound, what)
	if !want(code, err) {
		t.Errorf("after %s: Wait = %d, %v (code %v)", what, code, err, providers.CodeOf(err))
	}
	cctx, cancel := context.WithTimeout(context.Background(), endBound)
	defer cancel()
	if r := execute(cctx, b, providers.ExecRequest{Argv: sh(ScriptStill, ticks)}); r.err != nil || r.code != 0 {
		t.Errorf("after %s and Wait: the group's background work goes on: %v", what, r)
	}
}

func testExecCancel(t *testing.T, s *suite) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	groupEnds(t, s, ctx, func(providers.Process) { cancel() }, func(code int, err error) bool {
		return providers.IsCode(err, providers.Aborted)
	}, "cancelling the command's ctx")
}

func testExecTimeout(t *testing.T, s *suite) {
	ctx, cancel := context.WithTimeout(testCtx(t), 3*time.Second)
	defer cancel()
	groupEnds(t, s, ctx, func(providers.Process) {}, func(code int, err error) bool {
		return providers.IsCode(err, providers.Timeout)
	}, "the command's ctx deadline")
}

func testExecKill(t *testing.T, s *suite) {
	ctx := testCtx(t)
	var p providers.Process
	groupEnds(t, s, ctx, func(proc providers.Process) {
		p = proc
		if err := proc.Kill(ctx); err != nil {
			t.Errorf("Kill: %v", err)
		}
	}, func(code int, err error) bool {
		return err == nil && code == 128+9 || providers.IsCode(err, providers.Aborted)
	}, "Kill")
	if p != nil {
		if err := p.Kill(ctx); err != nil {
			t.Errorf("Kill of an ended command: %v, want nil", err)
		}
	}
}

func testExecConcurrent(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	if s.h.Serial {
		serialExecs(t, ctx, b)
		return
	}
	const n, secs = 6, 2
	start := time.Now()
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = execute(ctx, b, providers.ExecRequest{Argv: sh(ScriptSleepPrint, strconv.Itoa(secs), fmt.Sprintf("command %d", i))})
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for i, r := range results {
		if want := fmt.Sprintf("command %d", i); r.err != nil || r.code != 0 || string(r.stdout) != want {
			t.Errorf("concurrent command %d: %v; want exit 0 and %q", i, r, want)
		}
	}
	// Run one after another they would take n*secs; allow a lot of overhead.
	if limit := time.Duration(n*secs) * time.Second * 3 / 4; took >= limit {
		t.Errorf("%d concurrent commands of %ds took %v: they did not run at the same time", n, secs, took)
	}
	t.Logf("%d concurrent commands of %ds took %v", n, secs, took.Round(time.Millisecond))
}

// serialExecs starts commands at once on a box that runs one at a time,
// and checks that none overlapped another and each got its own output.
func serialExecs(t *testing.T, ctx context.Context, b providers.Box) {
	const n = 6
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = execute(ctx, b, providers.ExecRequest{Argv: sh(ScriptAlone, fmt.Sprintf("command %d", i))})
		}()
	}
	wg.Wait()
	for i, r := range results {
		if want := fmt.Sprintf("command %d", i); r.err != nil || r.code != 0 || string(r.stdout) != want {
			t.Errorf("command %d of a box that runs one at a time: %v; want exit 0 and %q (exit 99: two ran at once)", i, r, want)
		}
	}
}
