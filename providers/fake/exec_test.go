package fake_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// programs registers the commands these tests run.
func programs(t *testing.T, p *fake.Provider) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	p.Program("echo", func(ctx context.Context, pc *fake.Proc) int {
		fmt.Fprintln(pc.Stdout, strings.Join(pc.Argv[1:], " "))
		return 0
	})
	p.Program("cat", func(ctx context.Context, pc *fake.Proc) int {
		if _, err := io.Copy(pc.Stdout, pc.Stdin); err != nil {
			return 1
		}
		return 0
	})
	p.Program("env", func(ctx context.Context, pc *fake.Proc) int {
		for _, k := range slices.Sorted(maps.Keys(pc.Env)) {
			fmt.Fprintf(pc.Stdout, "%s=%s\n", k, pc.Env[k])
		}
		return 0
	})
	p.Program("pwd", func(ctx context.Context, pc *fake.Proc) int {
		fmt.Fprintln(pc.Stdout, pc.Dir)
		return 0
	})
	p.Program("exit", func(ctx context.Context, pc *fake.Proc) int {
		n, _ := strconv.Atoi(pc.Argv[1])
		fmt.Fprintln(pc.Stderr, "exiting", n)
		return n
	})
	p.Program("sleep", func(ctx context.Context, pc *fake.Proc) int {
		<-ctx.Done()
		return 0
	})
	// stubborn ignores its ctx: it ends only when the test does.
	p.Program("stubborn", func(ctx context.Context, pc *fake.Proc) int {
		fmt.Fprintln(pc.Stdout, "started")
		<-release
		return 0
	})
	p.Program("touch", func(ctx context.Context, pc *fake.Proc) int {
		if err := pc.Files.WriteFile(ctx, pc.Dir+"/"+pc.Argv[1], strings.NewReader(pc.Argv[2]), 0o644); err != nil {
			fmt.Fprintln(pc.Stderr, err)
			return 1
		}
		return 0
	})
}

func newBox(t *testing.T, spec providers.Spec, opts ...fake.Option) (*fake.Provider, *fake.Box) {
	t.Helper()
	p := fake.New(opts...)
	programs(t, p)
	b, err := p.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return p, b.(*fake.Box)
}

type ran struct {
	stdout, stderr string
	code           int
	err            error
}

func run(ctx context.Context, b providers.Box, req providers.ExecRequest) ran {
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	pr, err := b.Exec(ctx, req)
	if err != nil {
		return ran{code: -1, err: err}
	}
	code, err := pr.Wait()
	return ran{out.String(), errb.String(), code, err}
}

func argv(s ...string) providers.ExecRequest { return providers.ExecRequest{Argv: s} }

func TestExec(t *testing.T) {
	_, b := newBox(t, providers.Spec{Env: map[string]string{"FROM_SPEC": "s", "OVER": "spec"}})
	ctx := context.Background()
	tests := []struct {
		name string
		req  providers.ExecRequest
		want ran
	}{
		{"argv exactly", argv("echo", "a  b", "", "$HOME", "'q'"), ran{stdout: "a  b  $HOME 'q'\n"}},
		{"path to a program", argv("/usr/bin/echo", "x"), ran{stdout: "x\n"}},
		{"exit code", argv("exit", "3"), ran{stderr: "exiting 3\n", code: 3}},
		{"exit 0", argv("exit", "0"), ran{stderr: "exiting 0\n"}},
		{"not found", argv("nosuch", "x"), ran{stderr: "fake: nosuch: command not found\n", code: 127}},
		{"stdin to stdout", providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("in\x00put")}, ran{stdout: "in\x00put"}},
		{"nil stdin is empty", argv("cat"), ran{}},
		{"workspace is the default dir", argv("pwd"), ran{stdout: "/work\n"}},
		{"dir", providers.ExecRequest{Argv: []string{"pwd"}, Dir: "/tmp"}, ran{stdout: "/tmp\n"}},
		{"relative dir is under the workspace", providers.ExecRequest{Argv: []string{"pwd"}, Dir: "."}, ran{stdout: "/work\n"}},
		{"env: base, spec, request", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"OVER": "req", "X": "1"}},
			ran{stdout: "FROM_SPEC=s\nHOME=/root\nOVER=req\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nTMPDIR=/tmp\nX=1\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(ctx, b, tt.req)
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}

	errTests := []struct {
		name string
		req  providers.ExecRequest
		want providers.Code
	}{
		{"empty argv", argv(), providers.Invalid},
		{"NUL in argv", argv("echo", "a\x00b"), providers.Invalid},
		{"bad env name", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"A=B": "x"}}, providers.Invalid},
		{"missing dir", providers.ExecRequest{Argv: []string{"pwd"}, Dir: "/nope"}, providers.NotFound},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(ctx, b, tt.req)
			if providers.CodeOf(got.err) != tt.want {
				t.Errorf("err = %v, want code %v", got.err, tt.want)
			}
		})
	}
}

func TestExecProgramSeesBoxFiles(t *testing.T) {
	p, b := newBox(t, providers.Spec{})
	ctx := context.Background()
	if got := run(ctx, b, argv("touch", "f", "made in the box")); got.code != 0 {
		t.Fatalf("touch: %+v", got)
	}
	rc, err := b.ReadFile(ctx, "/work/f")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	if string(data) != "made in the box" {
		t.Errorf("host reads %q", data)
	}
	// The program's own file calls are not the host's: not recorded.
	for _, c := range p.Calls() {
		if c.Op == "WriteFile" {
			t.Errorf("a program's write was recorded as a host call: %+v", c)
		}
	}
}

// An Exec's output reaches the caller while the program runs, not at its end.
func TestExecStreamsOutput(t *testing.T) {
	p, b := newBox(t, providers.Spec{})
	step := make(chan struct{})
	p.Program("twice", func(ctx context.Context, pc *fake.Proc) int {
		fmt.Fprint(pc.Stdout, "first ")
		<-step
		fmt.Fprint(pc.Stdout, "second")
		return 0
	})
	r, w := io.Pipe()
	pr, err := b.Exec(context.Background(), providers.ExecRequest{Argv: []string{"twice"}, Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "first " {
		t.Fatalf("read %q, %v before the program went on", buf, err)
	}
	close(step)
	go func() { io.Copy(io.Discard, r) }()
	if code, err := pr.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait = %d, %v", code, err)
	}
}

func TestExecEnds(t *testing.T) {
	tests := []struct {
		name     string
		prog     string
		end      func(cancel context.CancelFunc, pr providers.Process) error
		deadline time.Duration
		wantCode int
		want     providers.Code
	}{
		{name: "cancel", prog: "sleep", end: func(cancel context.CancelFunc, _ providers.Process) error { cancel(); return nil }, want: providers.Aborted},
		{name: "cancel a program that ignores ctx", prog: "stubborn", end: func(cancel context.CancelFunc, _ providers.Process) error { cancel(); return nil }, want: providers.Aborted},
		{name: "deadline", prog: "sleep", deadline: 50 * time.Millisecond, want: providers.Timeout},
		{name: "deadline, ignoring ctx", prog: "stubborn", deadline: 50 * time.Millisecond, want: providers.Timeout},
		{name: "kill", prog: "sleep", end: func(_ context.CancelFunc, pr providers.Process) error {
			return pr.Kill(context.Background())
		}, wantCode: 137},
		{name: "kill a program that ignores ctx", prog: "stubborn", end: func(_ context.CancelFunc, pr providers.Process) error {
			return pr.Kill(context.Background())
		}, wantCode: 137},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, b := newBox(t, providers.Spec{})
			ctx, cancel := context.WithCancel(context.Background())
			if tt.deadline > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tt.deadline)
			}
			defer cancel()
			pr, err := b.Exec(ctx, argv(tt.prog))
			if err != nil {
				t.Fatal(err)
			}
			if tt.end != nil {
				if err := tt.end(cancel, pr); err != nil {
					t.Fatalf("ending: %v", err)
				}
			}
			done := make(chan struct{})
			var code int
			go func() { code, err = pr.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Wait did not return")
			}
			if providers.CodeOf(err) != tt.want || tt.want == 0 && code != tt.wantCode {
				t.Errorf("Wait = %d, %v; want %d, code %v", code, err, tt.wantCode, tt.want)
			}
			if err := pr.Kill(context.Background()); err != nil {
				t.Errorf("Kill after the end: %v", err)
			}
		})
	}
}

func TestLifetime(t *testing.T) {
	clk := fake.NewClock(t0)
	p, b := newBox(t, providers.Spec{Lifetime: 10 * time.Minute}, fake.WithClock(clk))
	ctx := context.Background()
	pr, err := b.Exec(ctx, argv("sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := b.Status(ctx); err != nil || st.State != providers.StateRunning || !st.StartedAt.Equal(t0) {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	clk.Advance(10*time.Minute - time.Nanosecond)
	if st, _ := b.Status(ctx); st.State != providers.StateRunning {
		t.Fatalf("ended early: %+v", st)
	}
	clk.Advance(time.Hour)
	if _, err := pr.Wait(); !providers.IsCode(err, providers.Gone) {
		t.Errorf("running command: Wait = %v, want Gone", err)
	}
	st, err := b.Status(ctx)
	if err != nil || st.State != providers.StateEnded || !st.EndedAt.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("Status = %+v, %v; want ended at the deadline", st, err)
	}
	if got := run(ctx, b, argv("echo")); !providers.IsCode(got.err, providers.Gone) {
		t.Errorf("Exec after the lifetime = %v, want Gone", got.err)
	}
	if _, err := b.Stat(ctx, "/work"); !providers.IsCode(err, providers.Gone) {
		t.Errorf("Stat after the lifetime = %v, want Gone", err)
	}
	if _, err := p.Attach(ctx, b.ID()); err != nil {
		t.Errorf("Attach before a sweep = %v, want the ended box", err)
	}
	if got := p.Sweep(); !slices.Equal(got, []string{b.ID()}) {
		t.Errorf("Sweep = %v", got)
	}
	if _, err := p.Attach(ctx, b.ID()); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Attach after a sweep = %v, want NotFound", err)
	}
	if _, err := b.Status(ctx); !providers.IsCode(err, providers.Gone) {
		t.Errorf("Status after a sweep = %v, want Gone", err)
	}
}

func TestDestroy(t *testing.T) {
	p, b := newBox(t, providers.Spec{Labels: map[string]string{"team": "a"}})
	ctx := context.Background()
	pr, err := b.Exec(ctx, argv("stubborn"))
	if err != nil {
		t.Fatal(err)
	}
	if bs, _ := p.List(ctx, map[string]string{"team": "a"}); len(bs) != 1 {
		t.Fatalf("List = %d boxes before Destroy", len(bs))
	}
	if err := b.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Wait(); !providers.IsCode(err, providers.Gone) {
		t.Errorf("Wait = %v, want Gone", err)
	}
	if err := b.Destroy(ctx); err != nil {
		t.Errorf("second Destroy = %v, want nil", err)
	}
	for name, err := range map[string]error{
		"Status": func() error { _, err := b.Status(ctx); return err }(),
		"Exec":   run(ctx, b, argv("echo")).err,
		"Facts":  func() error { _, err := b.Facts(ctx); return err }(),
		"Mkdir":  b.Mkdir(ctx, "/work/x", 0o755),
	} {
		if !providers.IsCode(err, providers.Gone) {
			t.Errorf("%s after Destroy = %v, want Gone", name, err)
		}
	}
	if _, err := p.Attach(ctx, b.ID()); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Attach = %v, want NotFound", err)
	}
	if bs, _ := p.List(ctx, nil); len(bs) != 0 {
		t.Errorf("List = %d boxes after Destroy", len(bs))
	}
}

func TestCreate(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		spec providers.Spec
		opts []fake.Option
		want providers.Code
	}{
		{"defaults", providers.Spec{}, nil, 0},
		{"everything supported", providers.Spec{Image: "debian", Lifetime: time.Hour, CPUs: 2, MemoryMB: 512, GPU: "H100",
			Isolation: providers.IsolationMicroVM, Network: providers.Network{Mode: providers.NetworkNone}, Ports: []int{8080},
			Env: map[string]string{"A": "1"}, Labels: map[string]string{"k": "v"}, Workspace: "/ws", User: "1000:1000"}, nil, 0},
		{"mounts unsupported", providers.Spec{Mounts: []providers.Mount{{Source: "/x", Target: "/y"}}}, nil, providers.Unsupported},
		{"region unsupported", providers.Spec{Region: "eu"}, nil, providers.Unsupported},
		{"WithSupported narrows", providers.Spec{GPU: "H100"}, []fake.Option{fake.WithSupported("labels")}, providers.Unsupported},
		{"invalid lifetime", providers.Spec{Lifetime: -time.Second}, nil, providers.Invalid},
		{"reserved label", providers.Spec{Labels: map[string]string{"boxfs.x": "1"}}, nil, providers.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.New(tt.opts...)
			b, err := p.Create(ctx, tt.spec)
			if providers.CodeOf(err) != tt.want {
				t.Fatalf("Create = %v, want code %v", err, tt.want)
			}
			if err != nil {
				if bs, _ := p.List(ctx, nil); len(bs) != 0 {
					t.Errorf("a refused Create left %d boxes", len(bs))
				}
				return
			}
			f, err := b.Facts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ws := tt.spec.Workspace
			if ws == "" {
				ws = fake.DefaultWorkspace
			}
			if f.Provider != "fake" || f.ID != b.ID() || f.GPU != tt.spec.GPU || f.CPUs != tt.spec.CPUs || f.Workspace != ws || f.StartedAt.IsZero() {
				t.Errorf("Facts = %+v", f)
			}
			if fi, err := b.(providers.Files).Stat(ctx, ws); err != nil || !fi.IsDir() {
				t.Errorf("workspace %s: %+v, %v", ws, fi, err)
			}
			if b.Labels()["boxfs.provider"] != "fake" {
				t.Errorf("Labels = %v", b.Labels())
			}
		})
	}
}

func TestConcurrentExecAndFiles(t *testing.T) {
	p, b := newBox(t, providers.Spec{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			name := fmt.Sprintf("/work/f%d", i)
			if err := b.WriteFile(ctx, name, strings.NewReader(name), 0o644); err != nil {
				t.Error(err)
			}
			got := run(ctx, b, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader(name)})
			if got.stdout != name || got.code != 0 {
				t.Errorf("cat: %+v", got)
			}
		})
	}
	wg.Wait()
	fis, err := b.ReadDir(ctx, "/work")
	if err != nil || len(fis) != 20 {
		t.Errorf("ReadDir = %d entries, %v", len(fis), err)
	}
	if n := len(p.CallsOf("Exec")); n != 20 {
		t.Errorf("%d Exec calls recorded, want 20", n)
	}
}
