package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// row is one line of the tables: a measured quantity.
type row struct {
	id    string
	unit  string // "s", "ms", or "n" (a count)
	label func(sizes) string
}

func fixed(s string) func(sizes) string { return func(sizes) string { return s } }

var rows = []row{
	{"w1.total", "s", fixed("W1 agent loop, total (list + grep + files)")},
	{"w1.list", "s", fixed("W1 list the tree (walk, skip .git)")},
	{"w1.grep", "s", fixed("W1 grep -rl a symbol")},
	{"w1.files", "s", func(z sizes) string {
		return fmt.Sprintf("W1 read %d files, %d edits (write temp + rename), read back", z.reads, z.edits)
	}},
	{"w1.visible", "ms", fixed("W1 edit: rename returned → new bytes in the box")},
	{"w2.commit", "s", func(z sizes) string {
		return fmt.Sprintf("W2 git init + add + commit, %s files", treeCount(z))
	}},
	{"w2.landed", "s", fixed("W2 commit complete in the box (fsck passes)")},
	{"w2.status.cold", "s", fixed("W2 git status, cold")},
	{"w2.status.warm", "s", fixed("W2 git status, warm")},
	{"w3.lslR.cold", "s", fixed("W3 ls -lR, cold")},
	{"w3.lslR.warm", "s", fixed("W3 ls -lR, warm")},
	{"w3.find.cold", "s", fixed("W3 find | wc -l, cold")},
	{"w3.find.warm", "s", fixed("W3 find | wc -l, warm")},
	{"w3.grep.cold", "s", fixed("W3 grep -rl a symbol, cold")},
	{"w3.grep.warm", "s", fixed("W3 grep -rl a symbol, warm")},
	{"w8.rmrf", "s", func(z sizes) string { return fmt.Sprintf("W8 rm -rf the %s-file tree", treeCount(z)) }},
	{"w4.untar", "s", func(z sizes) string { return fmt.Sprintf("W4 untar %s files", treeCount(z)) }},
	{"w4.untar.landed", "s", fixed("W4 untar: all files in the box")},
	{"w4.serial", "s", func(z sizes) string { return fmt.Sprintf("W4 create %s × 4 KiB, serial", thousands(z.smallFiles)) }},
	{"w4.serial.landed", "s", fixed("W4 serial: all in the box")},
	{"w4.parallel", "s", func(z sizes) string { return fmt.Sprintf("W4 create %s × 4 KiB, 4 writers", thousands(z.smallFiles)) }},
	{"w4.parallel.landed", "s", fixed("W4 4 writers: all in the box")},
	{"w5.write", "s", func(z sizes) string { return fmt.Sprintf("W5 write %d MiB (until close returns)", z.bigMiB) }},
	{"w5.landed", "s", fixed("W5 write: whole file in the box")},
	{"w5.read.cold", "s", fixed("W5 read back, cold")},
	{"w5.read.warm", "s", fixed("W5 read back, warm")},
	{"w6.stat", "ms", fixed("W6 box-side change → host stat sees it")},
	{"w6.cat", "ms", fixed("W6 box-side change → host read sees it")},
	{"w6.stat.exec", "ms", fixed("W6 change by the peer's exec → host stat sees it")},
	{"w6.cat.exec", "ms", fixed("W6 change by the peer's exec → host read sees it")},
	{"w7.exec", "ms", fixed("W7 run `true` (boxfs: exec file; docker-exec: docker exec)")},
	{"w9.sh", "ms", fixed("W9 `SHELL -c true` in bench/ (boxfs: boxfs sh; docker-exec: docker exec -i -w; native: bash)")},
	{"w10.turn", "ms", fixed("W10 agent turn: read + edit + bash, total")},
	{"w10.read", "ms", fixed("W10 read a file (docker-exec: exec cat)")},
	{"w10.edit", "ms", fixed("W10 edit: read, append a line, write back (docker-exec: exec cat, exec cat >)")},
	{"w10.bash", "ms", fixed("W10 bash `ls && cat FILE` in its directory, through SHELL (shows the edit)")},
	{"mount", "s", fixed("mount, cold (fresh mount + first listing)")},
	{"umount", "s", fixed("unmount (flush)")},
	{"probe", "ms", fixed("probe round trip (the floor under W1 'visible')")},
	// The boxfs peers' watch: of its reports during each write workload,
	// how many the mount dropped as echoes of its own writes, and how
	// many it took as news (F-echo, docs/design.md §6).
	{"watch.w4.untar.echoes", "n", fixed("W4 untar: watch reports dropped as echoes")},
	{"watch.w4.untar.taken", "n", fixed("W4 untar: watch reports taken")},
	{"watch.w4.serial.echoes", "n", fixed("W4 serial creates: watch reports dropped as echoes")},
	{"watch.w4.serial.taken", "n", fixed("W4 serial creates: watch reports taken")},
	{"watch.w4.parallel.echoes", "n", fixed("W4 4 writers: watch reports dropped as echoes")},
	{"watch.w4.parallel.taken", "n", fixed("W4 4 writers: watch reports taken")},
	{"watch.w2.commit.echoes", "n", fixed("W2 commit: watch reports dropped as echoes")},
	{"watch.w2.commit.taken", "n", fixed("W2 commit: watch reports taken")},
	{"watch.w1.echoes", "n", fixed("W1 agent loop (edits): watch reports dropped as echoes")},
	{"watch.w1.taken", "n", fixed("W1 agent loop (edits): watch reports taken")},
	{"watch.w5.write.echoes", "n", fixed("W5 write: watch reports dropped as echoes")},
	{"watch.w5.write.taken", "n", fixed("W5 write: watch reports taken")},
	{"watch.w8.rmrf.echoes", "n", fixed("W8 rm -rf: watch reports dropped as echoes")},
	{"watch.w8.rmrf.taken", "n", fixed("W8 rm -rf: watch reports taken")},
	{"watch.w10.echoes", "n", fixed("W10 agent turns (edits): watch reports dropped as echoes")},
	{"watch.w10.taken", "n", fixed("W10 agent turns (edits): watch reports taken")},
}

func rowUnit(id string) string {
	for _, r := range rows {
		if r.id == id {
			return r.unit
		}
	}
	return "s"
}

// treeCount is the number of files of a profile's tree, for labels.
func treeCount(z sizes) string {
	if z.allSrc && z.treeFiles == 0 {
		return "GOROOT/src's"
	}
	return thousands(z.treeFiles)
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	if len(s) > 3 {
		return s[:len(s)-3] + "," + s[len(s)-3:]
	}
	return s
}

// sample is one measurement. OK is false when its correctness check
// failed: then Value means nothing. Censored: the value is a lower bound
// (W6 gave up waiting).
type sample struct {
	Delay    time.Duration
	Profile  string
	Rep      int
	Peer     string
	Row      string
	Value    float64
	OK       bool
	Censored bool
	Note     string
}

var rawHeader = []string{"delay_ms", "profile", "rep", "peer", "row", "unit", "value", "status", "note"}

func (s sample) csv() []string {
	status := "ok"
	switch {
	case !s.OK:
		status = "FAIL"
	case s.Censored:
		status = "timeout"
	}
	v := strconv.FormatFloat(s.Value, 'f', 6, 64)
	if !s.OK {
		v = ""
	}
	return []string{strconv.FormatInt(s.Delay.Milliseconds(), 10), s.Profile, strconv.Itoa(s.Rep), s.Peer, s.Row, rowUnit(s.Row), v, status, s.Note}
}

// recorder keeps the samples and appends each to raw.csv as it comes, so a
// run that dies keeps what it measured.
type recorder struct {
	mu      sync.Mutex
	f       *os.File
	w       *csv.Writer
	samples []sample
}

func newRecorder(dir string) (*recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "raw.csv"))
	if err != nil {
		return nil, err
	}
	w := csv.NewWriter(f)
	w.Write(rawHeader)
	w.Flush()
	return &recorder{f: f, w: w}, nil
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	r.w.Write(s.csv())
	r.w.Flush()
}

func (r *recorder) close() { r.f.Close() }

// readRaw loads the samples of a raw.csv.
func readRaw(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || !slices.Equal(recs[0], rawHeader) {
		return nil, errors.New("not a boxbench raw.csv")
	}
	var out []sample
	for _, r := range recs[1:] {
		ms, _ := strconv.ParseInt(r[0], 10, 64)
		rep, _ := strconv.Atoi(r[2])
		v, _ := strconv.ParseFloat(r[6], 64)
		out = append(out, sample{Delay: time.Duration(ms) * time.Millisecond, Profile: r[1], Rep: rep, Peer: r[3], Row: r[4],
			Value: v, OK: r[7] != "FAIL", Censored: r[7] == "timeout", Note: r[8]})
	}
	return out, nil
}

// cell is the summary of one row on one peer in one group.
type cell struct {
	n, fails, censored int
	median, p95        float64 // +Inf when censored values reach them
	notes              []string
}

func (c cell) present() bool { return c.n+c.fails > 0 }
func (c cell) failed() bool  { return c.fails > 0 }

// quantile is the nearest-rank quantile of sorted xs.
func quantile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// median is the middle value, or the mean of the two middle values.
func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func summarize(ss []sample) cell {
	var c cell
	var xs []float64
	for _, s := range ss {
		if !s.OK {
			c.fails++
			if !slices.Contains(c.notes, s.Note) {
				c.notes = append(c.notes, s.Note)
			}
			continue
		}
		c.n++
		v := s.Value
		if s.Censored {
			c.censored++
			v = math.Inf(1)
		}
		xs = append(xs, v)
	}
	slices.Sort(xs)
	c.median, c.p95 = median(xs), quantile(xs, 0.95)
	return c
}

// table is the summary of one group: cells by row and peer.
type table struct {
	g     group
	peers []string
	cells map[string]map[string]cell // row -> peer
}

func summarizeGroup(all []sample, g group) table {
	t := table{g: g, cells: map[string]map[string]cell{}}
	by := map[[2]string][]sample{}
	for _, s := range all {
		if s.Delay != g.delay || s.Profile != g.sz.name {
			continue
		}
		by[[2]string{s.Row, s.Peer}] = append(by[[2]string{s.Row, s.Peer}], s)
	}
	for _, p := range g.peers {
		t.peers = append(t.peers, p.name)
	}
	for k, ss := range by {
		if t.cells[k[0]] == nil {
			t.cells[k[0]] = map[string]cell{}
		}
		t.cells[k[0]][k[1]] = summarize(ss)
	}
	return t
}

// fmtVal prints a value with about three significant digits.
func fmtVal(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "∞"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func fmtRatio(r float64) string {
	switch {
	case math.IsNaN(r) || math.IsInf(r, 0):
		return ""
	case r >= 100:
		return "×" + strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 10:
		return "×" + strconv.FormatFloat(r, 'f', 1, 64)
	default:
		return "×" + strconv.FormatFloat(r, 'f', 2, 64)
	}
}

// ratio is a/b for two cells that both have a finite median, else NaN.
func ratio(a, b cell) float64 {
	if !a.present() || !b.present() || a.failed() || b.failed() || a.n == 0 || b.n == 0 {
		return math.NaN()
	}
	if math.IsInf(a.median, 0) || math.IsInf(b.median, 0) || b.median <= 0 {
		return math.NaN()
	}
	return a.median / b.median
}

func (t table) cellText(rowID, peer string, p95 bool, timeout time.Duration) string {
	c, ok := t.cells[rowID][peer]
	if !ok || !c.present() {
		return "—"
	}
	if c.failed() {
		return fmt.Sprintf("FAIL (%d/%d)", c.fails, c.fails+c.n)
	}
	v := c.median
	if p95 {
		v = c.p95
	}
	if math.IsInf(v, 1) {
		return fmt.Sprintf(">%v (stale)", timeout)
	}
	if rowUnit(rowID) == "n" {
		// A count: as it is (a median of two may end in .5), and no
		// ratio to native, which has no mount to count on.
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	s := fmtVal(v)
	if !p95 && peer != "native" {
		if r := ratio(c, t.cells[rowID]["native"]); !math.IsNaN(r) && r > 0 {
			s += " " + fmtRatio(r)
		}
	}
	if c.censored > 0 {
		s += fmt.Sprintf(" (%d stale)", c.censored)
	}
	return s
}

func (t table) markdown(b *strings.Builder, p95 bool, timeout time.Duration) {
	fmt.Fprintf(b, "| workload | unit | %s |\n", strings.Join(t.peers, " | "))
	fmt.Fprintf(b, "|---|---|%s\n", strings.Repeat("---:|", len(t.peers)))
	for _, r := range rows {
		if _, ok := t.cells[r.id]; !ok {
			continue
		}
		var cs []string
		for _, p := range t.peers {
			cs = append(cs, t.cellText(r.id, p, p95, timeout))
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", r.label(t.g.sz), r.unit, strings.Join(cs, " | "))
	}
}

// boxfsRatios is the closing table: boxfs's median over each other peer's.
func (t table) boxfsRatios(b *strings.Builder) {
	others := []string{"native", "loopback", "sshfs", "rclone-off", "rclone-writes", "docker-exec"}
	var cols []string
	for _, o := range others {
		if slices.Contains(t.peers, o) {
			cols = append(cols, o)
		}
	}
	fmt.Fprintf(b, "| workload | boxfs | %s |\n", strings.Join(prefixAll("÷ ", cols), " | "))
	fmt.Fprintf(b, "|---|---:|%s\n", strings.Repeat("---:|", len(cols)))
	for _, r := range rows {
		bc, ok := t.cells[r.id]["boxfs"]
		if !ok || r.id == "probe" || r.unit == "n" {
			continue
		}
		var cs []string
		for _, o := range cols {
			oc, ok := t.cells[r.id][o]
			switch {
			case !ok || !oc.present():
				cs = append(cs, "—")
			case oc.failed():
				cs = append(cs, "(FAIL)")
			case bc.failed():
				cs = append(cs, "FAIL")
			default:
				rt := ratio(bc, oc)
				if math.IsNaN(rt) {
					cs = append(cs, "n/a")
				} else {
					cs = append(cs, strings.TrimPrefix(fmtRatio(rt), "×"))
				}
			}
		}
		fmt.Fprintf(b, "| %s | %s %s | %s |\n", r.label(t.g.sz), t.cellText(r.id, "boxfs", false, 0), r.unit, strings.Join(cs, " | "))
	}
}

// boxfsPeers are the boxfs peers the ratio tables divide.
var boxfsPeers = []string{"boxfs-local", "boxfs", "boxfs-behind"}

// familyRatios is each boxfs peer's median over loopback's (the FUSE
// ceiling) and sshfs's, when the table has them.
func (t table) familyRatios(b *strings.Builder) {
	var mine, cols []string
	for _, p := range boxfsPeers {
		if slices.Contains(t.peers, p) {
			mine = append(mine, p)
		}
	}
	for _, o := range []string{"loopback", "sshfs"} {
		if slices.Contains(t.peers, o) {
			cols = append(cols, o)
		}
	}
	if len(mine) == 0 || len(cols) == 0 {
		return
	}
	var heads []string
	for _, p := range mine {
		for _, o := range cols {
			heads = append(heads, p+" ÷ "+o)
		}
	}
	fmt.Fprintf(b, "\nThe boxfs peers' medians divided by the FUSE ceiling's and by sshfs's (below 1: faster):\n\n")
	fmt.Fprintf(b, "| workload | %s |\n|---|%s\n", strings.Join(heads, " | "), strings.Repeat("---:|", len(heads)))
	for _, r := range rows {
		if _, ok := t.cells[r.id]; !ok || r.id == "probe" || r.unit == "n" {
			continue
		}
		var cs []string
		for _, p := range mine {
			for _, o := range cols {
				cs = append(cs, ratioText(t.cells[r.id][p], t.cells[r.id][o]))
			}
		}
		fmt.Fprintf(b, "| %s | %s |\n", r.label(t.g.sz), strings.Join(cs, " | "))
	}
}

// ratioText is a's median over b's, or why there is none.
func ratioText(a, b cell) string {
	switch {
	case !a.present() || !b.present():
		return "—"
	case a.failed() || b.failed():
		return "FAIL"
	}
	if r := ratio(a, b); !math.IsNaN(r) {
		return strings.TrimPrefix(fmtRatio(r), "×")
	}
	return "n/a"
}

// crossTables compares groups of one run: each peer's time per file on
// the large tree over its time per file on the standard one (flat is 1),
// and each latency group's times over the same work without delay, with
// the round trips a serial create costs.
func crossTables(b *strings.Builder, all []sample, groups []group) {
	find := func(delay time.Duration, profile string) (table, bool) {
		for _, g := range groups {
			if g.delay == delay && g.sz.name == profile {
				return summarizeGroup(all, g), true
			}
		}
		return table{}, false
	}
	large, okL := find(0, "large")
	std, okS := find(0, "standard")
	if okL && okS {
		fmt.Fprintf(b, "Per-file time on the %s-file tree over per-file time on the %s-file tree (1 is flat):\n\n",
			thousands(large.g.sz.treeFiles), thousands(std.g.sz.treeFiles))
		fmt.Fprintf(b, "| workload | %s |\n|---|%s\n", strings.Join(std.peers, " | "), strings.Repeat("---:|", len(std.peers)))
		for _, row := range []struct{ id, label string }{{"w4.untar", "W4 untar"}, {"w2.commit", "W2 git init + add + commit"}} {
			id := row.id
			var cs []string
			for _, p := range std.peers {
				l, s := large.cells[id][p], std.cells[id][p]
				r := ratio(l, s) * float64(std.g.sz.treeFiles) / float64(large.g.sz.treeFiles)
				if math.IsNaN(r) {
					cs = append(cs, "—")
				} else {
					cs = append(cs, strings.TrimPrefix(fmtRatio(r), "×"))
				}
			}
			fmt.Fprintf(b, "| %s | %s |\n", row.label, strings.Join(cs, " | "))
		}
		fmt.Fprintln(b)
	}
	for _, g := range groups {
		shellCost(b, summarizeGroup(all, g))
	}
	for _, g := range groups {
		if g.delay == 0 || g.sz.name != "wan" || !okS {
			continue
		}
		t := summarizeGroup(all, g)
		fmt.Fprintf(b, "With %v per round trip over without (the same tree and files; W5: %d MiB at %v, %d MiB without), and round trips per serially created file:\n\n",
			g.delay, g.sz.bigMiB, g.delay, std.g.sz.bigMiB)
		fmt.Fprintf(b, "| peer | untar %d files | serial creates | round trips per created file |\n|---|---:|---:|---:|\n", g.sz.treeFiles)
		for _, p := range t.peers {
			rt := "—"
			if c := t.cells["w4.serial"][p]; c.present() && !c.failed() && c.n > 0 {
				rt = fmtVal(c.median / (float64(g.sz.smallFiles) * g.delay.Seconds()))
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", p, ratioText(t.cells["w4.untar"][p], std.cells["w4.untar"][p]),
				"(per file) "+perFile(t.cells["w4.serial"][p], g.sz.smallFiles, std.cells["w4.serial"][p], std.g.sz.smallFiles), rt)
		}
		fmt.Fprintln(b)
	}
}

// shellCost is, for each peer with both, W9 (true through the shell) less
// W7 (true on the peer's command channel): what the shell's start adds to
// the command, in ms and, with a delay, in round trips of it.
func shellCost(b *strings.Builder, t table) {
	var lines []string
	for _, p := range t.peers {
		sh, ex := t.cells["w9.sh"][p], t.cells["w7.exec"][p]
		if math.IsNaN(ratio(sh, ex)) {
			continue
		}
		d := sh.median - ex.median
		rt := "—"
		if t.g.delay > 0 {
			rt = strconv.FormatFloat(d/float64(t.g.delay.Milliseconds()), 'f', 2, 64)
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s |\n", p, fmtVal(sh.median), fmtVal(ex.median), strconv.FormatFloat(d, 'f', 1, 64), rt))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "%s: W9 (`true` through the shell) less W7 (`true` on the peer's command channel), medians in ms:\n\n", strings.ToUpper(t.g.title()[:1])+t.g.title()[1:])
	fmt.Fprintf(b, "| peer | W9 shell | W7 command | shell's cost | in round trips of the delay |\n|---|---:|---:|---:|---:|\n%s\n", strings.Join(lines, ""))
}

// perFile is a's median per file over b's.
func perFile(a cell, an int, b cell, bn int) string {
	r := ratio(a, b) * float64(bn) / float64(an)
	if math.IsNaN(r) {
		return "—"
	}
	return strings.TrimPrefix(fmtRatio(r), "×")
}

func prefixAll(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + x
	}
	return out
}

// writeReport writes summary.csv and results.md and returns the Markdown.
func writeReport(dir string, all []sample, groups []group, m *meta) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s (%s), wall clock %s. Median of the repetitions, ×N = ratio to native's median in the same table; "+
		"FAIL = a correctness check failed in k of n repetitions (no time is shown); — = not run on that peer; "+
		"unit n = a count (the boxfs mounts' watch reports during a write workload).\n\n",
		metaVal(m, "date"), metaVal(m, "machine"), metaVal(m, "wall clock"))
	fmt.Fprintf(&b, "Command: `sudo bench/run` (`%s`). Versions: boxfs %s; go-fuse %s (loopback); %s, %s; %s; Docker %s; %s on the host; tree %s. "+
		"Load average at start %s, at end %s.\n\n",
		metaVal(m, "command"), strings.TrimPrefix(metaVal(m, "boxfs"), "boxfs "), metaVal(m, "go-fuse (loopback)"), metaVal(m, "sshfs"), metaVal(m, "libfuse"),
		metaVal(m, "rclone"), metaVal(m, "docker"), metaVal(m, "git (host)"), metaVal(m, "tree"),
		loadShort(metaVal(m, "load average at start")), loadShort(metaVal(m, "load average at end")))
	sf, err := os.Create(filepath.Join(dir, "summary.csv"))
	if err != nil {
		return "", err
	}
	defer sf.Close()
	sw := csv.NewWriter(sf)
	sw.Write([]string{"delay_ms", "profile", "row", "label", "unit", "peer", "n_ok", "n_fail", "n_stale", "median", "p95", "ratio_to_native", "fail_notes"})
	for _, g := range groups {
		t := summarizeGroup(all, g)
		fmt.Fprintf(&b, "### %s\n\n", strings.ToUpper(g.title()[:1])+g.title()[1:])
		var done []string
		for _, p := range g.peers {
			d := fmt.Sprintf("%s %d", p.name, g.done[p.name])
			if g.skipped[p.name] > 0 {
				d += fmt.Sprintf(" (%d left out for time)", g.skipped[p.name])
			}
			done = append(done, d)
		}
		asked := fmt.Sprintf("asked %d", g.reps)
		if sn := slowNames(g); sn != "" && g.slowReps < g.reps {
			asked += fmt.Sprintf("; at most %d for %s", g.slowReps, sn)
		}
		fmt.Fprintf(&b, "Repetitions run (%s): %s. Median:\n\n", asked, strings.Join(done, ", "))
		t.markdown(&b, false, timeoutOf(m))
		fmt.Fprintf(&b, "\np95 (nearest rank; with 5 samples or fewer it is the largest):\n\n")
		t.markdown(&b, true, timeoutOf(m))
		if slices.Contains(t.peers, "boxfs") {
			fmt.Fprintf(&b, "\nboxfs's median divided by each peer's (below 1: boxfs is faster):\n\n")
			t.boxfsRatios(&b)
		}
		t.familyRatios(&b)
		fmt.Fprintln(&b)
		for _, r := range rows {
			for _, p := range t.peers {
				c, ok := t.cells[r.id][p]
				if !ok {
					continue
				}
				rt := ratio(c, t.cells[r.id]["native"])
				sw.Write([]string{strconv.FormatInt(g.delay.Milliseconds(), 10), g.sz.name, r.id, r.label(g.sz), r.unit, p,
					strconv.Itoa(c.n), strconv.Itoa(c.fails), strconv.Itoa(c.censored),
					csvFloat(c.median), csvFloat(c.p95), csvFloat(rt), strings.Join(c.notes, " | ")})
			}
		}
	}
	crossTables(&b, all, groups)
	fmt.Fprintf(&b, "Failures, by peer and workload (first note of each):\n\n")
	nf := 0
	seen := map[string]bool{}
	for _, s := range all {
		if s.OK || seen[s.Peer+s.Row+strconv.FormatInt(s.Delay.Milliseconds(), 10)] {
			continue
		}
		seen[s.Peer+s.Row+strconv.FormatInt(s.Delay.Milliseconds(), 10)] = true
		nf++
		fmt.Fprintf(&b, "- %s, %s, %v added, rep %d: %s\n", s.Peer, s.Row, s.Delay, s.Rep, clip(s.Note, 300))
	}
	if nf == 0 {
		fmt.Fprintf(&b, "- none\n")
	}
	sw.Flush()
	if err := sw.Error(); err != nil {
		return "", err
	}
	md := b.String()
	return md, os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644)
}

// loadShort keeps the three load averages of a /proc/loadavg line.
func loadShort(l string) string {
	f := strings.Fields(l)
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return l
}

func slowNames(g group) string {
	var slow []string
	for _, p := range g.peers {
		if p.slow {
			slow = append(slow, p.name)
		}
	}
	return strings.Join(slow, ", ")
}

func csvFloat(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	if math.IsInf(v, 1) {
		return "inf"
	}
	return strconv.FormatFloat(v, 'f', 6, 64)
}

func metaVal(m *meta, k string) string {
	if i := slices.Index(m.keys, k); i >= 0 {
		return m.vals[i]
	}
	return ""
}

func timeoutOf(m *meta) time.Duration {
	d, _ := time.ParseDuration(metaVal(m, "flag -fresh-timeout"))
	return d
}

// Markers around the generated section of docs/benchmarks.md.
const (
	docsBegin = "<!-- boxbench:results:begin -->"
	docsEnd   = "<!-- boxbench:results:end -->"
)

// updateDocs replaces the text between the markers in file with md.
func updateDocs(file, md string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, docsBegin), strings.Index(s, docsEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section", file, docsBegin, docsEnd)
	}
	s = s[:i+len(docsBegin)] + "\n\n" + md + "\n" + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}

// peerOrder is the order of the tables' columns.
var peerOrder = []string{"native", "loopback", "boxfs-local", "boxfs", "boxfs-behind", "boxfs-k8s", "sshfs", "rclone-off", "rclone-writes", "docker-exec"}

// reportMain is `boxbench report [-docs FILE] DIR`: the tables again from
// DIR's raw.csv and meta.txt.
func reportMain(args []string) error {
	fl := flag.NewFlagSet("report", flag.ContinueOnError)
	docs := fl.String("docs", "", "a Markdown file whose results section is replaced")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return errors.New("usage: boxbench report [-docs FILE] RESULTS_DIR")
	}
	dir := fl.Arg(0)
	all, err := readRaw(filepath.Join(dir, "raw.csv"))
	if err != nil {
		return err
	}
	m, err := readMeta(filepath.Join(dir, "meta.txt"))
	if err != nil {
		return err
	}
	byName := map[string]sizes{}
	for _, z := range profiles {
		byName[z.name] = z
	}
	atoi := func(k string) int { n, _ := strconv.Atoi(metaVal(m, k)); return n }
	slow := strings.Split(metaVal(m, "flag -slow"), ",")
	var groups []group
	index := map[[2]string]int{}
	reps := map[[2]string]map[string]map[int]bool{}
	for _, s := range all {
		k := [2]string{s.Delay.String(), s.Profile}
		i, ok := index[k]
		if !ok {
			z, known := byName[s.Profile]
			if !known {
				return fmt.Errorf("raw.csv: unknown profile %q", s.Profile)
			}
			if z.treeFiles == 0 {
				// All of GOROOT/src: as many files as the run's Go had,
				// which meta.txt says ("tree (large): 11478 files, ...").
				n, _, _ := strings.Cut(metaVal(m, "tree ("+z.name+")"), " ")
				z.treeFiles, _ = strconv.Atoi(n)
			}
			g := group{delay: s.Delay, sz: z, reps: atoi("flag -reps"), slowReps: atoi("flag -slow-reps"), done: map[string]int{}, skipped: map[string]int{}}
			if s.Delay > 0 {
				g.reps, g.slowReps = atoi("flag -delay-reps"), atoi("flag -delay-reps")
			}
			groups = append(groups, g)
			i = len(groups) - 1
			index[k] = i
			reps[k] = map[string]map[int]bool{}
		}
		if reps[k][s.Peer] == nil {
			reps[k][s.Peer] = map[int]bool{}
		}
		reps[k][s.Peer][s.Rep] = true
		_ = i
	}
	for k, i := range index {
		for _, kv := range strings.Split(metaVal(m, "left out for time "+k[0]+"/"+k[1]), ",") {
			if name, n, ok := strings.Cut(kv, ":"); ok {
				groups[i].skipped[name], _ = strconv.Atoi(n)
			}
		}
		for _, name := range peerOrder {
			if r, ok := reps[k][name]; ok {
				groups[i].peers = append(groups[i].peers, &peer{name: name, slow: slices.Contains(slow, name)})
				groups[i].done[name] = len(r)
			}
		}
	}
	md, err := writeReport(dir, all, groups, m)
	if err != nil {
		return err
	}
	if *docs != "" {
		if err := updateDocs(*docs, md); err != nil {
			return err
		}
	}
	fmt.Print(md)
	return nil
}

// readMeta reads a meta.txt back.
func readMeta(path string) (*meta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &meta{}
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		k, v, ok := strings.Cut(l, ": ")
		if ok {
			m.add(k, v)
		}
	}
	return m, nil
}
