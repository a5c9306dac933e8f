package fake_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

const secret = "s3cr3t-MARKER"

func TestLeaks(t *testing.T) {
	tarWith := func(name, body string) *bytes.Buffer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
		tw.Close()
		return &buf
	}
	tests := []struct {
		name string
		do   func(ctx context.Context, p *fake.Provider, b *fake.Box)
		want []string // with %s for the box id
	}{
		{"nothing", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			run(ctx, b, argv("echo", "harmless"))
		}, nil},
		{"argv", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			run(ctx, b, argv("echo", "a", "--token="+secret))
		}, []string{"call 1 Exec %s: argv[2]"}},
		{"env value", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			run(ctx, b, providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"TOKEN": secret}})
		}, []string{"call 1 Exec %s: env TOKEN"}},
		{"stdin", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			run(ctx, b, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("x" + secret + "y")})
		}, []string{"call 1 Exec %s: stdin"}},
		{"file content", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			b.WriteFile(ctx, "/work/f", strings.NewReader(secret), 0o600)
			b.WriteAt(ctx, "/work/f", []byte(secret), 3)
		}, []string{"call 1 WriteFile %s: content", "call 2 WriteAt %s: content"}},
		{"archive", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			b.PutArchive(ctx, "/work", tarWith("f", secret))
		}, []string{"call 1 PutArchive %s: content"}},
		{"path and rename target", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			b.Create(ctx, "/work/"+secret, 0o644, false)
			b.Rename(ctx, "/work/"+secret, "/work/x"+secret)
			b.Symlink(ctx, secret, "/work/l")
		}, []string{"call 1 CreateFile %s: path", "call 2 Rename %s: path", "call 2 Rename %s: target", "call 3 Symlink %s: target"}},
		{"exec dir", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			run(ctx, b, providers.ExecRequest{Argv: []string{"pwd"}, Dir: "/" + secret})
		}, []string{"call 1 Exec %s: dir"}},
		{"create: spec env and labels", func(ctx context.Context, p *fake.Provider, b *fake.Box) {
			p.Create(ctx, providers.Spec{Env: map[string]string{"KEY": secret}, Labels: map[string]string{"who": secret}})
			p.List(ctx, map[string]string{"who": secret})
		}, []string{"call 1 Create fake-2: env KEY", "call 1 Create fake-2: label who", "call 2 List: label who"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, b := newBox(t, providers.Spec{})
			tt.do(context.Background(), p, b)
			var want []string
			for _, w := range tt.want {
				if strings.Contains(w, "%s") {
					w = fmt.Sprintf(w, b.ID())
				}
				want = append(want, w)
			}
			if got := p.Leaks(secret); !slices.Equal(got, want) {
				t.Errorf("Leaks = %q\nwant %q", got, want)
			}
		})
	}
}

// Calls never shows an env value, though Leaks finds it.
func TestCallsKeepEnvNamesOnly(t *testing.T) {
	p, b := newBox(t, providers.Spec{Env: map[string]string{"SPEC_KEY": secret}})
	ctx := context.Background()
	run(ctx, b, providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"B": secret, "A": "x"}})
	calls := p.Calls()
	if s := fmt.Sprintf("%+v", calls); strings.Contains(s, secret) {
		t.Errorf("an env value shows in Calls: %s", s)
	}
	if got := calls[0].EnvNames; !slices.Equal(got, []string{"SPEC_KEY"}) {
		t.Errorf("Create EnvNames = %v", got)
	}
	if got := calls[1].EnvNames; !slices.Equal(got, []string{"A", "B"}) {
		t.Errorf("Exec EnvNames = %v", got)
	}
	if len(p.Leaks(secret)) != 2 {
		t.Errorf("Leaks = %v, want both env values", p.Leaks(secret))
	}
}

func TestCallsRecordInOrder(t *testing.T) {
	p, b := newBox(t, providers.Spec{Image: "img", Labels: map[string]string{"k": "v"}})
	ctx := context.Background()
	b.WriteFile(ctx, "/work/f", strings.NewReader("12345"), 0o644)
	buf := make([]byte, 10)
	b.ReadAt(ctx, "/work/f", buf, 2)
	b.Truncate(ctx, "/work/f", 99)
	b.Link(ctx, "/work/f", "/work/g")
	b.Stat(ctx, "/work/nope")
	run(ctx, b, providers.ExecRequest{Argv: []string{"cat", "-"}, Dir: "/tmp", Stdin: strings.NewReader("in")})
	type row struct {
		Op, Box, Path, Target, Dir, Stdin string
		Argv                              []string
		Size                              int64
		Code                              providers.Code
	}
	var got []row
	for _, c := range p.Calls() {
		got = append(got, row{c.Op, c.Box, c.Path, c.Target, c.Dir, string(c.Stdin), c.Argv, c.Size, c.Code})
	}
	id := b.ID()
	want := []row{
		{Op: "Create", Box: id},
		{Op: "WriteFile", Box: id, Path: "/work/f", Size: 5},
		{Op: "ReadAt", Box: id, Path: "/work/f", Size: 3},
		{Op: "Truncate", Box: id, Path: "/work/f", Size: 99},
		{Op: "Link", Box: id, Path: "/work/f", Target: "/work/g"},
		{Op: "Stat", Box: id, Path: "/work/nope", Code: providers.NotFound},
		{Op: "Exec", Box: id, Dir: "/tmp", Stdin: "in", Argv: []string{"cat", "-"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls:\n got %+v\nwant %+v", got, want)
	}
	if c := p.Calls()[0]; c.Image != "img" || c.Labels["k"] != "v" {
		t.Errorf("Create call %+v", c)
	}
}
