package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

// boxWorkspace is the bench container's workspace, which every box peer
// presents.
const boxWorkspace = "/workspace"

// sizes are one profile's workload sizes.
type sizes struct {
	name       string
	treeFiles  int // W4 untar, W2, W3, W1
	smallFiles int // W4 create, each of serial and 4-parallel
	bigMiB     int // W5
	reads      int // W1 files read
	edits      int // W1 edits
	fresh      int // W6 samples per repetition
	execs      int // W7 and W9 samples, W10 turns, per repetition
	// seeded: the tree is put into the box off the clock, and the untar
	// and commit are not measured (the latency runs, which could not
	// afford them).
	seeded bool
	// suite is the workloads run: "" every one (W1-W7), suiteTree the
	// tree workloads of a real-size repository, suiteWAN what latency
	// costs most (untar, serial creates, the large file).
	suite string
	// allSrc: the tree is every file of GOROOT/src, treeFiles ignored.
	allSrc bool
}

// The suites besides the full one.
const (
	suiteTree = "tree"
	suiteWAN  = "wan"
	suiteBig  = "big" // the large file alone
	// suiteAgent is an agent host's commands and turns (W7, W9, W10) on a
	// tree seeded off the clock.
	suiteAgent = "agent"
)

// The profiles. "issue" has the sizes the benchmark issue names; a full
// run of it takes well over the 30 minutes bench/run is meant to fit on a
// shared 2-core machine, so the default is "standard" (a fifth of the files,
// an eighth of the large file), and the latency runs use "latency", whose
// tree is seeded into the box off the clock.
var (
	issueSizes    = sizes{"issue", 3000, 1000, 256, 20, 5, 2, 20, false, "", false}
	standardSizes = sizes{"standard", 600, 200, 32, 20, 5, 2, 10, false, "", false}
	latencySizes  = sizes{"latency", 60, 10, 4, 10, 3, 1, 5, true, "", false}
	quickSizes    = sizes{"quick", 100, 40, 4, 6, 2, 2, 4, false, "", false}
	quickLatency  = sizes{"quick-latency", 60, 10, 4, 6, 2, 1, 4, true, "", false}
	// largeSizes is a real-size repository: all of GOROOT/src (11,478
	// files with go1.26), the tree workloads only, and the 256 MiB file.
	largeSizes = sizes{name: "large", smallFiles: 200, bigMiB: 256, suite: suiteTree, allSrc: true}
	// wanSizes is the standard tree's untar, serial creates and the 256 MiB
	// file, for the latency runs.
	wanSizes = sizes{name: "wan", treeFiles: 600, smallFiles: 20, bigMiB: 256, suite: suiteWAN}
	// bigSizes is the 256 MiB file alone, written and read cold.
	bigSizes   = sizes{name: "big", treeFiles: 1, bigMiB: 256, suite: suiteBig}
	quickLarge = sizes{name: "quick-large", treeFiles: 300, smallFiles: 20, bigMiB: 8, suite: suiteTree}
	quickWAN   = sizes{name: "quick-wan", treeFiles: 60, smallFiles: 5, bigMiB: 4, suite: suiteWAN}
	// agentSizes is W7, W9 and W10 alone, 20 samples each, on the
	// latency profile's seeded tree: at no delay and at the delays.
	agentSizes = sizes{name: "agent", treeFiles: 60, reads: 10, execs: 20, seeded: true, suite: suiteAgent}
	quickAgent = sizes{name: "quick-agent", treeFiles: 60, reads: 6, execs: 4, seeded: true, suite: suiteAgent}
	profiles   = []sizes{issueSizes, standardSizes, latencySizes, quickSizes, quickLatency, largeSizes, wanSizes, bigSizes, quickLarge, quickWAN, agentSizes, quickAgent}
)

// quickOf is the profile -quick puts in place of z: the same workloads,
// tiny.
func quickOf(z sizes) sizes {
	switch z.name {
	case "large":
		return quickLarge
	case "wan", "big":
		return quickWAN
	case "latency":
		return quickLatency
	case "agent":
		return quickAgent
	}
	return quickSizes
}

// profileNamed returns the profile called name.
func profileNamed(name string) (sizes, bool) {
	for _, z := range profiles {
		if z.name == name {
			return z, true
		}
	}
	return sizes{}, false
}

// run is one invocation of `boxbench run`.
type run struct {
	work, out, logDir string
	self              string // this binary: the sftp wrapper, gate and proxy
	boxfsBin          string
	loopbackBin       string
	emptyConf         string // boxfs --config
	rcloneConf        string // rclone --config
	// noDirectConf is boxfs's --config at an added delay: the Docker
	// agent's requests stay on the exec, through the delay proxy.
	noDirectConf string

	ctr        string // the bench container's id
	pod        string // the bench pod's name (boxfs-k8s), and its cluster
	kubeconfig string
	hostProbe  *probe
	boxProbe   *probe

	delay     time.Duration
	proxySock string // "" at no delay
	proxy     *daemon
	gate      *daemon
	gatePort  int
	gateKey   string

	freshTimeout time.Duration
	rec          *recorder
}

// runFlags are the run command's settings.
type runFlags struct {
	fl                        *flag.FlagSet
	out, work                 string
	reps, slowReps, delayReps int
	delays                    []time.Duration
	peers, slow               []string
	boxfsBin, loopbackBin     string
	goroot                    string
	full                      []sizes // the groups without added delay
	lat                       sizes
	skipBase, quick           bool
	budget, freshTimeout      time.Duration
	docs                      string
}

// parseRunFlags reads the run command's flags.
func parseRunFlags(args []string) (*runFlags, error) {
	f := &runFlags{fl: flag.NewFlagSet("run", flag.ContinueOnError)}
	fl := f.fl
	fl.StringVar(&f.out, "out", "", "results directory (default bench/results/STAMP)")
	fl.StringVar(&f.work, "work", "/tmp/boxbench", "scratch directory: boxes, mounts, state, logs of daemons")
	fl.IntVar(&f.reps, "reps", 5, "repetitions of every workload on every peer (no delay)")
	fl.IntVar(&f.slowReps, "slow-reps", 3, "repetitions for the slow peers (rclone-off)")
	fl.IntVar(&f.delayReps, "delay-reps", 3, "repetitions in each latency-injection run")
	delays := fl.String("delays", "10ms,50ms", "latency-injection runs: delays added per box round trip, comma-separated (\"\" for none)")
	peerList := fl.String("peers", "native,loopback,boxfs-local,boxfs,boxfs-behind,boxfs-k8s,sshfs,rclone-off,rclone-writes,docker-exec", "peers to run")
	fl.StringVar(&f.boxfsBin, "boxfs", "", "boxfs binary (CGO_ENABLED=0 go build ./cmd/boxfs)")
	fl.StringVar(&f.loopbackBin, "loopback", "", "loopback binary (go build ./bench/loopback)")
	fl.StringVar(&f.goroot, "goroot", "", "GOROOT whose src/ the tree is taken from (go env GOROOT)")
	profile := fl.String("sizes", "standard", "workload sizes with no added delay, a comma list (a table each): standard (600-file tree, 200 small files, 32 MiB), issue (3,000, 1,000, 256 MiB; much longer), large (all of GOROOT/src, tree workloads, 256 MiB), agent (W7, W9 and W10 alone)")
	latProfile := fl.String("lat-sizes", "latency", "workload sizes of the latency runs: latency (a 60-file tree seeded off the clock), wan (the 600-file untar, serial creates, 256 MiB), big (256 MiB alone) or agent (W7, W9 and W10 alone)")
	slowList := fl.String("slow", "rclone-off,rclone-writes", "peers that run only -slow-reps repetitions")
	fl.BoolVar(&f.skipBase, "skip-base", false, "run only the latency-injection runs")
	fl.DurationVar(&f.budget, "budget", 25*time.Minute, "time for the measurements: after one repetition of everything, further repetitions run while the estimate says they fit")
	fl.BoolVar(&f.quick, "quick", false, "tiny sizes and one repetition: a smoke test of the harness, not a result")
	fl.StringVar(&f.docs, "docs", "", "a Markdown file whose results section is replaced by this run's tables")
	fl.DurationVar(&f.freshTimeout, "fresh-timeout", 5*time.Second, "W6: how long to wait for a box-side change to show on the host")
	if err := fl.Parse(args); err != nil {
		return nil, err
	}
	if f.boxfsBin == "" || f.loopbackBin == "" || f.goroot == "" {
		return nil, errors.New("run: -boxfs, -loopback and -goroot are required (bench/run sets them)")
	}
	for _, name := range strings.Split(*profile, ",") {
		z, ok := profileNamed(strings.TrimSpace(name))
		if !ok || z.seeded && z.suite != suiteAgent {
			return nil, fmt.Errorf("run: -sizes %q: want standard, issue, large, big or agent", name)
		}
		f.full = append(f.full, z)
	}
	var ok bool
	if f.lat, ok = profileNamed(*latProfile); !ok {
		return nil, fmt.Errorf("run: -lat-sizes %q: want latency, wan, big or agent", *latProfile)
	}
	if f.quick {
		set := map[string]bool{}
		fl.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		// The named profiles made tiny; by default the standard and
		// large ones, and wan at the delays.
		if set["sizes"] {
			for i, z := range f.full {
				f.full[i] = quickOf(z)
			}
		} else {
			f.full = []sizes{quickSizes, quickLarge}
		}
		if set["lat-sizes"] {
			f.lat = quickOf(f.lat)
		} else {
			f.lat = quickWAN
		}
		for name, v := range map[string]*int{"reps": &f.reps, "slow-reps": &f.slowReps, "delay-reps": &f.delayReps} {
			if !set[name] {
				*v = 1
			}
		}
	}
	for _, s := range strings.Split(*delays, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("run: -delays: %q is not a positive duration", s)
		}
		f.delays = append(f.delays, d)
	}
	for _, n := range strings.Split(*peerList, ",") {
		f.peers = append(f.peers, strings.TrimSpace(n))
	}
	f.slow = strings.Split(*slowList, ",")
	if f.out == "" {
		f.out = filepath.Join("bench", "results", time.Now().UTC().Format("20060102-150405"))
	}
	return f, nil
}

func runMain(args []string) error {
	f, err := parseRunFlags(args)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	r := &run{
		work: f.work, out: f.out, logDir: filepath.Join(f.out, "logs"), self: self,
		boxfsBin: f.boxfsBin, loopbackBin: f.loopbackBin, freshTimeout: f.freshTimeout,
	}
	unlock, err := r.prepare()
	if err != nil {
		return err
	}
	defer unlock()
	defer r.rec.close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	meta := collectMeta(ctx, r, f.fl, args)
	log.Printf("results in %s", r.out)
	dsFull, dsLat, err := datasets(r, f, meta)
	if err != nil {
		return err
	}
	destroy, err := r.startBox(ctx, meta)
	if err != nil {
		return err
	}
	defer destroy()
	peers, err := r.peers(f, meta)
	if err != nil {
		return err
	}
	for _, p := range peers {
		if p.name == k8sPeer {
			destroy, err := r.k8sBox(ctx, p)
			if err != nil {
				return err
			}
			defer destroy()
			meta.add("pod", r.pod)
		}
	}
	defer r.stopHelpers()
	defer func() {
		for _, p := range peers {
			if p.d != nil {
				p.unmount(context.Background(), r)
			}
		}
	}()

	groups := plan(f, peers, dsFull, dsLat)
	gs := make([]*group, len(groups))
	for i := range groups {
		gs[i] = &groups[i]
	}
	err = r.schedule(ctx, gs, started.Add(f.budget))
	r.stopHelpers()
	for _, p := range peers {
		if p.finish != nil {
			p.finish(r)
		}
	}
	if err != nil {
		return err
	}
	return r.report(f, groups, meta, started)
}

// prepare makes the run's directories, locks its scratch directory
// against another run (the returned func unlocks it), clears what a
// crashed run left, and opens the recorder.
func (r *run) prepare() (unlock func(), err error) {
	for _, d := range []string{r.logDir, filepath.Join(r.work, "mnt"), filepath.Join(r.work, "box"), filepath.Join(r.work, "state"), filepath.Join(r.work, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	lock, err := os.OpenFile(filepath.Join(r.work, "run.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("another boxbench run is using %s (its mounts, ports and boxes would collide): %v", r.work, err)
	}
	cleanupStale(r.work)
	r.emptyConf = filepath.Join(r.work, "boxfs-empty.toml")
	r.rcloneConf = filepath.Join(r.work, "rclone-empty.conf")
	for _, f := range []string{r.emptyConf, r.rcloneConf} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			lock.Close()
			return nil, err
		}
	}
	r.noDirectConf = filepath.Join(r.work, "boxfs-nodirect.toml")
	if err := os.WriteFile(r.noDirectConf, []byte(noDirectConfig), 0o644); err != nil {
		lock.Close()
		return nil, err
	}
	if r.rec, err = newRecorder(r.out); err != nil {
		lock.Close()
		return nil, err
	}
	return func() { lock.Close() }, nil
}

// datasets builds the tree tars of the runs with no delay (one per
// profile) and of the latency runs.
func datasets(r *run, f *runFlags, meta *meta) (full []*dataset, lat *dataset, err error) {
	log.Printf("dataset: building the tree tars from %s/src", f.goroot)
	for i, z := range append(slices.Clone(f.full), f.lat) {
		ds, err := makeDataset(r.work, f.goroot, z)
		if err != nil {
			return nil, nil, err
		}
		if z.allSrc {
			z.treeFiles = len(ds.files)
			if i < len(f.full) {
				f.full[i] = z
			} else {
				f.lat = z
			}
		}
		what := fmt.Sprintf("first %d of GOROOT/src/{%s}, sorted", z.treeFiles, strings.Join(treeDirs, ","))
		if z.allSrc {
			what = "all of GOROOT/src"
		}
		meta.add("tree ("+z.name+")", fmt.Sprintf("%d files, %d bytes, %s (%s); symbol %q in %d files",
			len(ds.files), ds.bytes, what, ds.goVersion, symbol, len(ds.grepHits)))
		if len(full) < len(f.full) {
			full = append(full, ds)
		} else {
			lat = ds
		}
	}
	return full, lat, nil
}

// startBox makes the one container every box peer presents and the
// probes on the host and in it; the returned func ends them.
func (r *run) startBox(ctx context.Context, meta *meta) (end func(), err error) {
	prov, err := docker.New(providers.Config{})
	if err != nil {
		return nil, err
	}
	box, err := prov.Create(ctx, providers.Spec{Labels: map[string]string{"boxfs-bench": "run"}, Lifetime: 3 * time.Hour})
	if err != nil {
		prov.Close()
		return nil, fmt.Errorf("creating the bench container (is the engine up? scripts/docker-up): %w", err)
	}
	r.ctr = box.ID()
	meta.add("container", r.ctr)
	r.hostProbe = newProbe("env")
	r.boxProbe = newProbe("docker", "exec", "-i", r.ctr)
	end = func() {
		r.boxProbe.close()
		r.hostProbe.close()
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := box.Destroy(dctx); err != nil {
			log.Printf("destroying the bench container: %v", err)
		}
		prov.Close()
	}
	if _, err := r.boxProbe.ok(ctx, "test -x "+sftpServer+" && command -v git && mkdir -p "+boxWorkspace); err != nil {
		end()
		return nil, fmt.Errorf("bench image: %v", err)
	}
	return end, nil
}

// peers are the peers the flags name, in their order.
func (r *run) peers(f *runFlags, meta *meta) ([]*peer, error) {
	all := map[string]*peer{}
	for _, p := range []*peer{nativePeer(r), loopbackPeer(r), boxfsPeer(r, "local", ""), boxfsPeer(r, "docker", ""),
		boxfsPeer(r, "docker", "behind"), boxfsPeer(r, "kubernetes", ""),
		sshfsPeer(r), rclonePeer(r, "off", 15572), rclonePeer(r, "writes", 15573), dockerExecPeer(r)} {
		all[p.name] = p
	}
	var peers []*peer
	for _, n := range f.peers {
		p, ok := all[n]
		if !ok {
			return nil, fmt.Errorf("run: unknown peer %q", n)
		}
		p.slow = slices.Contains(f.slow, p.name)
		meta.add("peer "+p.name, p.about)
		peers = append(peers, p)
	}
	return peers, nil
}

// plan makes the tables: every peer with no added delay (unless
// -skip-base), then the box peers and native at each delay.
func plan(f *runFlags, peers []*peer, dsFull []*dataset, dsLat *dataset) []group {
	var groups []group
	if !f.skipBase {
		for i, z := range f.full {
			groups = append(groups, group{delay: 0, sz: z, ds: dsFull[i], reps: f.reps, slowReps: f.slowReps, peers: peers})
		}
	}
	var delayed []*peer
	for _, p := range peers {
		if p.inBox || p.name == "native" {
			delayed = append(delayed, p)
		}
	}
	for _, d := range f.delays {
		groups = append(groups, group{delay: d, sz: f.lat, ds: dsLat, reps: f.delayReps, slowReps: f.delayReps, peers: delayed})
	}
	for i := range groups {
		groups[i].done, groups[i].skipped = map[string]int{}, map[string]int{}
	}
	return groups
}

// report writes meta.txt and the report, and the docs page when asked.
func (r *run) report(f *runFlags, groups []group, meta *meta, started time.Time) error {
	for _, g := range groups {
		var left []string
		for _, p := range g.peers {
			if n := g.skipped[p.name]; n > 0 {
				left = append(left, fmt.Sprintf("%s:%d", p.name, n))
			}
		}
		if len(left) > 0 {
			meta.add("left out for time "+g.delay.String()+"/"+g.sz.name, strings.Join(left, ","))
		}
	}
	meta.add("wall clock", time.Since(started).Round(time.Second).String())
	meta.add("load average at end", loadavg())
	if err := meta.write(filepath.Join(r.out, "meta.txt")); err != nil {
		return err
	}
	md, err := writeReport(r.out, r.rec.samples, groups, meta)
	if err != nil {
		return err
	}
	if f.docs != "" {
		if err := updateDocs(f.docs, md); err != nil {
			return err
		}
	}
	fmt.Print(md)
	log.Printf("done in %v; results in %s", time.Since(started).Round(time.Second), r.out)
	return nil
}

// group is one table: the peers, sizes and repetitions at one added delay.
type group struct {
	delay          time.Duration
	sz             sizes
	ds             *dataset
	reps, slowReps int
	peers          []*peer
	// done and skipped count each peer's repetitions run, and left out
	// for want of time.
	done, skipped map[string]int
}

func (g group) title() string {
	if g.delay == 0 {
		return fmt.Sprintf("no added latency, %s sizes", g.sz.name)
	}
	return fmt.Sprintf("%v added per box round trip, %s sizes", g.delay, g.sz.name)
}

// schedule runs the groups' repetitions within a time budget: first one
// repetition of every peer in every group (so every table has every peer),
// then the further repetitions, the no-delay group first, each only when
// the peer's last repetition in that group says it fits in what is left.
func (r *run) schedule(ctx context.Context, groups []*group, deadline time.Time) error {
	type key struct {
		g *group
		p *peer
	}
	last := map[key]time.Duration{}
	current := -1
	enter := func(i int) error {
		if current == i {
			return nil
		}
		current = i
		g := groups[i]
		log.Printf("== %s: %d peers", g.title(), len(g.peers))
		for _, p := range g.peers {
			if p.reset != nil {
				p.reset()
			}
		}
		return r.startHelpers(ctx, g.delay)
	}
	one := func(i, n int, p *peer) {
		g := groups[i]
		t0 := time.Now()
		x := &rep{r: r, p: p, ds: g.ds, sz: g.sz, n: n, delay: g.delay}
		x.run(ctx)
		last[key{g, p}] = time.Since(t0)
		g.done[p.name]++
		log.Printf("   rep %d %-13s %6.1fs  %s", n, p.name, time.Since(t0).Seconds(), x.summary())
	}
	// Reserve time for the report and the clean-up.
	const reserve = time.Minute
	for i, g := range groups {
		if err := enter(i); err != nil {
			return err
		}
		for _, p := range g.peers {
			if err := ctx.Err(); err != nil {
				return err
			}
			one(i, 1, p)
		}
	}
	for i, g := range groups {
		for n := 2; n <= g.reps; n++ {
			for j := range g.peers {
				// Rotate the order each repetition: drift of the
				// machine does not fall on one peer.
				p := g.peers[(j+n-1)%len(g.peers)]
				if p.slow && n > g.slowReps {
					continue
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				need := last[key{g, p}] * 11 / 10
				if time.Now().Add(need + reserve).After(deadline) {
					g.skipped[p.name]++
					continue
				}
				if err := enter(i); err != nil {
					return err
				}
				one(i, n, p)
			}
		}
	}
	return nil
}

// startHelpers (re)starts the ssh gate and, with a delay, the delay proxy.
func (r *run) startHelpers(ctx context.Context, d time.Duration) error {
	r.stopHelpers()
	r.delay = d
	if d > 0 {
		r.proxySock = filepath.Join(r.work, "docker-delay.sock")
		p, err := startDaemon(r.logDir, "delay-proxy", toolEnv("/"), r.self, "delay-proxy", "-listen", r.proxySock, "-delay", d.String())
		if err != nil {
			return err
		}
		r.proxy = p
		if err := waitFor(ctx, 10*time.Second, func() bool {
			c, err := net.Dial("unix", r.proxySock)
			if err == nil {
				c.Close()
			}
			return err == nil
		}); err != nil {
			return fmt.Errorf("delay proxy did not start: %v", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.gatePort = l.Addr().(*net.TCPAddr).Port
	l.Close()
	r.gateKey = filepath.Join(r.work, "gate-client-key")
	os.Remove(r.gateKey)
	g, err := startDaemon(r.logDir, "ssh-gate", toolEnv("/"), r.self, "ssh-gate", "-listen", fmt.Sprintf("127.0.0.1:%d", r.gatePort),
		"-key", r.gateKey, "--", r.self, "sftp-wrapper", r.ctr, d.String())
	if err != nil {
		return err
	}
	r.gate = g
	return waitFor(ctx, 10*time.Second, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.gatePort))
		if err == nil {
			c.Close()
		}
		_, kerr := os.Stat(r.gateKey)
		return err == nil && kerr == nil
	})
}

func (r *run) stopHelpers() {
	if r.gate != nil {
		r.gate.stop(syscall.SIGTERM, 10*time.Second)
		r.gate = nil
	}
	if r.proxy != nil {
		r.proxy.stop(syscall.SIGTERM, 10*time.Second)
		r.proxy = nil
	}
	r.proxySock = ""
	r.delay = 0
}

func waitFor(ctx context.Context, bound time.Duration, ok func() bool) error {
	deadline := time.Now().Add(bound)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// cleanupStale detaches mounts a killed earlier run left under work/mnt.
func cleanupStale(work string) {
	ents, _ := os.ReadDir(filepath.Join(work, "mnt"))
	for _, e := range ents {
		lazyUnmount(filepath.Join(work, "mnt", e.Name()))
	}
}

// toolEnv is the environment of every tool the workloads run: fixed, with
// git's identity and dates pinned so a commit of the same tree has the same
// id on every peer.
func toolEnv(dir string) []string {
	home := "/tmp/boxbench/home"
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin",
		"HOME=" + home, "LC_ALL=C", "TZ=UTC", "PWD=" + dir,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		// No gc or maintenance in the background: past 6,700 loose objects
		// (the large tree) git starts one that holds the mount busy.
		"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0",
		"GIT_CONFIG_KEY_1=maintenance.auto", "GIT_CONFIG_VALUE_1=false",
		"GIT_AUTHOR_NAME=boxbench", "GIT_AUTHOR_EMAIL=boxbench@example.invalid", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
		"GIT_COMMITTER_NAME=boxbench", "GIT_COMMITTER_EMAIL=boxbench@example.invalid", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// meta is the run's description: machine, versions, options.
type meta struct{ keys, vals []string }

func (m *meta) add(k, v string) {
	if i := slices.Index(m.keys, k); i >= 0 {
		m.vals[i] = v
		return
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
}

func (m *meta) write(path string) error {
	var b strings.Builder
	for i, k := range m.keys {
		fmt.Fprintf(&b, "%s: %s\n", k, m.vals[i])
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func firstLine(ctx context.Context, argv ...string) string {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = toolEnv("/")
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		return "(" + err.Error() + ")"
	}
	l, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return l
}

func collectMeta(ctx context.Context, r *run, fl *flag.FlagSet, args []string) *meta {
	m := &meta{}
	m.add("date", time.Now().UTC().Format(time.RFC3339))
	m.add("command", "boxbench run "+strings.Join(args, " "))
	cpu := firstLine(ctx, "sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2")
	m.add("machine", fmt.Sprintf("%s; %s cpus,%s; kernel %s", firstLine(ctx, "sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"),
		firstLine(ctx, "nproc"), cpu, firstLine(ctx, "uname", "-r")))
	m.add("memory", firstLine(ctx, "sh", "-c", "grep MemTotal /proc/meminfo"))
	m.add("load average at start", loadavg())
	m.add("boxfs", firstLine(ctx, r.boxfsBin, "version"))
	m.add("go-fuse (loopback)", firstLine(ctx, "sh", "-c", "go version -m "+r.loopbackBin+" 2>/dev/null | grep go-fuse | awk '{print $3}'"))
	m.add("sshfs", firstLine(ctx, "sh", "-c", "sshfs --version 2>&1 | grep -i 'sshfs version'"))
	m.add("libfuse", firstLine(ctx, "sh", "-c", "sshfs --version 2>&1 | grep -i 'fuse library'"))
	m.add("rclone", firstLine(ctx, "rclone", "version"))
	m.add("docker", firstLine(ctx, "docker", "version", "--format", "engine {{.Server.Version}}, client {{.Client.Version}}, API {{.Server.APIVersion}}"))
	m.add("git (host)", firstLine(ctx, "git", "--version"))
	m.add("tar", firstLine(ctx, "tar", "--version"))
	fl.VisitAll(func(f *flag.Flag) { m.add("flag -"+f.Name, f.Value.String()) })
	return m
}
