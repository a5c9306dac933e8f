package providertest

import (
	"context"
	"maps"
	"os"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// ids returns the ids of boxes, sorted.
func ids(boxes []providers.Box) []string {
	out := make([]string, len(boxes))
	for i, b := range boxes {
		out[i] = b.ID()
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// hasLabels fails t unless have holds every label of want.
func hasLabels(t *testing.T, what string, have, want map[string]string) {
	t.Helper()
	if !providers.MatchLabels(have, want) {
		t.Errorf("%s: labels %v do not include %v", what, have, want)
	}
}

func testCreateAttachList(t *testing.T, s *suite) {
	ctx := testCtx(t)
	la := map[string]string{"role": "a", "note": "with space & 'quotes'"}
	lb := map[string]string{"role": "b"}
	a := s.box(t, func(sp *providers.Spec) { maps.Copy(sp.Labels, la) })
	b := s.box(t, func(sp *providers.Spec) { maps.Copy(sp.Labels, lb) })
	if a.ID() == "" || a.ID() == b.ID() {
		t.Fatalf("box ids %q and %q: want two distinct non-empty ids", a.ID(), b.ID())
	}
	hasLabels(t, "box a", a.Labels(), la)
	hasLabels(t, "box a", a.Labels(), s.labels(t))
	hasLabels(t, "box b", b.Labels(), lb)

	mine := s.labels(t)
	tests := []struct {
		labels map[string]string
		want   []string
	}{
		{mine, sorted(a.ID(), b.ID())},
		{with(mine, "role", "a"), []string{a.ID()}},
		{with(mine, "role", "b"), []string{b.ID()}},
		{with(mine, "note", la["note"]), []string{a.ID()}},
		{with(mine, "role", "c"), []string{}},
		{with(mine, "absent-key", "x"), []string{}},
	}
	for _, tt := range tests {
		got, err := s.h.Provider.List(ctx, tt.labels)
		if err != nil {
			t.Fatalf("List(%v): %v", tt.labels, err)
		}
		if g := ids(got); !slices.Equal(g, tt.want) {
			t.Errorf("List(%v) = %v, want %v", tt.labels, g, tt.want)
		}
		for _, g := range got {
			hasLabels(t, "listed box "+g.ID(), g.Labels(), tt.labels)
		}
	}
	all, err := s.h.Provider.List(ctx, nil)
	if err != nil {
		t.Fatalf("List(nil): %v", err)
	}
	if g := ids(all); !slices.Contains(g, a.ID()) || !slices.Contains(g, b.ID()) {
		t.Errorf("List(nil) = %v, want it to hold %s and %s", g, a.ID(), b.ID())
	}

	got, err := s.h.Provider.Attach(ctx, a.ID())
	if err != nil {
		t.Fatalf("Attach(%s): %v", a.ID(), err)
	}
	if got.ID() != a.ID() {
		t.Errorf("Attach(%s).ID() = %s", a.ID(), got.ID())
	}
	hasLabels(t, "attached box", got.Labels(), la)
	hasLabels(t, "attached box", got.Labels(), mine)
	st, err := got.Status(ctx)
	if err != nil || st.State != providers.StateRunning {
		t.Errorf("attached box: Status = %+v, %v; want running", st, err)
	}
	out := mustRun(t, ctx, got, providers.ExecRequest{Argv: []string{"printf", PrintfNUL, "attached"}})
	if string(out) != "attached\x00" {
		t.Errorf("attached box: printf printed %q", out)
	}
}

func with(m map[string]string, k, v string) map[string]string {
	m = maps.Clone(m)
	m[k] = v
	return m
}

func testReservedLabel(t *testing.T, s *suite) {
	ctx := testCtx(t)
	for _, key := range []string{"boxfs", "boxfs.name", "boxfs.provider"} {
		sp := s.spec(t)
		sp.Labels[key] = "x"
		b, err := s.h.Provider.Create(ctx, sp)
		if b != nil {
			b.Destroy(ctx)
		}
		wantCode(t, err, providers.Invalid, "Create with reserved label "+key)
	}
	leftover, err := s.h.Provider.List(ctx, s.labels(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(leftover) > 0 {
		t.Errorf("a refused Create left boxes behind: %v", ids(leftover))
	}
}

// samples are valid values, one per spec field, for the fields a provider
// declares it refuses.
var samples = map[string]func(*providers.Spec){
	"image":     func(sp *providers.Spec) { sp.Image = "docker.io/library/alpine:3.20" },
	"snapshot":  func(sp *providers.Spec) { sp.Snapshot = "boxfs-conformance-snapshot" },
	"region":    func(sp *providers.Spec) { sp.Region = "boxfs-conformance-region" },
	"lifetime":  func(sp *providers.Spec) { sp.Lifetime = time.Hour },
	"cpus":      func(sp *providers.Spec) { sp.CPUs = 1 },
	"memoryMb":  func(sp *providers.Spec) { sp.MemoryMB = 512 },
	"gpu":       func(sp *providers.Spec) { sp.GPU = "any" },
	"isolation": func(sp *providers.Spec) { sp.Isolation = providers.IsolationMicroVM },
	"network":   func(sp *providers.Spec) { sp.Network = providers.Network{Mode: providers.NetworkNone} },
	"ports":     func(sp *providers.Spec) { sp.Ports = []int{8080} },
	"env":       func(sp *providers.Spec) { sp.Env = map[string]string{"BOXFS_SAMPLE": "1"} },
	"labels":    func(sp *providers.Spec) { sp.Labels["boxfs-sample"] = "1" },
	"mounts": func(sp *providers.Spec) {
		sp.Mounts = []providers.Mount{{Source: os.TempDir(), Target: "/mnt/boxfs-sample", ReadOnly: true}}
	},
	"workspace":    func(sp *providers.Spec) { sp.Workspace = "/boxfs-sample-workspace" },
	"user":         func(sp *providers.Spec) { sp.User = "1000:1000" },
	"capabilities": func(sp *providers.Spec) { sp.Capabilities = providers.Capabilities{Drop: []string{"NET_RAW"}} },
}

func testUnsupportedSpec(t *testing.T, s *suite) {
	type refusal struct {
		name string
		spec providers.Spec
	}
	var cases []refusal
	for _, f := range s.h.Unsupported {
		sp := s.spec(t)
		samples[f](&sp)
		cases = append(cases, refusal{f, sp})
	}
	for _, name := range slices.Sorted(maps.Keys(s.h.Refused)) {
		cases = append(cases, refusal{name, overlay(s.spec(t), s.h.Refused[name])})
	}
	if len(cases) == 0 {
		t.Log("the harness declares no refused spec field")
	}
	ctx := testCtx(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := s.h.Provider.Create(ctx, c.spec)
			if b != nil {
				b.Destroy(ctx)
			}
			wantCode(t, err, providers.Unsupported, "Create("+c.spec.String()+")")
		})
	}
	leftover, err := s.h.Provider.List(ctx, map[string]string{LabelRun: s.run, LabelTest: t.Name()})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(leftover) > 0 {
		t.Errorf("a refused Create left boxes behind: %v", ids(leftover))
	}
}

// overlay returns base with every field that top sets replaced by top's
// (labels merged).
func overlay(base, top providers.Spec) providers.Spec {
	b, tv := reflect.ValueOf(&base).Elem(), reflect.ValueOf(top)
	for i := range tv.NumField() {
		if f := tv.Field(i); !f.IsZero() && tv.Type().Field(i).Name != "Labels" {
			b.Field(i).Set(f)
		}
	}
	maps.Copy(base.Labels, top.Labels)
	return base
}

func testFacts(t *testing.T, s *suite) {
	ctx := testCtx(t)
	before := time.Now()
	b := s.box(t, nil)
	after := time.Now()
	f, err := b.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts: %v", err)
	}
	if f.Provider != s.h.Provider.Name() {
		t.Errorf("Facts.Provider = %q, want %q", f.Provider, s.h.Provider.Name())
	}
	if f.ID != b.ID() {
		t.Errorf("Facts.ID = %q, want %q", f.ID, b.ID())
	}
	if !path.IsAbs(f.Workspace) {
		t.Errorf("Facts.Workspace = %q, want an absolute path", f.Workspace)
	}
	// Clocks of remote boxes may be a little off ours.
	const skew = time.Minute
	if f.StartedAt.IsZero() || f.StartedAt.Before(before.Add(-skew)) || f.StartedAt.After(after.Add(skew)) {
		t.Errorf("Facts.StartedAt = %v, want a time around %v..%v", f.StartedAt, before, after)
	}
	if want := !s.h.NoStdin && !s.h.StagedStdin; f.HasStdin() != want {
		t.Errorf("Facts.Stdin = %v with Harness.NoStdin = %v, StagedStdin = %v", fmtBool(f.Stdin), s.h.NoStdin, s.h.StagedStdin)
	}
	if f.TmpDir != "" {
		out := mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"pwd"}, Dir: f.TmpDir})
		if got := strings.TrimSuffix(string(out), "\n"); got != f.TmpDir {
			t.Errorf("Facts.TmpDir = %q, but a command run there is in %q", f.TmpDir, got)
		}
	}
}

func fmtBool(b *bool) string {
	if b == nil {
		return "absent"
	}
	if *b {
		return "true"
	}
	return "false"
}

func testStatus(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	st, err := b.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.State != providers.StateRunning {
		t.Errorf("Status.State = %q, want running", st.State)
	}
	if st.StartedAt.IsZero() {
		t.Error("Status.StartedAt is not set")
	}
}

func testDestroy(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	f, err := b.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts: %v", err)
	}
	p := s.startLong(t, ctx, b)
	if err := b.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	code, err := waitWithin(t, p, endBound, "a command running when its box was destroyed")
	if err == nil && code == 0 {
		t.Errorf("a command running when its box was destroyed exited 0")
	}

	_, err = b.Exec(ctx, providers.ExecRequest{Argv: []string{"printf", PrintfNUL, "x"}})
	wantCode(t, err, providers.Gone, "Exec after Destroy")
	_, err = b.Status(ctx)
	wantCode(t, err, providers.Gone, "Status after Destroy")
	_, err = b.Facts(ctx)
	wantCode(t, err, providers.Gone, "Facts after Destroy")
	if files, ok := b.(providers.Files); ok {
		_, err = files.Stat(ctx, f.Workspace)
		wantCode(t, err, providers.Gone, "Files.Stat after Destroy")
	}
	if err := b.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v, want nil", err)
	}
	listed, err := s.h.Provider.List(ctx, s.labels(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if g := ids(listed); slices.Contains(g, b.ID()) {
		t.Errorf("List after Destroy still has %s", b.ID())
	}
}

func testAttachDestroyed(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	id := b.ID()
	if err := b.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	got, err := s.h.Provider.Attach(ctx, id)
	wantCode(t, err, providers.NotFound, "Attach of a destroyed box")
	if got != nil {
		t.Errorf("Attach of a destroyed box returned a box")
	}
}

func testLifetime(t *testing.T, s *suite) {
	lifetime, slack := s.h.Lifetime, s.h.LifetimeSlack
	start := time.Now()
	b := s.box(t, func(sp *providers.Spec) { sp.Lifetime = lifetime })
	p := s.startLong(t, context.Background(), b)
	// From here on the host does nothing: no call reaches the provider
	// until the command's Wait (called once, below) returns on its own.
	code, err := waitWithin(t, p, time.Until(start.Add(lifetime+slack)), "a command in a box past its lifetime of "+lifetime.String())
	ended := time.Since(start)
	t.Logf("box with lifetime %v ended its command %v after Create began (exit %d, %v)", lifetime, ended.Round(time.Millisecond), code, err)
	if ended < lifetime*9/10 {
		t.Errorf("the command ended after %v, before the box's lifetime of %v", ended, lifetime)
	}
	switch c := providers.CodeOf(err); {
	case err == nil && code == 0:
		t.Errorf("a command killed by its box's end exited 0")
	case err != nil && c != providers.Gone && c != providers.TransportLost:
		t.Errorf("Wait of a command in an ended box: %v (code %v), want an exit status, Gone or TransportLost", err, c)
	}

	ctx := testCtx(t)
	st, err := b.Status(ctx)
	if err == nil && st.State != providers.StateEnded {
		t.Errorf("Status after the lifetime = %+v, want ended", st)
	} else if err != nil && !providers.IsCode(err, providers.Gone) {
		t.Errorf("Status after the lifetime: %v, want ended or Gone", err)
	}
	r := execute(ctx, b, providers.ExecRequest{Argv: []string{"printf", PrintfNUL, "x"}})
	wantCode(t, r.err, providers.Gone, "Exec after the lifetime")
}

// startLong starts a command that runs for ever: ScriptGroup, read until
// it runs, or where output arrives at the end, a plain long sleep.
func (s *suite) startLong(t *testing.T, ctx context.Context, b providers.Box) providers.Process {
	t.Helper()
	if !s.h.OutputAtEnd {
		p, _ := startGroup(t, ctx, b)
		return p
	}
	p, err := b.Exec(ctx, providers.ExecRequest{Argv: sh(ScriptGroup)})
	if err != nil {
		t.Fatalf("Exec(ScriptGroup): %v", err)
	}
	return p
}
