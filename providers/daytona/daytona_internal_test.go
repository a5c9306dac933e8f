package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
)

// fake starts a fake and a provider on it, its log lines kept in logs.
func fake(t *testing.T, opts daytonatest.Options) (*daytonatest.Server, *Provider, *bytes.Buffer) {
	t.Helper()
	srv := daytonatest.New(opts)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { checkSpec(t, srv) })
	var logs bytes.Buffer
	p, err := New(providers.Config{
		Options: map[string]string{"api_url": srv.APIURL(), "api_key": srv.APIKey()},
		Logger:  slog.New(slog.NewTextHandler(&lockedWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv, p, &logs
}

// checkSpec fails the test for every call the provider made, and every
// answer of the fake, that the vendor's spec does not have.
func checkSpec(t *testing.T, srv *daytonatest.Server) {
	t.Helper()
	for _, err := range srv.SpecErrors() {
		t.Errorf("spec: %v", err)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newBox(t *testing.T, p *Provider, spec providers.Spec) *Box {
	t.Helper()
	if spec.Workspace == "" {
		spec.Workspace = t.TempDir()
	}
	b, err := p.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { b.Destroy(context.Background()) })
	return b.(*Box)
}

// hostileArgs are arguments the daemon's naive split (spaces, quotes, no
// escapes, runes) and a shell would both mangle if they were written into a
// command line.
var hostileArgs = []string{
	"", " ", "two words", "'single'", `"double"`, `it's "both"`, "new\nline", "trail\n", "\ttab", "cr\r",
	"$HOME", "${PATH}", "$(touch pwned)", "`touch pwned`", "back\\slash", `\0101`, "%s%b%n", "-n", "--", "*", "?",
	"a=b", ";", "&&", "|", ">out", "ünïcödé ✓", "\xff\xfe\x80 not UTF-8", "\x01\x01\x01 marker \x02\x02\x02", "x", "\\",
	strings.Repeat("long ", 3000),
}

// TestCommandLineSurvivesNaiveSplit checks the command line Daytona gets:
// the daemon's split leaves the script and every argument as one word of
// printable ASCII, whatever the argument holds.
func TestCommandLineSurvivesNaiveSplit(t *testing.T) {
	line := commandLine(decodeArgs+`printf '%s\0' "$@"`, hostileArgs...)
	for i := 0; i < len(line); i++ {
		if c := line[i]; c < 0x20 || c >= 0x7f {
			t.Fatalf("the command line holds byte %#x at %d", c, i)
		}
	}
	words := daytonatest.ParseCommand(line)
	if want := 4 + len(hostileArgs); len(words) != want {
		t.Fatalf("the naive split made %d words, want %d: %q", len(words), want, words)
	}
	if words[0] != "sh" || words[1] != "-c" || words[2] != decoder {
		t.Errorf("the split starts %q, want sh -c and the decoder", words[:3])
	}
}

// TestHostileArgv runs hostile arguments through both of Daytona's command
// paths on the fake, which really splits and really runs them: the naive
// split of process/execute, and a session's shell.
func TestHostileArgv(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	ctx := ctxFor(t, 2*time.Minute)
	srv.ResetRequests()
	want := strings.Join(hostileArgs, "\x00") + "\x00"

	code, out, err := b.run(ctx, "test", `printf '%s\0' "$@" | base64`, hostileArgs, runOpts{encoded: true, dir: b.workspace})
	if err != nil || code != 0 {
		t.Fatalf("run: exit %d, %v", code, err)
	}
	if string(out) != want {
		t.Errorf("process/execute: the command got\n%q\nwant\n%q", out, want)
	}

	var stdout bytes.Buffer
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: append([]string{"printf", `%s\0`}, hostileArgs...), Stdout: &stdout, Env: map[string]string{"V": hostileArgs[5]}})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := pr.Wait(); err != nil || code != 0 {
		t.Fatalf("Exec: exit %d, %v", code, err)
	}
	if stdout.String() != want {
		t.Errorf("session: the command got\n%q\nwant\n%q", stdout.String(), want)
	}
	if _, err := os.Stat(filepath.Join(b.workspace, "pwned")); err == nil {
		t.Errorf("an argument ran as a command: %s/pwned exists", b.workspace)
	}
	for _, r := range srv.Requests() {
		var body struct {
			Command string `json:"command"`
		}
		if json.Unmarshal(r.Body, &body) != nil || body.Command == "" {
			continue
		}
		for i := 0; i < len(body.Command); i++ {
			if c := body.Command[i]; c < 0x20 || c >= 0x7f {
				t.Errorf("%s %s: the command line holds byte %#x: an argument was not escaped", r.Method, r.Path, c)
				break
			}
		}
	}
}

// TestOutputWithMarkers: output holding the session log's own stream
// markers, and every byte value, arrives byte for byte on the right stream.
func TestOutputWithMarkers(t *testing.T) {
	_, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	ctx := ctxFor(t, 2*time.Minute)
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	payload := append(bytes.Repeat([]byte("\x01\x01\x01\x02\x02\x02"), 1000), all...)
	var stdout, stderr bytes.Buffer
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", `cat; cat "$1" >&2`, "sh", "/proc/self/fd/0"}, Stdin: bytes.NewReader(payload), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := pr.Wait(); err != nil || code != 0 {
		t.Fatalf("exit %d, %v; stderr %q", code, err, stderr.Bytes())
	}
	if !bytes.Equal(stdout.Bytes(), payload) {
		t.Errorf("stdout: got %d bytes, want the %d written", stdout.Len(), len(payload))
	}
	if !bytes.Equal(stderr.Bytes(), payload) {
		t.Errorf("stderr: got %d bytes, want the %d written", stderr.Len(), len(payload))
	}
}

// TestCreateFails: a sandbox that stays creating past the bound, or that
// fails (before the create answers, or after), is deleted once Daytona
// takes the delete, and the create fails naming its state.
func TestCreateFails(t *testing.T) {
	for _, c := range []struct {
		name string
		opts daytonatest.Options
		code providers.Code
		says string
	}{
		{"creating", daytonatest.Options{CreatingFor: 3 * time.Second}, providers.Timeout, "still creating"},
		{"error", daytonatest.Options{FailState: "error", ErrorReason: "no capacity"}, providers.Refused, "state error: no capacity"},
		{"build_failed", daytonatest.Options{CreatingPolls: 2, FailState: "build_failed"}, providers.Refused, "state build_failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, p, _ := fake(t, c.opts)
			p.createBound = time.Second
			start := time.Now()
			b, err := p.Create(ctxFor(t, time.Minute), providers.Spec{Workspace: t.TempDir()})
			if err == nil {
				b.Destroy(context.Background())
				t.Fatal("Create succeeded")
			}
			assert.Equal(t, c.code, providers.CodeOf(err), "Create: %v", err)
			assert.ErrorContains(t, err, c.says)
			assert.Empty(t, srv.SandboxIDs(), "the failed create left sandboxes")
			t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// TestCreateCancelled: a create whose ctx ends while the sandbox is still
// creating (when Daytona refuses its delete) leaves no sandbox.
func TestCreateCancelled(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{CreatingFor: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	assert.True(t, providers.IsCode(err, providers.Timeout), "Create: %v, want Timeout", err)
	assert.Empty(t, srv.SandboxIDs(), "the cancelled create left sandboxes")
	assert.Positive(t, refusedDeletes(srv), "no delete was refused: the test did not see a sandbox still creating")
}

// TestListPagesAndDelay: listings come in pages of two, through cursors;
// a new sandbox is missing from listings for a while, and Create returns
// only once a listing shows it.
func TestListPagesAndDelay(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{ListDelay: 700 * time.Millisecond})
	run := providers.NewID(4)
	byLabel := map[string]string{}
	var want []string
	for i := range 5 {
		start := time.Now()
		label := string(rune('a' + i))
		b := newBox(t, p, providers.Spec{Labels: map[string]string{"run": run, "i": label}})
		assert.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond, "Create returned before a listing could show the box")
		want = append(want, b.ID())
		byLabel[label] = b.ID()
	}
	// A raw listing right after a create misses the new sandbox.
	extra := newBoxRaw(t, srv)
	require.NotContains(t, listRaw(t, srv), extra, "the fake listed a sandbox at once; the delay is not on")
	srv.ResetRequests()
	boxes, err := p.List(ctxFor(t, time.Minute), map[string]string{"run": run})
	require.NoError(t, err)
	var got []string
	for _, b := range boxes {
		got = append(got, b.ID())
	}
	assert.ElementsMatch(t, want, got, "List")
	pages := 0
	for _, r := range srv.Requests() {
		if r.Method == http.MethodGet && r.Path == "/api/sandbox" {
			pages++
			q, _ := url.ParseQuery(r.Query)
			assert.Equal(t, `{"boxfs":"1"}`, q.Get("labels"), "the listing asks for boxfs's marker alone")
		}
	}
	assert.GreaterOrEqual(t, pages, 3, "pages read")
	one, err := p.List(ctxFor(t, time.Minute), map[string]string{"run": run, "i": "c"})
	require.NoError(t, err)
	require.Len(t, one, 1, "List by two labels")
	assert.Equal(t, byLabel["c"], one[0].ID())
}

// newBoxRaw makes a sandbox straight through the fake's API.
func newBoxRaw(t *testing.T, srv *daytonatest.Server) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": "raw-" + providers.NewID(4), "labels": map[string]string{"boxfs": "1", "raw": "1"}, "autoDeleteInterval": -1})
	req, _ := http.NewRequest(http.MethodPost, srv.APIURL()+"/sandbox", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ID string `json:"id"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	return out.ID
}

func listRaw(t *testing.T, srv *daytonatest.Server) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.APIURL()+"/sandbox?limit=1000", nil)
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pg, err := parseListPage(b)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, it := range pg.items {
		ids = append(ids, it.ID)
	}
	return ids
}

// TestRetryAfter: a 429 is retried no sooner than its Retry-After says.
func TestRetryAfter(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	var once atomic.Bool
	srv.SetFault(func(r *http.Request, n int) daytonatest.Fault {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/sandbox/") && once.CompareAndSwap(false, true) {
			return daytonatest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "2"}
		}
		return daytonatest.Fault{}
	})
	srv.ResetRequests()
	st, err := b.Status(ctxFor(t, time.Minute))
	if err != nil || st.State != providers.StateRunning {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	var times []time.Time
	var codes []int
	for _, r := range srv.Requests() {
		times = append(times, r.Time)
		codes = append(codes, r.Status)
	}
	if len(times) != 2 || codes[0] != http.StatusTooManyRequests || codes[1] != http.StatusOK {
		t.Fatalf("requests answered %v, want a 429 then a 200", codes)
	}
	if gap := times[1].Sub(times[0]); gap < 2*time.Second {
		t.Errorf("the retry came %v after the 429, before its Retry-After of 2s", gap)
	}
}

// TestNotIdempotentNotRetried: a session command whose create got a 502 is
// not sent twice when the session shows it ran; one that did not run is
// sent again.
func TestNotIdempotentNotRetried(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	for _, after := range []bool{false, true} {
		var once atomic.Bool
		srv.SetFault(func(r *http.Request, n int) daytonatest.Fault {
			if strings.HasSuffix(r.URL.Path, "/exec") && once.CompareAndSwap(false, true) {
				return daytonatest.Fault{Status: http.StatusBadGateway, After: after}
			}
			return daytonatest.Fault{}
		})
		srv.ResetRequests()
		var out bytes.Buffer
		pr, err := b.Exec(ctxFor(t, time.Minute), providers.ExecRequest{Argv: []string{"sh", "-c", `echo ran >>"$1"; cat "$1"`, "sh", t.TempDir() + "/count"}, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := pr.Wait(); code != 0 || err != nil {
			t.Fatalf("exit %d, %v", code, err)
		}
		if out.String() != "ran\n" {
			t.Errorf("502 after=%v: the command ran %d times", after, strings.Count(out.String(), "ran"))
		}
	}
}

// TestCreateAdopts: a create whose answer is lost after Daytona made the
// sandbox is sent again; the 409 on the name is this create's own sandbox,
// which is adopted, and no second sandbox is made.
func TestCreateAdopts(t *testing.T) {
	srv, p, logs := fake(t, daytonatest.Options{})
	var once atomic.Bool
	srv.SetFault(func(r *http.Request, n int) daytonatest.Fault {
		if r.Method == http.MethodPost && r.URL.Path == "/api/sandbox" && once.CompareAndSwap(false, true) {
			return daytonatest.Fault{Status: http.StatusServiceUnavailable, After: true}
		}
		return daytonatest.Fault{}
	})
	b := newBox(t, p, providers.Spec{})
	if ids := srv.SandboxIDs(); len(ids) != 1 || ids[0] != b.ID() {
		t.Errorf("sandboxes %v, want only the adopted %s", ids, b.ID())
	}
	if !strings.Contains(logs.String(), "adopted") {
		t.Errorf("no adoption logged:\n%s", logs)
	}
	// A name taken by a sandbox another create made is not adopted.
	_, err := p.create(ctxFor(t, time.Minute), "daytona.Create", createRequest{Name: b.name, Labels: map[string]string{labelMarker: "1", labelCreate: "someone-else"}})
	if !providers.IsCode(err, providers.Exists) {
		t.Errorf("create on a name another create took: %v, want Exists", err)
	}
}

// TestKeyStaysInTheHeader drives every kind of call, failures included,
// and finds the key nowhere in what reached the fake but the Authorization
// header, nor in an error or a log line.
func TestKeyStaysInTheHeader(t *testing.T) {
	srv, p, logs := fake(t, daytonatest.Options{CreatingPolls: 1})
	key := srv.APIKey()
	srv.SetFault(daytonatest.Every(5, "0", http.StatusTooManyRequests, http.StatusBadGateway))
	b := newBox(t, p, providers.Spec{Env: map[string]string{"SPEC": "1"}, Labels: map[string]string{"k": "v"}})
	ctx := ctxFor(t, 2*time.Minute)
	ws := b.workspace
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"REQ": "1"}, Stdin: strings.NewReader("in")})
	keep(err)
	if err == nil {
		_, err = pr.Wait()
		keep(err)
	}
	keep(b.WriteFile(ctx, ws+"/f", strings.NewReader("data"), 0o644))
	_, err = b.Stat(ctx, ws+"/f")
	keep(err)
	_, err = b.Stat(ctx, ws+"/missing") // a failure
	keep(err)
	_, err = b.Walk(ctx, ws)
	keep(err)
	keep(b.Rename(ctx, ws+"/f", ws+"/g"))
	keep(b.Remove(ctx, ws+"/g"))
	_, err = b.Facts(ctx)
	keep(err)
	_, err = p.List(ctx, map[string]string{"k": "v"})
	keep(err)
	_, err = p.Attach(ctx, "no-such-sandbox") // a failure
	keep(err)
	keep(b.KeepAlive(ctx))
	keep(b.Destroy(ctx))
	_, err = b.Status(ctx)
	keep(err)
	srv.SetFault(nil)
	if leaks := srv.Leaks(key); len(leaks) > 0 {
		t.Errorf("the key reached the fake outside the Authorization header:\n%s", strings.Join(leaks, "\n"))
	}
	auth := 0
	for _, r := range srv.Requests() {
		if r.Header.Get("Authorization") == "Bearer "+key {
			auth++
		}
	}
	if auth != len(srv.Requests()) {
		t.Errorf("%d of %d requests carried the key", auth, len(srv.Requests()))
	}
	if len(errs) < 3 {
		t.Errorf("only %d calls failed; the test meant to see failures", len(errs))
	}
	for _, e := range errs {
		if strings.Contains(e.Error(), key) {
			t.Errorf("an error holds the key: %v", e)
		}
	}
	if strings.Contains(logs.String(), key) {
		t.Errorf("a log line holds the key")
	}
	// New refuses a missing key, and says so without a key to leak.
	t.Setenv("DAYTONA_API_KEY", "")
	if _, err := New(providers.Config{Options: map[string]string{"api_url": srv.APIURL()}}); !providers.IsCode(err, providers.Auth) {
		t.Errorf("New without a key: %v, want Auth", err)
	}
}

// TestNetwork: network none and a domain allowlist are taken once Daytona
// reads them back; a Daytona that drops them makes the create Unsupported
// and leaves no sandbox.
func TestNetwork(t *testing.T) {
	_, p, _ := fake(t, daytonatest.Options{})
	ctx := ctxFor(t, time.Minute)
	for _, n := range []providers.Network{{Mode: providers.NetworkNone}, {Mode: providers.NetworkAllowlist, Allow: []string{"example.com", "pypi.org"}}} {
		b := newBox(t, p, providers.Spec{Network: n})
		f, err := b.Facts(ctx)
		if err != nil || f.Network != n.Mode {
			t.Errorf("network %v: Facts.Network = %q, %v", n, f.Network, err)
		}
	}
	srv, p2, _ := fake(t, daytonatest.Options{IgnoreNetwork: true})
	for _, n := range []providers.Network{{Mode: providers.NetworkNone}, {Mode: providers.NetworkAllowlist, Allow: []string{"example.com"}}} {
		b, err := p2.Create(ctx, providers.Spec{Network: n, Workspace: t.TempDir()})
		if err == nil {
			b.Destroy(ctx)
		}
		if !providers.IsCode(err, providers.Unsupported) {
			t.Errorf("network %v on a Daytona that drops it: %v, want Unsupported", n, err)
		}
	}
	if ids := srv.SandboxIDs(); len(ids) > 0 {
		t.Errorf("refused creates left sandboxes %v", ids)
	}
}

// TestExecuteTimeout: process/execute's 408 is Timeout.
func TestExecuteTimeout(t *testing.T) {
	_, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, _, err := b.run(ctx, "test", "sleep 30", nil, runOpts{})
	if !providers.IsCode(err, providers.Timeout) {
		t.Errorf("run past its timeout: %v, want Timeout", err)
	}
}

// TestAttachStarts: attaching to a stopping sandbox waits for it to stop
// and starts it; a deleted one is NotFound.
func TestAttachStarts(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	ctx := ctxFor(t, time.Minute)
	id := newBoxRaw(t, srv)
	srv.Stop(id)
	require.Equal(t, "stopping", srv.State(id))
	b, err := p.Attach(ctx, id) // waits for the stop, then starts it
	require.NoError(t, err, "Attach of a stopping sandbox")
	if st, err := b.Status(ctx); err != nil || st.State != providers.StateRunning {
		t.Errorf("after Attach: %+v, %v; want running", st, err)
	}
	b.Destroy(ctx)
	if _, err := p.Attach(ctx, id); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Attach of a deleted sandbox: %v, want NotFound", err)
	}
}

// TestIdleBoxEnds: with no call and no command, Daytona's auto-stop comes
// and (autoDeleteInterval 0) deletes the box; KeepAlive holds it off.
func TestIdleBoxEnds(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{Minute: 100 * time.Millisecond}) // auto-stop after 1.5 s idle
	ctx := ctxFor(t, time.Minute)
	b := newBox(t, p, providers.Spec{Lifetime: 24 * time.Hour}) // its ttl is 144 s on this clock
	for range 6 {
		time.Sleep(500 * time.Millisecond)
		if err := b.KeepAlive(ctx); err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
	}
	if st, err := b.Status(ctx); err != nil || st.State != providers.StateRunning {
		t.Fatalf("a box kept alive for 3 s: %+v, %v", st, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && srv.State(b.ID()) != "destroyed" {
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := b.Status(ctx); !providers.IsCode(err, providers.Gone) {
		t.Errorf("an idle box: Status %v, want Gone", err)
	}
}

// TestOneStream: with Stdout and Stderr the same writer, the command gets
// one stream, so their order is kept.
func TestOneStream(t *testing.T) {
	_, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	var out bytes.Buffer
	pr, err := b.Exec(ctxFor(t, time.Minute), providers.ExecRequest{Argv: []string{"sh", "-c", "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := pr.Wait(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if want := "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n"; out.String() != want {
		t.Errorf("one stream: %q, want %q", out.String(), want)
	}
}

// TestRenameInOneDirectory: the toolbox's move copies across file systems,
// so Rename takes it only within one directory; across directories it
// changes nothing and answers Unsupported.
func TestRenameInOneDirectory(t *testing.T) {
	_, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	ctx := ctxFor(t, time.Minute)
	ws := b.workspace
	if err := b.WriteFile(ctx, ws+"/f", strings.NewReader("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.Rename(ctx, ws+"/f", ws+"/sub/g"); !providers.IsCode(err, providers.Unsupported) {
		t.Errorf("Rename across directories: %v, want Unsupported", err)
	}
	if err := b.Rename(ctx, ws+"/f", "/dev/shm/boxfs-daytona-xdev"); !providers.IsCode(err, providers.Unsupported) {
		os.Remove("/dev/shm/boxfs-daytona-xdev")
		t.Errorf("Rename to another file system: %v, want Unsupported", err)
	}
	if _, err := os.Stat(ws + "/f"); err != nil {
		t.Fatalf("a refused Rename moved the file: %v", err)
	}
	if err := b.Rename(ctx, ws+"/f", ws+"/g"); err != nil {
		t.Fatalf("Rename within the directory: %v", err)
	}
	if fi, err := os.Stat(ws + "/g"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("after Rename: %v, %v", fi, err)
	}
}

// TestSnapshotLostAnswer: a snapshot call that fails before Daytona
// handles it (502), or whose answer is lost after Daytona took the
// snapshot (503 after handling, as a proxy that lost the backend's answer
// would), is sent again under the same name; the 409 of a retry is this
// call's own snapshot. The snapshot holds the file as it was, and a box
// made from it has it.
func TestSnapshotLostAnswer(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{SnapshottingFor: 10 * time.Millisecond})
	b := newBox(t, p, providers.Spec{})
	run := func(t *testing.T, b providers.Box, script string, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		pr, err := b.Exec(ctxFor(t, time.Minute), providers.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...), Stdout: &out})
		require.NoError(t, err)
		code, err := pr.Wait()
		require.NoError(t, err)
		require.Equal(t, 0, code, "exit of %q", script)
		return out.String()
	}
	for _, f := range []daytonatest.Fault{
		{Status: http.StatusBadGateway},
		{Status: http.StatusServiceUnavailable, After: true},
		{Status: http.StatusGatewayTimeout, After: true},
	} {
		t.Run(fmt.Sprintf("%d-after=%v", f.Status, f.After), func(t *testing.T) {
			text := fmt.Sprintf("at the snapshot %d %v", f.Status, f.After)
			run(t, b, `printf %s "$1" >"$HOME/snap.txt"`, text)
			var once atomic.Bool
			srv.SetFault(func(r *http.Request, n int) daytonatest.Fault {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/snapshot") && once.CompareAndSwap(false, true) {
					return f
				}
				return daytonatest.Fault{}
			})
			defer srv.SetFault(nil)
			id, err := p.Snapshot(ctxFor(t, time.Minute), b, "lost")
			require.NoError(t, err, "Snapshot with its first answer %d (after handling: %v)", f.Status, f.After)
			require.True(t, once.Load(), "the fault was not injected")
			srv.SetFault(nil)
			run(t, b, `printf changed >"$HOME/snap.txt"`)
			nb := newBox(t, p, providers.Spec{Snapshot: id})
			assert.Equal(t, text, run(t, nb, `cat "$HOME/snap.txt"`), "the file in a box made from the snapshot")
		})
	}
}
