package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// The manifest the harness expects is the one the box-side script prints.
func TestManifestHashMatchesScript(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("no sha256sum")
	}
	dir := t.TempDir()
	files := map[string]string{"a": "one", "sub/b": "two\n", "sub/deep/c.go": "package c\n", "B": "upper sorts first"}
	sums := map[string]string{}
	var names []string
	for n, c := range files {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		sums[n] = sha([]byte(c))
		names = append(names, n)
	}
	out, err := exec.Command("bash", "-c", manifestScript, "sh", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), manifestHash(names, sums); got != want {
		t.Errorf("script says %s, manifestHash %s", got, want)
	}
	sums["a"] = sha([]byte("changed"))
	if strings.TrimSpace(string(out)) == manifestHash(names, sums) {
		t.Error("a changed file does not change the manifest")
	}
}

// The visibility check, run by a real probe, says ok for the edit only.
func TestHasEditThroughProbe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "it's a file.go")
	orig := []byte("package x\n\n// a `quoted` line with $HOME and \\backslash\n")
	x := &rep{n: 3}
	edit := x.editedContent(orig, 1)
	p := newProbe("env")
	defer p.close()
	ctx := context.Background()
	for _, c := range []struct {
		content []byte
		want    string
	}{{orig, ""}, {edit, "ok"}, {x.editedContent(orig, 2), ""}, {append(edit, 'x'), ""}} {
		if err := os.WriteFile(path, c.content, 0o644); err != nil {
			t.Fatal(err)
		}
		out, _, err := p.run(ctx, hasEdit(path, edit))
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != c.want {
			t.Errorf("file %q: check printed %q, want %q", c.content, out, c.want)
		}
	}
}

// A probe reports output and status, survives a failing command, and is
// killed and restarted when it does not answer in time.
func TestProbe(t *testing.T) {
	p := newProbe("env")
	defer p.close()
	ctx := context.Background()
	out, rc, err := p.run(ctx, "printf 'a\\nb'; (exit 3)")
	if err != nil || out != "a\nb" || rc != 3 {
		t.Fatalf("run = %q, %d, %v", out, rc, err)
	}
	if _, err := p.ok(ctx, "false"); err == nil {
		t.Error("ok(false) did not fail")
	}
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, _, err := p.run(sctx, "sleep 30"); err == nil {
		t.Error("a hung command did not time out")
	}
	if out, err := p.ok(ctx, "echo back"); err != nil || out != "back\n" {
		t.Errorf("after a timeout: %q, %v", out, err)
	}
	if _, _, err := p.run(ctx, "echo a\necho b"); err == nil {
		t.Error("a two-line script was accepted")
	}
}

func TestQuantiles(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	if m := median(xs); m != 3 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{1, 2, 3, 10}); m != 2.5 {
		t.Errorf("median of 4 = %v", m)
	}
	if p := quantile(xs, 0.95); p != 5 {
		t.Errorf("p95 of 5 = %v, want the largest", p)
	}
	ys := make([]float64, 100)
	for i := range ys {
		ys[i] = float64(i + 1)
	}
	if p := quantile(ys, 0.95); p != 95 {
		t.Errorf("p95 of 1..100 = %v", p)
	}
}

// A failed check shows FAIL and no time; a stale W6 sample shows as stale;
// ratios are to native.
func TestCells(t *testing.T) {
	g := group{sz: issueSizes, peers: []*peer{{name: "native"}, {name: "boxfs"}, {name: "sshfs"}}}
	ss := []sample{
		{Profile: "issue", Peer: "native", Row: "w4.untar", Value: 1, OK: true},
		{Profile: "issue", Peer: "boxfs", Row: "w4.untar", Value: 4, OK: true},
		{Profile: "issue", Peer: "boxfs", Row: "w4.untar", Value: 2, OK: true},
		{Profile: "issue", Peer: "boxfs", Row: "w4.untar", Value: 3, OK: true},
		{Profile: "issue", Peer: "sshfs", Row: "w4.untar", Value: 0.5, OK: true},
		{Profile: "issue", Peer: "sshfs", Row: "w4.untar", OK: false, Note: "manifest differs"},
		{Profile: "issue", Peer: "sshfs", Row: "w6.stat", Value: 10000, OK: true, Censored: true},
		{Profile: "issue", Peer: "sshfs", Row: "w6.stat", Value: 10000, OK: true, Censored: true},
		{Profile: "issue", Peer: "boxfs", Row: "w6.stat", Value: 1000, OK: true},
		{Profile: "issue", Peer: "boxfs", Row: "w6.stat", Value: 10000, OK: true, Censored: true},
		{Profile: "other", Peer: "native", Row: "w4.untar", Value: 100, OK: true},
	}
	tb := summarizeGroup(ss, g)
	if got := tb.cellText("w4.untar", "boxfs", false, 10*time.Second); got != "3.00 ×3.00" {
		t.Errorf("boxfs untar = %q", got)
	}
	if got := tb.cellText("w4.untar", "sshfs", false, 10*time.Second); got != "FAIL (1/2)" {
		t.Errorf("sshfs untar = %q, want FAIL", got)
	}
	if got := tb.cellText("w6.stat", "sshfs", false, 10*time.Second); got != ">10s (stale)" {
		t.Errorf("stale = %q", got)
	}
	c := tb.cells["w6.stat"]["boxfs"]
	if c.censored != 1 || !math.IsInf(c.p95, 1) || c.median != math.Inf(1) && c.median != (1000+math.Inf(1))/2 {
		t.Errorf("boxfs w6 cell = %+v", c)
	}
	if got := tb.cellText("w1.total", "boxfs", false, 0); got != "—" {
		t.Errorf("missing = %q", got)
	}
	var b strings.Builder
	tb.boxfsRatios(&b)
	if !strings.Contains(b.String(), "| W4 untar 3,000 files | 3.00 ×3.00 s | 3.00 | (FAIL) |") {
		t.Errorf("ratios table:\n%s", b.String())
	}
}

func TestUpdateDocs(t *testing.T) {
	f := filepath.Join(t.TempDir(), "b.md")
	os.WriteFile(f, []byte("# title\n\nhand text\n\n"+docsBegin+"\nold table\n"+docsEnd+"\n\nmore hand text\n"), 0o644)
	if err := updateDocs(f, "new table\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f)
	s := string(b)
	if strings.Contains(s, "old table") || !strings.Contains(s, "new table") || !strings.Contains(s, "hand text") || !strings.Contains(s, "more hand text") {
		t.Errorf("updated page:\n%s", s)
	}
	os.WriteFile(f, []byte("no markers"), 0o644)
	if err := updateDocs(f, "x"); err == nil {
		t.Error("a page without markers was accepted")
	}
}

// Raw samples survive a round trip through raw.csv.
func TestRawRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r, err := newRecorder(dir)
	if err != nil {
		t.Fatal(err)
	}
	in := []sample{
		{Delay: 10 * time.Millisecond, Profile: "latency", Rep: 2, Peer: "boxfs", Row: "w1.visible", Value: 12.5, OK: true},
		{Profile: "issue", Rep: 1, Peer: "sshfs", Row: "w4.untar", OK: false, Note: "a, \"quoted\" note"},
		{Profile: "issue", Rep: 1, Peer: "sshfs", Row: "w6.stat", Value: 10000, OK: true, Censored: true},
	}
	for _, s := range in {
		r.add(s)
	}
	r.close()
	out, err := readRaw(filepath.Join(dir, "raw.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("read %d samples, wrote %d", len(out), len(in))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("sample %d: read %+v, wrote %+v", i, out[i], in[i])
		}
	}
}

// The watch's counts are read from facts.json as the daemon writes it; a
// box without them says so, and a torn file is an error.
func TestReadWatchCounts(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "facts.json")
	os.WriteFile(f, []byte(`{"provider": "docker", "freshness": "watch", "freshnessMs": 100,
  "watchReports": {"taken": 7, "echoes": 1234}, "commands": 2}`), 0o644)
	c, ok, err := readWatchCounts(f)
	if err != nil || !ok || c != (watchCounts{Taken: 7, Echoes: 1234}) {
		t.Errorf("readWatchCounts = %+v, %v, %v", c, ok, err)
	}
	os.WriteFile(f, []byte(`{"provider": "docker", "freshness": "timeout"}`), 0o644)
	if c, ok, err := readWatchCounts(f); err != nil || ok {
		t.Errorf("no watchReports: %+v, %v, %v", c, ok, err)
	}
	os.WriteFile(f, []byte(`{"provider": "doc`), 0o644)
	if _, _, err := readWatchCounts(f); err == nil {
		t.Error("a torn facts.json was read")
	}
	if _, _, err := readWatchCounts(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing facts.json was read")
	}
}

// At an added delay boxfs's config turns the Docker agent's direct
// channel off, and a mount whose facts.json names a direct channel anyway
// is refused.
func TestNoDirect(t *testing.T) {
	var cfg struct {
		Providers map[string]map[string]any `toml:"providers"`
	}
	if _, err := toml.Decode(noDirectConfig, &cfg); err != nil || cfg.Providers["docker"]["direct"] != "off" {
		t.Errorf("noDirectConfig %q: %+v, %v; want providers.docker.direct = \"off\"", noDirectConfig, cfg, err)
	}
	f := filepath.Join(t.TempDir(), "facts.json")
	for facts, ok := range map[string]bool{
		`{"provider": "docker", "agent": {"up": true, "directOff": "direct channel off: provider option direct=off"}}`: true,
		`{"provider": "docker"}`: true,
		`{"provider": "docker", "agent": {"up": true, "direct": "unix /proc/42/root"}}`: false,
		`{"provider": "doc`: false,
	} {
		os.WriteFile(f, []byte(facts), 0o644)
		if err := checkNoDirect(f); (err == nil) != ok {
			t.Errorf("checkNoDirect(%s) = %v, want ok %v", facts, err, ok)
		}
	}
}

// settle waits for the counts to stop moving, and gives up at its bound.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	calls := 0
	arriving := func() (watchCounts, error) {
		calls++
		return watchCounts{Echoes: uint64(min(calls, 4))}, nil
	}
	c, quiet, err := settle(ctx, arriving, 40*time.Millisecond, 5*time.Second)
	if err != nil || !quiet || c.Echoes != 4 {
		t.Errorf("settle = %+v, %v, %v; want the 4th count, quiet", c, quiet, err)
	}
	calls = 0
	endless := func() (watchCounts, error) {
		calls++
		return watchCounts{Taken: uint64(calls)}, nil
	}
	t0 := time.Now()
	c, quiet, err = settle(ctx, endless, 40*time.Millisecond, 200*time.Millisecond)
	if err != nil || quiet || c.Taken < 2 || time.Since(t0) > 2*time.Second {
		t.Errorf("settle on moving counts = %+v, %v, %v after %v; want not quiet, at the bound", c, quiet, err, time.Since(t0))
	}
}

// A count shows as it is, with no ratio to native, and stays out of the
// ratio tables; a peer with no count shows none.
func TestCountCells(t *testing.T) {
	g := group{sz: standardSizes, peers: []*peer{{name: "native"}, {name: "loopback"}, {name: "boxfs"}, {name: "sshfs"}}}
	ss := []sample{
		{Profile: "standard", Peer: "native", Row: "w4.untar", Value: 1, OK: true},
		{Profile: "standard", Peer: "boxfs", Row: "w4.untar", Value: 2, OK: true},
		{Profile: "standard", Peer: "loopback", Row: "w4.untar", Value: 1.5, OK: true},
		{Profile: "standard", Peer: "boxfs", Row: "watch.w4.untar.echoes", Value: 600, OK: true},
		{Profile: "standard", Peer: "boxfs", Row: "watch.w4.untar.echoes", Value: 603, OK: true},
		{Profile: "standard", Peer: "boxfs", Row: "watch.w4.untar.taken", Value: 40, OK: true},
	}
	tb := summarizeGroup(ss, g)
	if got := tb.cellText("watch.w4.untar.echoes", "boxfs", false, 0); got != "601.5" {
		t.Errorf("echoes = %q, want 601.5", got)
	}
	if got := tb.cellText("watch.w4.untar.taken", "boxfs", false, 0); got != "40" {
		t.Errorf("taken = %q, want 40", got)
	}
	if got := tb.cellText("watch.w4.untar.taken", "sshfs", false, 0); got != "—" {
		t.Errorf("sshfs taken = %q, want —", got)
	}
	var md strings.Builder
	tb.markdown(&md, false, 0)
	if !strings.Contains(md.String(), "| W4 untar: watch reports dropped as echoes | n | — | — | 601.5 | — |") {
		t.Errorf("table:\n%s", md.String())
	}
	var ratios strings.Builder
	tb.boxfsRatios(&ratios)
	tb.familyRatios(&ratios)
	if strings.Contains(ratios.String(), "watch reports") {
		t.Errorf("a count in the ratio tables:\n%s", ratios.String())
	}
	if got := (sample{Peer: "boxfs", Row: "watch.w1.taken", Value: 3, OK: true}).csv()[5]; got != "n" {
		t.Errorf("raw.csv unit of a count = %q", got)
	}
}

func TestRunFlagsProfiles(t *testing.T) {
	req := []string{"-boxfs", "b", "-loopback", "l", "-goroot", "g"}
	for _, tc := range []struct {
		args []string
		full []string
		lat  string
	}{
		{nil, []string{"standard"}, "latency"},
		{[]string{"-quick"}, []string{"quick", "quick-large"}, "quick-wan"},
		{[]string{"-sizes", "agent", "-lat-sizes", "agent"}, []string{"agent"}, "agent"},
		{[]string{"-quick", "-sizes", "agent", "-lat-sizes", "agent"}, []string{"quick-agent"}, "quick-agent"},
		{[]string{"-quick", "-sizes", "standard,large"}, []string{"quick", "quick-large"}, "quick-wan"},
	} {
		f, err := parseRunFlags(append(slices.Clone(req), tc.args...))
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		var full []string
		for _, z := range f.full {
			full = append(full, z.name)
		}
		if !slices.Equal(full, tc.full) || f.lat.name != tc.lat {
			t.Errorf("%q: sizes %q, lat-sizes %q; want %q, %q", tc.args, full, f.lat.name, tc.full, tc.lat)
		}
	}
	if _, err := parseRunFlags(append(slices.Clone(req), "-sizes", "latency")); err == nil {
		t.Error("-sizes latency (a seeded profile) was accepted")
	}
}
