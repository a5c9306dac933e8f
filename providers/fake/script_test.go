package fake_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

func TestScriptedExec(t *testing.T) {
	tests := []struct {
		name  string
		rule  func(p *fake.Provider)
		req   providers.ExecRequest
		calls int // how many times to run req
		want  []ran
	}{
		{
			name:  "fail always",
			rule:  func(p *fake.Provider) { p.On(fake.Match{Op: "Exec", Argv0: "echo"}).Fail(providers.Unavailable) },
			req:   argv("echo", "hi"),
			calls: 2,
			want:  []ran{{code: -1, err: code(providers.Unavailable)}, {code: -1, err: code(providers.Unavailable)}},
		},
		{
			name:  "fail once",
			rule:  func(p *fake.Provider) { p.On(fake.Match{Op: "Exec"}).Fail(providers.TransportLost).Once() },
			req:   argv("echo", "hi"),
			calls: 2,
			want:  []ran{{code: -1, err: code(providers.TransportLost)}, {stdout: "hi\n"}},
		},
		{
			name:  "fail twice",
			rule:  func(p *fake.Provider) { p.On(fake.Match{Op: "Exec"}).Fail(providers.Refused).Times(2) },
			req:   argv("echo", "hi"),
			calls: 3,
			want:  []ran{{code: -1, err: code(providers.Refused)}, {code: -1, err: code(providers.Refused)}, {stdout: "hi\n"}},
		},
		{
			name:  "another program is not matched",
			rule:  func(p *fake.Provider) { p.On(fake.Match{Op: "Exec", Argv0: "cat"}).Fail(providers.Refused) },
			req:   argv("echo", "hi"),
			calls: 1,
			want:  []ran{{stdout: "hi\n"}},
		},
		{
			name:  "argv0 matches a path's base name",
			rule:  func(p *fake.Provider) { p.On(fake.Match{Argv0: "echo"}).Fail(providers.Refused) },
			req:   argv("/bin/echo", "hi"),
			calls: 1,
			want:  []ran{{code: -1, err: code(providers.Refused)}},
		},
		{
			name:  "truncated stdout",
			rule:  func(p *fake.Provider) { p.On(fake.Match{Op: "Exec"}).TruncateStdout(3) },
			req:   providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("hello world")},
			calls: 1,
			want:  []ran{{stdout: "hel"}},
		},
		{
			name:  "dropped stdout, stderr kept",
			rule:  func(p *fake.Provider) { p.On(fake.Match{Op: "Exec"}).DropStdout() },
			req:   argv("exit", "4"),
			calls: 1,
			want:  []ran{{stderr: "exiting 4\n", code: 4}},
		},
		{
			name: "first matching rule wins",
			rule: func(p *fake.Provider) {
				p.On(fake.Match{Op: "Exec"}).Fail(providers.Auth).Once()
				p.On(fake.Match{Op: "Exec"}).Fail(providers.Liveness).Once()
			},
			req:   argv("echo"),
			calls: 3,
			want:  []ran{{code: -1, err: code(providers.Auth)}, {code: -1, err: code(providers.Liveness)}, {stdout: "\n"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, b := newBox(t, providers.Spec{})
			tt.rule(p)
			for i := range tt.calls {
				got := run(context.Background(), b, tt.req)
				want := tt.want[i]
				if got.stdout != want.stdout || got.stderr != want.stderr || got.code != want.code || providers.CodeOf(got.err) != providers.CodeOf(want.err) {
					t.Errorf("call %d: got %+v\nwant %+v", i, got, want)
				}
			}
		})
	}
}

// code makes an error with a code, to compare codes in tables.
func code(c providers.Code) error { return &providers.Error{Code: c} }

func TestScriptedDelay(t *testing.T) {
	clk := fake.NewClock(t0)
	p, b := newBox(t, providers.Spec{}, fake.WithClock(clk))
	p.On(fake.Match{Op: "Stat", Path: "/work"}).Delay(time.Minute)
	ctx := context.Background()
	done := make(chan error, 1)
	pending := clk.Pending() // the box's lifetime timer
	go func() { _, err := b.Stat(ctx, "/work"); done <- err }()
	if err := clk.BlockUntil(ctx, pending+1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("Stat returned %v before its delay passed", err)
	default:
	}
	// Another path is not delayed.
	if _, err := b.Stat(ctx, "/tmp"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("delayed Stat = %v", err)
	}

	// A delay the ctx does not wait out.
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := b.Stat(tctx, "/work"); !providers.IsCode(err, providers.Timeout) {
		t.Errorf("Stat with a short deadline = %v, want Timeout", err)
	}
}

func TestScriptedHang(t *testing.T) {
	tests := []struct {
		name string
		op   string
		call func(ctx context.Context, b *fake.Box) error
	}{
		{"ReadFile", "ReadFile", func(ctx context.Context, b *fake.Box) error { _, err := b.ReadFile(ctx, "/work/f"); return err }},
		{"WriteFile", "WriteFile", func(ctx context.Context, b *fake.Box) error {
			return b.WriteFile(ctx, "/work/f", strings.NewReader("x"), 0o644)
		}},
		{"Exec", "Exec", func(ctx context.Context, b *fake.Box) error { _, err := b.Exec(ctx, argv("echo")); return err }},
		{"Status", "Status", func(ctx context.Context, b *fake.Box) error { _, err := b.Status(ctx); return err }},
		{"Destroy", "Destroy", func(ctx context.Context, b *fake.Box) error { return b.Destroy(ctx) }},
	}
	for _, tt := range tests {
		for _, end := range []string{"cancel", "deadline"} {
			t.Run("op="+tt.name+"/end="+end, func(t *testing.T) {
				p, b := newBox(t, providers.Spec{})
				if err := b.WriteFile(context.Background(), "/work/f", strings.NewReader("before"), 0o644); err != nil {
					t.Fatal(err)
				}
				r := p.On(fake.Match{Op: tt.op}).Hang()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				want := providers.Timeout
				if end == "cancel" {
					ctx, cancel = context.WithCancel(context.Background())
					want = providers.Aborted
					time.AfterFunc(30*time.Millisecond, cancel)
				}
				defer cancel()
				if err := tt.call(ctx, b); !providers.IsCode(err, want) {
					t.Errorf("err = %v, want %v", err, want)
				}
				if r.Hits() != 1 {
					t.Errorf("Hits = %d", r.Hits())
				}
				// The hung call changed nothing.
				p.ClearRules()
				rc, err := b.ReadFile(context.Background(), "/work/f")
				if err != nil {
					t.Fatal(err)
				}
				if data, _ := io.ReadAll(rc); string(data) != "before" {
					t.Errorf("file holds %q after a hung call", data)
				}
			})
		}
	}
}

func TestScriptedFileFailures(t *testing.T) {
	p, b := newBox(t, providers.Spec{})
	ctx := context.Background()
	if err := b.WriteFile(ctx, "/work/a", strings.NewReader("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.On(fake.Match{Op: "WriteFile", Path: "/work/a"}).FailErrno(syscall.ENOSPC).Once()
	err := b.WriteFile(ctx, "/work/a", strings.NewReader("new"), 0o644)
	if errno, _ := providers.ErrnoOf(err); errno != syscall.ENOSPC || !providers.IsCode(err, providers.TooLarge) {
		t.Errorf("WriteFile = %v, want ENOSPC (too_large)", err)
	}
	var e *providers.Error
	if !errors.As(err, &e) || e.Op != "fake.WriteFile" || e.Box != b.ID() || e.Path != "/work/a" {
		t.Errorf("error fields: %#v", e)
	}
	rc, _ := b.ReadFile(ctx, "/work/a")
	if data, _ := io.ReadAll(rc); string(data) != "old" {
		t.Errorf("a failed write changed the file to %q", data)
	}
	p.On(fake.Match{Op: "Rename", Box: b.ID()}).Fail(providers.OutcomeUnknown)
	if err := b.Rename(ctx, "/work/a", "/work/b"); !providers.IsCode(err, providers.OutcomeUnknown) {
		t.Errorf("Rename = %v", err)
	}
	if err := b.WriteFile(ctx, "/work/a", strings.NewReader("new"), 0o644); err != nil {
		t.Errorf("the Once rule applied twice: %v", err)
	}
}

func TestScriptedLoseStdinEOF(t *testing.T) {
	p, b := newBox(t, providers.Spec{})
	p.On(fake.Match{Op: "Exec", Argv0: "cat"}).LoseStdinEOF()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w := io.Pipe()
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("all of it"), Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "all of it" {
		t.Fatalf("read %q, %v", buf, err)
	}
	waited := make(chan error, 1)
	go func() { _, err := pr.Wait(); waited <- err }()
	select {
	case err := <-waited:
		t.Fatalf("cat ended (%v) though its stdin never did", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-waited; !providers.IsCode(err, providers.Aborted) {
		t.Errorf("Wait = %v, want Aborted", err)
	}
	if c := p.CallsOf("Exec")[0]; string(c.Stdin) != "all of it" {
		t.Errorf("recorded stdin %q", c.Stdin)
	}
}

func TestScriptedGoneMidExec(t *testing.T) {
	p, b := newBox(t, providers.Spec{})
	p.Program("work", func(ctx context.Context, pc *fake.Proc) int {
		io.WriteString(pc.Stdout, "partial")
		<-ctx.Done()
		io.WriteString(pc.Stdout, " never seen")
		return 0
	})
	p.On(fake.Match{Op: "Exec", Argv0: "work"}).GoneMidExec()
	ctx := context.Background()
	got := run(ctx, b, argv("work"))
	if got.stdout != "partial" || !providers.IsCode(got.err, providers.Gone) {
		t.Errorf("got %+v, want stdout %q and Gone", got, "partial")
	}
	if _, err := b.Status(ctx); !providers.IsCode(err, providers.Gone) {
		t.Errorf("Status = %v, want Gone", err)
	}
	if _, err := p.Attach(ctx, b.ID()); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Attach = %v, want NotFound", err)
	}

	// A program that writes nothing: the box goes when it returns, and its
	// exit never arrives.
	p2, b2 := newBox(t, providers.Spec{})
	p2.On(fake.Match{Op: "Exec"}).GoneMidExec()
	if got := run(ctx, b2, argv("exit", "0")); !providers.IsCode(got.err, providers.Gone) {
		t.Errorf("got %+v, want Gone", got)
	}
}

func TestScriptedCreateFailsLeavingBox(t *testing.T) {
	tests := []struct {
		name string
		rule func(r *fake.Rule)
		want providers.Code
	}{
		{"default code", func(r *fake.Rule) { r.CreateFailsLeavingBox() }, providers.OutcomeUnknown},
		{"given code", func(r *fake.Rule) { r.CreateFailsLeavingBox().Fail(providers.Timeout) }, providers.Timeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.New()
			tt.rule(p.On(fake.Match{Op: "Create"}).Once())
			ctx := context.Background()
			b, err := p.Create(ctx, providers.Spec{Labels: map[string]string{"run": "1"}})
			var e *providers.Error
			if b != nil || !errors.As(err, &e) || e.Code != tt.want || e.Box == "" {
				t.Fatalf("Create = %v, %v; want code %v naming the box", b, err, tt.want)
			}
			left, err := p.List(ctx, map[string]string{"run": "1"})
			if err != nil || len(left) != 1 || left[0].ID() != e.Box {
				t.Fatalf("List = %v, %v; want the box left behind (%s)", left, err, e.Box)
			}
			if st, err := left[0].Status(ctx); err != nil || st.State != providers.StateRunning {
				t.Errorf("left box Status = %+v, %v", st, err)
			}
			if c := p.CallsOf("Create")[0]; c.Box != e.Box || c.Code != tt.want {
				t.Errorf("recorded %+v", c)
			}
		})
	}
}

func TestRulePanics(t *testing.T) {
	tests := []struct {
		name string
		f    func(p *fake.Provider)
	}{
		{"unknown op", func(p *fake.Provider) { p.On(fake.Match{Op: "Stats"}) }},
		{"exec outcome on a file op", func(p *fake.Provider) { p.On(fake.Match{Op: "Stat"}).TruncateStdout(1) }},
		{"create outcome on exec", func(p *fake.Provider) { p.On(fake.Match{Op: "Exec"}).CreateFailsLeavingBox() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tt.f(fake.New())
		})
	}
}
