package cache

// The freshness simulator: a seeded scheduler runs host operations on a
// real Cache over an in-memory box (providers/fake) on a fake clock, and
// interleaves them with box-side changes, the watch's reports (delayed,
// reordered, lost in an overflow) and the answers of the box (held and
// released in any order). After every step a checker holds what the host
// saw against the contract of docs/design.md §6 and names the rule a
// schedule broke. Every remote call is held until the scheduler lets it
// go, and one goroutine runs at a time, so a seed replays exactly:
//
//	go test ./syncengine/cache -run TestSimulator -sim.seed=N -v
//
// The operations that take a file's content lock (an open that fetches, a
// write's push, a rename or remove) are never run on one path at once:
// two of them would wait on that lock, not on the box, and the schedule
// would depend on the Go scheduler. Stats, lookups, listings and walks run
// beside everything.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

var (
	simSeed      = flag.Int64("sim.seed", 0, "run the simulator on this seed only")
	simSchedules = flag.Int("sim.schedules", 10000, "schedules TestSimulator runs")
	simRandom    = flag.Bool("sim.random", false, "run schedules from a seed taken from the clock, not from 1")
	simBug       = flag.Int("sim.bug", 0, "plant this bug (plantedBug) in TestSimulator's schedules")
	simCount     = flag.Bool("sim.count", false, "run every schedule and count the violations by rule")
)

const (
	simRoot    = "/work"
	simAttr    = time.Second           // the attribute timeout
	simLatency = 60 * time.Millisecond // the watch's bound (treewatch.Latency)
	simSteps   = 60                    // steps per schedule
	simMaxOps  = 3                     // host operations in flight at once
)

// simPaths are the files schedules work on; "d" is a directory that is
// always there.
var simPaths = []string{"a", "b", "d/c", "d/e"}

// state is one state of a path: its content (a version's token), or
// absent, and when it came to be (a position in one order of every state
// of every path).
type state struct {
	idx    int
	ver    int // 0: absent
	at     time.Time
	byHost bool
}

// token is version n's content: its size alone names it.
func token(n int) string { return strings.Repeat("x", n) + "#" + strconv.Itoa(n) }

func versionOfSize(size int64) int {
	for n := 1; n < 1<<20; n++ {
		if int64(len(token(n))) == size {
			return n
		}
		if int64(len(token(n))) > size {
			break
		}
	}
	return -1
}

// violation is a rule of the contract a schedule broke.
type violation struct {
	rule, what string
}

func (v violation) Error() string { return v.rule + ": " + v.what }

type sim struct {
	t    *testing.T
	seed int64
	rng  *rand.Rand
	clk  *fake.Clock
	box  Remote // the fake box, unheld
	c    *Cache
	ctx  context.Context
	log  []string // the schedule so far, for a failing seed

	mu      sync.Mutex
	changed chan struct{} // an op parked or ended
	ops     []*simOp
	held    []*heldCall
	byGo    map[uint64]*simOp

	idx     int
	hist    map[string][]state  // path -> its states, in order
	boxv    map[string]int      // path -> the version the box holds
	seen    map[string]int      // path -> the newest state a look saw (F-mono)
	floor   map[string]simBound // path -> the oldest state a look may show (F-watch, F-gap, F-cmd)
	reports []simReport
	healthy bool
	nextVer int
	broke   *violation
	counts  ReportCounts // the cache's, at the end
	weights simWeights

	// write=behind (sim_behind_test.go); the zero value is write=through.
	wb simBehind
	// linking: the host call being applied is a link.
	linking bool
}

type simReport struct {
	change providers.Change // with the attributes the watch read
	path   string
	idx    int       // the state the change made
	due    time.Time // the watch reports by then (F-watch's bound)
}

type simOp struct {
	name    string
	paths   []string // content locks it may take
	writes  string   // the file it writes
	rmsDone []string // queued removes whose answers it brought (write=behind)
	ver     int      // the version it writes there
	wrote   int      // the idx of the state it writes (from its start)
	goid    uint64
	parked  bool
	done    bool
	release chan struct{}
	// what the op saw and needs checked once done
	check func()
	// the bounds every look of the op must meet, taken when it began
	bound map[string]simBound
	// the states its calls made in the box, by path
	applied map[string]int
	// write=behind: the host's acknowledged versions the box lacked
	// when the op began (F-dirty), the paths whose writes the box
	// refused during the op and those told to PushFailed (F-fail)
	dirty     map[string]int
	startIdx  int
	dirtyFrom map[string]int // per dirty path, the oldest state F-dirty lets a look show besides the write
	refused   []string
	told      []string
	lost      []string // linked names the box made meanwhile (sim.lost)
}

// simBound is the oldest state a look may show, and the rule that says so.
type simBound struct {
	idx  int
	rule string
}

type heldCall struct {
	op   *simOp
	what string
	go_  chan struct{}
}

func goid() uint64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := strings.Fields(string(b[:n]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

// hold parks the calling op's remote call until the scheduler lets it go.
func (s *sim) hold(what string) {
	id := goid()
	s.mu.Lock()
	op := s.byGo[id]
	if op == nil {
		s.mu.Unlock()
		panic("sim: a remote call from a goroutine the simulator did not start: " + what)
	}
	hc := &heldCall{op: op, what: what, go_: make(chan struct{})}
	s.held = append(s.held, hc)
	op.parked = true
	s.mu.Unlock()
	s.poke()
	<-hc.go_
}

func (s *sim) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// settle waits until every op is parked in the box or done.
func (s *sim) settle() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		busy := ""
		for _, op := range s.ops {
			if !op.parked && !op.done {
				busy = op.name
			}
		}
		s.mu.Unlock()
		if busy == "" {
			return
		}
		select {
		case <-s.changed:
		case <-time.After(time.Until(deadline)):
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			s.t.Fatalf("seed %d: op %s neither parked nor ended (waiting on a lock?)\n%s\n%s", s.seed, busy, strings.Join(s.log, "\n"), buf[:n])
		}
	}
}

// applied notes the states a host call just made in the box, for the op
// that made it: a push's rename, a remove, a create.
func (s *sim) applied() {
	s.mu.Lock()
	op := s.byGo[goid()]
	s.mu.Unlock()
	before := maps.Clone(s.boxv)
	now := map[string]int{}
	for _, p := range simPaths {
		now[p] = s.boxVersion(p)
	}
	for _, p := range simPaths {
		v := now[p]
		if v != s.boxv[p] {
			s.boxv[p] = v
			idx := s.add(p, v, true)
			if op != nil {
				op.applied[p] = idx
			}
			s.landed(p, v, s.linking || movedHere(before, now, p))
			// The watch reports the host's changes too, with their
			// attributes: the cache drops them as echoes (F-echo).
			s.report(p)
			if op != nil && op.writes == p && v == -1 {
				// The write's own create emptied the file in the box:
				// the write's state, which exists from its start, comes
				// after that.
				s.add(p, op.ver, true)
			}
		}
	}
}

// movedHere reports whether the version the box holds at p now (after) was
// at another path before the call and is there no more: a rename moved
// it, no push wrote it (versions are unique to their write).
func movedHere(before, after map[string]int, p string) bool {
	v := after[p]
	if v <= 0 {
		return false
	}
	for q, bv := range before {
		if q != p && bv == v && after[q] != v {
			return true
		}
	}
	return false
}

// heldRemote holds every answer of the box until the scheduler lets it go.
// An answer is taken when the call is made: a held answer is as old as
// the call.
type heldRemote struct {
	Remote
	s *sim
}

func (r heldRemote) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	fi, err := r.Remote.Lstat(ctx, name)
	r.s.hold("lstat " + name)
	return fi, err
}

func (r heldRemote) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	fi, err := r.Remote.Stat(ctx, name)
	r.s.hold("stat " + name)
	return fi, err
}

func (r heldRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	l, err := r.Remote.ReadDir(ctx, name)
	r.s.hold("readdir " + name)
	return l, err
}

func (r heldRemote) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	l, err := r.Remote.Walk(ctx, root)
	r.s.hold("walk " + root)
	return l, err
}

func (r heldRemote) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := r.Remote.ReadFile(ctx, name)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(rc)
		rc.Close()
	}
	r.s.hold("read " + name)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (r heldRemote) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	n, err := r.Remote.ReadAt(ctx, name, p, off)
	r.s.hold("readat " + name)
	return n, err
}

func (r heldRemote) WriteFile(ctx context.Context, name string, rd io.Reader, perm providers.FileMode) error {
	if err := r.s.refused(name); err != nil {
		r.s.hold("write " + name + " (refused)")
		return err
	}
	err := r.Remote.WriteFile(ctx, name, rd, perm)
	r.s.applied()
	r.s.hold("write " + name)
	return err
}

func (r heldRemote) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	n, err := r.Remote.WriteAt(ctx, name, p, off)
	r.s.applied()
	r.s.hold("writeat " + name)
	return n, err
}

func (r heldRemote) Create(ctx context.Context, name string, perm providers.FileMode, excl bool) error {
	err := r.Remote.Create(ctx, name, perm, excl)
	r.s.applied()
	r.s.hold("create " + name)
	return err
}

func (r heldRemote) Remove(ctx context.Context, name string) error {
	err := r.Remote.Remove(ctx, name)
	r.s.applied()
	r.s.rmAnswered(strings.TrimPrefix(name, simRoot+"/"), err)
	r.s.hold("remove " + name)
	return err
}

func (r heldRemote) Rename(ctx context.Context, o, n string) error {
	err := r.Remote.Rename(ctx, o, n)
	r.s.applied()
	r.s.hold("rename " + o + " " + n)
	return err
}

func (r heldRemote) Link(ctx context.Context, o, n string) error {
	err := r.Remote.Link(ctx, o, n)
	// A link gives the file at o a second name: what it puts at n is
	// not a push (F-order), as for a rename.
	r.s.linking = true
	r.s.applied()
	r.s.linking = false
	r.s.hold("link " + o + " " + n)
	return err
}

func (r heldRemote) Truncate(ctx context.Context, name string, size int64) error {
	err := r.Remote.Truncate(ctx, name, size)
	r.s.applied()
	r.s.hold("truncate " + name)
	return err
}

func (r heldRemote) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	err := r.Remote.Chmod(ctx, name, mode)
	r.s.hold("chmod " + name)
	return err
}

func (r heldRemote) Utimes(ctx context.Context, name string, a, m time.Time) error {
	err := r.Remote.Utimes(ctx, name, a, m)
	r.s.hold("utimes " + name)
	return err
}

func (r heldRemote) Fsync(ctx context.Context, name string) error {
	err := r.Remote.Fsync(ctx, name)
	r.s.hold("fsync " + name)
	return err
}

func newSim(t *testing.T, seed int64, dir string, bug plantedBug, behind bool) *sim {
	start := time.Unix(1_700_000_000, 0)
	clk := fake.NewClock(start)
	p := fake.New(fake.WithClock(clk))
	box, err := p.Create(context.Background(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	r := box.(Remote)
	ctx := context.Background()
	if err := r.Mkdir(ctx, simRoot+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	s := &sim{
		t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), clk: clk, box: r, ctx: ctx,
		changed: make(chan struct{}, 1),
		byGo:    map[uint64]*simOp{},
		hist:    map[string][]state{},
		boxv:    map[string]int{},
		seen:    map[string]int{},
		floor:   map[string]simBound{},
		healthy: true,
	}
	for _, p := range simPaths {
		s.hist[p] = []state{{idx: 0, at: start}}
	}
	o := Options{Dir: dir, Root: simRoot, Box: "sim", AttrTimeout: simAttr, Now: clk.Now, WalkMax: -1}
	var remote Remote = heldRemote{Remote: r, s: s}
	if behind {
		remote = s.behindOptions(&o)
	}
	c, err := Open(remote, o)
	if err != nil {
		t.Fatal(err)
	}
	c.fm.bug = bug
	c.Trust(true) // the watch is set and healthy from the start
	s.weights = drawWeights(s.rng, behind)
	s.c = c
	return s
}

func (s *sim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%8v ", s.clk.Now().Sub(time.Unix(1_700_000_000, 0)))+fmt.Sprintf(format, args...))
}

// fail records the first violation of the schedule.
func (s *sim) fail(rule, format string, args ...any) {
	if s.broke == nil {
		s.broke = &violation{rule: rule, what: fmt.Sprintf(format, args...)}
		s.logf("VIOLATION %s: %s", rule, s.broke.what)
	}
}

// add records a new state of path; it returns its idx.
func (s *sim) add(path string, ver int, byHost bool) int {
	s.idx++
	s.hist[path] = append(s.hist[path], state{idx: s.idx, ver: ver, at: s.clk.Now(), byHost: byHost})
	return s.idx
}

func (s *sim) current(path string) state {
	h := s.hist[path]
	return h[len(h)-1]
}

// bounds returns the oldest state each path may show to a look beginning
// now: the newest one a look saw or the host made (F-mono, F-own), what
// reports, gaps and commands made known (F-watch, F-gap, F-cmd), and
// every box change older than the attribute timeout (F-timeout).
func (s *sim) bounds() map[string]simBound {
	out := map[string]simBound{}
	now := s.clk.Now()
	for _, p := range simPaths {
		b := simBound{s.seen[p], "F-mono"}
		if f := s.floor[p]; f.idx > b.idx {
			b = f
		}
		for _, st := range s.hist[p] {
			if !st.byHost && !now.Before(st.at.Add(simAttr)) && st.idx > b.idx {
				b = simBound{st.idx, "F-timeout"}
			}
		}
		out[p] = b
	}
	return out
}

// raise makes idx the oldest state of p later looks may show, by rule.
func (s *sim) raise(p string, idx int, rule string) {
	if idx > s.floor[p].idx {
		s.floor[p] = simBound{idx, rule}
	}
}

// saw checks that a look begun with bounds (seen, floor) may show ver for
// path (0: absent), and notes it.
func (s *sim) saw(op *simOp, path string, ver int, how string) {
	b := op.bound[path]
	if dv, ok := op.dirty[path]; ok {
		// F-dirty: the host's acknowledged write the box lacks, or a
		// state made after the look began.
		if ver == dv {
			s.seen[path] = max(s.seen[path], s.hostState(path, dv))
			return
		}
		if from := op.dirtyFrom[path]; from > b.idx {
			b = simBound{from, "F-dirty"}
		}
	}
	match := -1
	for _, st := range s.hist[path] {
		if st.ver == ver && st.idx >= b.idx {
			match = st.idx
			break
		}
	}
	if match < 0 {
		s.fail(b.rule, "%s of %s showed version %d; the oldest it may show is state %d (%s)", how, path, ver, b.idx, s.describe(path))
		return
	}
	if match > s.seen[path] {
		s.seen[path] = match
	}
}

func (s *sim) describe(path string) string {
	var b []string
	for _, st := range s.hist[path] {
		who := "box"
		if st.byHost {
			who = "host"
		}
		b = append(b, fmt.Sprintf("%d:v%d@%v/%s", st.idx, st.ver, st.at.Sub(time.Unix(1_700_000_000, 0)), who))
	}
	return strings.Join(b, " ")
}

// start runs fn as a new op on its own goroutine and waits for it to park
// or end.
func (s *sim) start(name string, paths []string, fn func(op *simOp)) {
	s.startOp(&simOp{name: name, paths: paths}, fn)
}

func (s *sim) startOp(op *simOp, fn func(op *simOp)) {
	op.applied = map[string]int{}
	op.bound = s.bounds()
	op.dirty = maps.Clone(s.wb.dirty)
	for p := range s.wb.removed {
		op.dirty[p] = 0
	}
	op.startIdx = s.idx
	// A host change in flight when the look begins may show in it, even
	// where it reached the box before the look began (F-dirty): what its
	// calls made in the box, and the state a write in flight makes,
	// which the host shows once its close returns (F-own), maybe while
	// the look is out.
	op.dirtyFrom = map[string]int{}
	s.mu.Lock()
	for p := range op.dirty {
		op.dirtyFrom[p] = s.idx + 1
		for _, o := range s.ops {
			if o.done {
				continue
			}
			if idx, ok := o.applied[p]; ok && idx < op.dirtyFrom[p] {
				op.dirtyFrom[p] = idx
			}
			if o.writes == p && o.wrote > 0 && o.wrote < op.dirtyFrom[p] {
				op.dirtyFrom[p] = o.wrote
			}
		}
	}
	s.mu.Unlock()
	s.logf("start %s", op.name)
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
	ready := make(chan struct{})
	go func() {
		id := goid()
		s.mu.Lock()
		op.goid = id
		s.byGo[id] = op
		s.mu.Unlock()
		close(ready)
		defer func() {
			s.mu.Lock()
			op.done = true
			delete(s.byGo, id)
			s.mu.Unlock()
			s.poke()
		}()
		fn(op)
	}()
	<-ready
	s.settle()
	s.reap()
}

// reap runs the checks of the ops that ended, in the order they began.
func (s *sim) reap() {
	s.mu.Lock()
	var done []*simOp
	keep := s.ops[:0]
	for _, op := range s.ops {
		if op.done {
			done = append(done, op)
		} else {
			keep = append(keep, op)
		}
	}
	s.ops = keep
	s.mu.Unlock()
	if s.wb.on {
		s.pushed()
	}
	for _, op := range done {
		s.logf("end %s", op.name)
		s.rmsLanded(op)
		if op.check != nil {
			op.check()
		}
	}
}

// busy reports whether an op in flight may take path's content lock.
func (s *sim) busy(paths ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range s.ops {
		for _, p := range op.paths {
			if slices.Contains(paths, p) {
				return true
			}
		}
	}
	return false
}

// boxState is the idx of the newest state of p the box holds.
func (s *sim) boxState(p string) int {
	for _, st := range slices.Backward(s.hist[p]) {
		if st.ver == s.boxv[p] && (!st.byHost || st.idx > 0) {
			return st.idx
		}
	}
	return 0
}

// writing reports whether a host write of p is in flight.
func (s *sim) writing(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range s.ops {
		if op.writes == p {
			return true
		}
	}
	return false
}

// release lets one held answer of the box go.
func (s *sim) release(i int) {
	s.mu.Lock()
	hc := s.held[i]
	s.held = slices.Delete(s.held, i, i+1)
	hc.op.parked = false
	s.mu.Unlock()
	s.logf("answer %s (%s)", hc.what, hc.op.name)
	close(hc.go_)
	s.settle()
	s.reap()
}

func (s *sim) pick(list []string) string { return list[s.rng.Intn(len(list))] }

// The host's operations.

func (s *sim) hostRead(p string) {
	s.start("read "+p, s.locks(p), func(op *simOp) {
		h, _, err := s.c.OpenFile(s.ctx, p, syscall.O_RDONLY)
		if err != nil {
			op.check = func() {
				if errors.Is(err, syscall.ENOENT) {
					s.saw(op, p, 0, "open")
				} else {
					s.fail("F-own", "open %s: %v", p, err)
				}
			}
			return
		}
		b := make([]byte, 4096)
		n, rerr := h.ReadAt(b, 0)
		h.Release(s.ctx)
		op.check = func() {
			if rerr != nil && rerr != io.EOF {
				s.fail("F-own", "read %s: %v", p, rerr)
				return
			}
			data := string(b[:n])
			if data == "" {
				s.saw(op, p, -1, "read")
				return
			}
			i := strings.LastIndexByte(data, '#')
			ver, _ := strconv.Atoi(data[i+1:])
			if i < 0 || token(ver) != data {
				s.fail("F-mono", "read %s: torn content %q", p, data)
				return
			}
			s.saw(op, p, ver, "read")
		}
	})
}

func (s *sim) hostStat(p string, lookup bool) {
	name := "getattr "
	if lookup {
		name = "lookup "
	}
	s.start(name+p, nil, func(op *simOp) {
		var fi providers.FileInfo
		var err error
		if lookup {
			fi, err = s.c.Lookup(s.ctx, p)
		} else {
			fi, err = s.c.Getattr(s.ctx, p)
		}
		op.check = func() {
			switch {
			case errors.Is(err, syscall.ENOENT):
				s.saw(op, p, 0, name)
			case err != nil:
				s.fail("F-own", "%s%s: %v", name, p, err)
			default:
				s.saw(op, p, versionOfSize(fi.Size), name)
			}
		}
	})
}

func (s *sim) hostList(dir string) {
	s.start("readdir "+dir, nil, func(op *simOp) {
		list, err := s.c.ReadDir(s.ctx, dir)
		op.check = func() {
			if err != nil {
				s.fail("F-own", "readdir %q: %v", dir, err)
				return
			}
			got := map[string]providers.FileInfo{}
			for _, fi := range list {
				got[fi.Name] = fi
			}
			for _, p := range simPaths {
				d, name := split(p)
				if d != dir {
					continue
				}
				if fi, ok := got[name]; ok {
					s.saw(op, p, versionOfSize(fi.Size), "readdir")
				} else {
					s.saw(op, p, 0, "readdir")
				}
			}
		}
	})
}

func (s *sim) hostWrite(p string) {
	s.nextVer++
	ver := s.nextVer
	// The host's new state exists from its write: a look meanwhile may
	// show it (it is dirty on the host), and its close makes it the
	// newest state in the box too.
	wrote := s.add(p, ver, true)
	s.startOp(&simOp{name: fmt.Sprintf("write %s v%d", p, ver), paths: s.locks(p), writes: p, ver: ver, wrote: wrote}, func(op *simOp) {
		h, _, err := s.c.Create(s.ctx, p, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
		if err != nil {
			// The box changed the path under the create (removed it
			// between the create and its stat): an error, and nothing
			// acknowledged.
			op.check = func() { s.logf("create %s: %v (not acknowledged)", p, err) }
			return
		}
		_, err = h.WriteAt([]byte(token(ver)), 0)
		if err == nil {
			err = h.Flush(s.ctx)
		}
		h.Release(s.ctx)
		op.check = func() {
			if err != nil {
				s.logf("close %s: %v (not acknowledged)", p, err)
				return
			}
			if s.wb.on {
				s.acked(op, p, ver)
				return
			}
			// F-through: the close's push put its version in the box.
			idx, ok := op.applied[p]
			if !ok || s.versionAt(p, idx) != ver {
				s.fail("F-through", "close of %s v%d returned, and the box never held it (%s)", p, ver, s.describe(p))
				return
			}
			// F-own: from now on the host shows this close's state.
			s.seen[p] = max(s.seen[p], idx)
		}
	})
}

func (s *sim) hostRemove(p string) {
	s.start("remove "+p, s.locks(p), func(op *simOp) {
		err := s.c.Remove(s.ctx, p)
		queued := err == nil && s.wb.on && s.queued(p)
		op.check = func() {
			if err == nil && queued {
				s.queuedRemove(op, p)
				s.sawOwn(op)
				s.hostReplaced(p)
				return
			}
			if err == nil {
				if _, inBox := op.applied[p]; !inBox && s.wb.on {
					// Removed on the host only (the box never had the
					// host's file): the host's state of the name. A
					// file the box made under the name meanwhile is
					// another file, which the remove leaves: it is
					// the box's state again from now on.
					op.applied[p] = s.add(p, 0, true)
					if v := s.boxv[p]; v != 0 {
						s.add(p, v, false)
					}
				}
				s.sawOwn(op)
				s.hostReplaced(p)
			}
		}
	})
}

// sawOwn notes the states op made in the box: the host shows them, or
// newer ones, from now on (F-own).
func (s *sim) sawOwn(op *simOp) {
	for p, idx := range op.applied {
		s.seen[p] = max(s.seen[p], idx)
	}
}

// versionAt is the version of p's state idx.
func (s *sim) versionAt(p string, idx int) int {
	for _, st := range s.hist[p] {
		if st.idx == idx {
			return st.ver
		}
	}
	return -2
}

func (s *sim) hostRename(from, to string) {
	s.start("rename "+from+" "+to, s.locks(from, to), func(op *simOp) {
		err := s.c.Rename(s.ctx, from, to)
		op.check = func() {
			if err != nil {
				return
			}
			s.hostMoved(op, from, to)
			// The new name shows what the host knew of the old one (a
			// box change to it not reported yet may follow later, as
			// the kernel's own attributes of the moved inode do): any
			// state of the old name since its last look, or newer.
			if idx, ok := op.applied[from]; ok {
				s.seen[from] = max(s.seen[from], idx)
			}
			if at, ok := op.applied[to]; ok {
				var moved []state
				for _, st := range s.hist[from] {
					if st.idx >= op.bound[from].idx && st.ver != 0 {
						moved = append(moved, state{idx: at, ver: st.ver, at: s.clk.Now(), byHost: true})
					}
				}
				i := slices.IndexFunc(s.hist[to], func(st state) bool { return st.idx == at })
				s.hist[to] = slices.Insert(s.hist[to], i+1, moved...)
				s.seen[to] = at
				s.floor[to] = simBound{}
			}
			if v, ok := s.wb.dirty[to]; ok && s.wb.on {
				// write=behind: the host's write the box lacks moved
				// with the name, and the host shows it there, also
				// where the box's version of the new name did not
				// change (both names held a file of no version).
				s.add(to, v, true)
			}
		}
	})
}

// refresh is a command's end: the walk that follows it (F-cmd).
func (s *sim) refresh() {
	now := map[string]int{}
	for _, p := range simPaths {
		now[p] = s.boxState(p)
	}
	s.start("refresh", nil, func(op *simOp) {
		_, err := s.c.Refresh(s.ctx)
		op.check = func() {
			if err != nil {
				return // dropped for a gap or a newer walk: everything is asked again
			}
			for p, idx := range now {
				s.raise(p, idx, "F-cmd")
			}
		}
	})
}

// boxVersion is the version the box holds at p (0: none, -1: a file of no
// version, such as one just made empty).
func (s *sim) boxVersion(p string) int {
	fi, err := s.box.Lstat(s.ctx, simRoot+"/"+p)
	if err != nil {
		return 0
	}
	return versionOfSize(fi.Size)
}

// The box's own changes.

func (s *sim) boxChange() {
	p := s.pick(simPaths)
	q := s.pick(simPaths)
	if t := s.linkedTarget(); t != "" {
		p = t
	}
	if s.writing(p) || s.writing(q) {
		// Two writers of one file at once give bytes of both, as on a
		// disk: the contract orders whole states, and the schedule
		// leaves that case out.
		return
	}
	var changed []string
	switch k := s.rng.Intn(4); {
	case k < 2:
		s.nextVer++
		v := s.nextVer
		if err := s.box.WriteFile(s.ctx, simRoot+"/"+p, strings.NewReader(token(v)), 0o644); err != nil {
			s.t.Fatal(err)
		}
		s.add(p, v, false)
		s.boxv[p] = v
		changed = []string{p}
		s.logf("box writes %s v%d", p, v)
	case k == 2:
		if s.box.Remove(s.ctx, simRoot+"/"+p) != nil {
			return
		}
		s.add(p, 0, false)
		s.boxv[p] = 0
		changed = []string{p}
		s.logf("box removes %s", p)
	default:
		v := s.boxVersion(p)
		if q == p || v == 0 || s.box.Rename(s.ctx, simRoot+"/"+p, simRoot+"/"+q) != nil {
			return
		}
		if s.boxVersion(p) != 0 {
			// p and q were two names of one file (a host's link in
			// write=behind): rename(2) does nothing.
			s.logf("box renames %s %s, two names of one file: nothing", p, q)
			return
		}
		s.add(q, v, false)
		s.add(p, 0, false)
		s.boxv[q], s.boxv[p] = v, 0
		changed = []string{p, q}
		s.logf("box renames %s %s", p, q)
	}
	for _, c := range changed {
		s.report(c)
	}
}

// report queues the watch's report of p's change, while the watch is
// healthy, with p's attributes as the box shows them now.
func (s *sim) report(p string) {
	if !s.healthy {
		return
	}
	ch := providers.Change{Path: p}
	if fi, err := s.box.Lstat(s.ctx, simRoot+"/"+p); err == nil {
		ch.Info = &fi
	} else {
		ch.Gone = true
	}
	s.reports = append(s.reports, simReport{change: ch, path: p, idx: s.current(p).idx, due: s.clk.Now().Add(simLatency)})
}

// first reports whether report i is the oldest queued of its path: the
// watch reports one path's changes in the order it saw them (each with
// the attributes it read then), those of different paths in any order.
func (s *sim) first(i int) bool {
	for _, r := range s.reports[:i] {
		if r.path == s.reports[i].path {
			return false
		}
	}
	return true
}

// deliver hands the watch's report i to the cache (F-watch).
func (s *sim) deliver(i int) {
	r := s.reports[i]
	s.reports = slices.Delete(s.reports, i, i+1)
	s.logf("report %s", r.path)
	s.c.Reported([]providers.Change{r.change}, false)
	s.raise(r.path, r.idx, "F-watch")
}

// overflow is a gap of the watch: its queue lost changes (F-gap).
func (s *sim) overflow() {
	s.logf("overflow")
	s.reports = nil
	s.healthy = false
	s.c.Trust(false)
	s.c.BoxChanged(nil, true)
	for _, p := range simPaths {
		s.raise(p, s.boxState(p), "F-gap")
	}
}

// reconnect sets the watch again: it is healthy from here on.
func (s *sim) reconnect() {
	s.logf("watch ready")
	s.healthy = true
	s.c.Trust(true)
}

// advance moves the clock; reports falling due first reach the host, in
// any order (the watch's bound).
func (s *sim) advance(d time.Duration) {
	to := s.clk.Now().Add(d)
	for {
		var due []int
		for i, r := range s.reports {
			if !r.due.After(to) && s.first(i) {
				due = append(due, i)
			}
		}
		if len(due) == 0 {
			break
		}
		i := due[s.rng.Intn(len(due))]
		if s.reports[i].due.After(s.clk.Now()) {
			s.clk.Advance(s.reports[i].due.Sub(s.clk.Now()))
		}
		s.deliver(i)
	}
	if to.After(s.clk.Now()) {
		s.clk.Advance(to.Sub(s.clk.Now()))
	}
	s.logf("clock")
}

// simWeights is how often a schedule takes each kind of step. Each
// schedule draws its own (swarm testing): a schedule whose watch rarely
// fails and one whose watch fails all the time each reach states the
// other seldom does.
type simWeights struct {
	host, release, box, deliver, overflow, reconnect, refresh, clock int
	// write=behind: a batch's timer fires, a barrier, the box starts or
	// stops refusing the host's pushes
	batch, barrier, refuse int
}

func drawWeights(rng *rand.Rand, behind bool) simWeights {
	pick := func(vs ...int) int { return vs[rng.Intn(len(vs))] }
	w := simWeights{
		host:      pick(20, 30, 40),
		release:   pick(15, 25, 40),
		box:       pick(5, 15, 30),
		deliver:   pick(5, 10, 20),
		overflow:  pick(0, 2, 6),
		reconnect: pick(2, 5, 15),
		refresh:   pick(1, 3),
		clock:     pick(5, 10, 20),
	}
	if behind {
		w.batch, w.barrier, w.refuse = pick(5, 10, 20), pick(3, 8, 15), pick(0, 3, 8)
	}
	return w
}

func (s *sim) step() {
	s.mu.Lock()
	nops, nheld := len(s.ops), len(s.held)
	s.mu.Unlock()
	w := s.weights
	// Only the steps that can be taken now are drawn.
	if nops >= simMaxOps {
		w.host, w.refresh, w.batch, w.barrier = 0, 0, 0, 0
	}
	if nheld == 0 {
		w.release = 0
	}
	if len(s.reports) == 0 {
		w.deliver = 0
	}
	if s.healthy {
		w.reconnect = 0
	} else {
		// A watch overflows when the box changes a lot at once: the box
		// goes on changing while it is set again.
		w.box *= 3
	}
	k := s.rng.Intn(w.host + w.release + w.box + w.deliver + w.overflow + w.reconnect + w.refresh + w.clock + w.batch + w.barrier + w.refuse)
	next := func(n int) bool {
		if k < n {
			return true
		}
		k -= n
		return false
	}
	switch {
	case next(w.host):
		s.hostOp()
	case next(w.release):
		s.release(s.rng.Intn(nheld))
	case next(w.box):
		s.boxChange()
	case next(w.deliver):
		var first []int
		for i := range s.reports {
			if s.first(i) {
				first = append(first, i)
			}
		}
		s.deliver(first[s.rng.Intn(len(first))])
	case next(w.overflow):
		s.overflow()
	case next(w.reconnect):
		s.reconnect()
	case next(w.refresh):
		s.refresh()
	case next(w.batch):
		s.batch()
	case next(w.barrier):
		s.barrier()
	case next(w.refuse):
		s.toggleRefuse()
	default:
		durs := []time.Duration{time.Millisecond, 20 * time.Millisecond, 300 * time.Millisecond, simAttr}
		s.advance(durs[s.rng.Intn(len(durs))])
	}
}

func (s *sim) hostOp() {
	if s.wb.on && s.rng.Intn(s.linkOdds()) == 0 {
		// Drawn in write=behind only: write=through's schedules stay
		// as they were.
		s.linkMoveOp()
		return
	}
	p := s.pick(simPaths)
	switch k := s.rng.Intn(10); {
	case k < 3:
		if !s.busy(s.locks(p)...) {
			s.hostRead(p)
		}
	case k < 5:
		s.hostStat(p, k == 4)
	case k < 6:
		if !s.wb.on || *simBehindLists {
			s.hostList(s.pick([]string{"", "d"}))
		}
	case k < 8:
		if !s.busy(s.locks(p)...) {
			s.hostWrite(p)
		}
	case k < 9:
		if !s.busy(s.locks(p)...) {
			s.hostRemove(p)
		}
	default:
		q := s.pick(simPaths)
		if q != p && !s.busy(s.locks(p, q)...) {
			s.hostRename(p, q)
		}
	}
}

// finish lets every held answer go and ends the ops.
func (s *sim) finish() {
	for {
		s.mu.Lock()
		n := len(s.held)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		s.release(0)
	}
}

// run runs one schedule; it returns the violation it found, if any.
func runSchedule(t *testing.T, seed int64, dir string, bug plantedBug, behind bool) *sim {
	s := newSim(t, seed, dir, bug, behind)
	defer s.c.Close()
	for i := 0; i < simSteps && s.broke == nil; i++ {
		s.step()
	}
	s.finish()
	if s.broke == nil {
		s.finishBehind()
	}
	s.counts = s.c.Reports()
	return s
}

func simDir(t *testing.T) string {
	// The cache's journal syncs its writes: a memory file system keeps
	// thousands of schedules fast.
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	d, err := os.MkdirTemp(base, "boxfs-sim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestSimulator runs seeded schedules and holds every one to the
// contract; a failing seed is printed with its schedule and replays with
// -sim.seed.
func TestSimulator(t *testing.T) {
	// Marks are dropped at every chance, so that dropping them is
	// checked too.
	defer func(n int) { pruneMin = n }(pruneMin)
	pruneMin = 1
	base := simDir(t)
	seeds := []int64{*simSeed}
	if *simSeed == 0 {
		seeds = nil
		// The same seeds every run, so that CI is deterministic;
		// -sim.random explores new ones.
		first := int64(1)
		if *simRandom {
			first = time.Now().UnixNano() % 1_000_000_000
		}
		t.Logf("seeds %d to %d", first, first+int64(*simSchedules)-1)
		for i := range *simSchedules {
			seeds = append(seeds, first+int64(i))
		}
		if testing.Short() {
			seeds = seeds[:min(len(seeds), 1000)]
		}
	}
	counts := map[string]int{}
	var reports ReportCounts
	defer func() {
		t.Logf("watch reports: %d taken, %d dropped as echoes", reports.Taken, reports.Echoes)
		if reports.Echoes == 0 && len(seeds) > 100 {
			t.Error("no echo was dropped: the schedules do not exercise F-echo")
		}
		if len(counts) > 0 {
			t.Errorf("violations by rule: %v", counts)
		}
	}()
	for _, seed := range seeds {
		dir, _ := os.MkdirTemp(base, "s")
		s := runSchedule(t, seed, dir, plantedBug(*simBug), false)
		os.RemoveAll(dir)
		reports.Taken += s.counts.Taken
		reports.Echoes += s.counts.Echoes
		s.judge(t, "TestSimulator", seed, counts)
	}
}

// judge reports what schedule seed of test did: under -sim.count a broken
// rule is counted (and the first of each logged), otherwise it fails the
// test with the schedule and the command that replays it; a schedule run
// alone (-sim.seed) is logged.
func (s *sim) judge(t *testing.T, test string, seed int64, counts map[string]int) {
	t.Helper()
	switch {
	case s.broke != nil && *simCount:
		if counts[s.broke.rule] == 0 {
			t.Logf("seed %d broke %v", seed, s.broke)
		}
		counts[s.broke.rule]++
	case s.broke != nil:
		t.Fatalf("seed %d broke %v\nschedule:\n%s\nreplay: go test ./syncengine/cache -run '%s$' -sim.seed=%d -v", seed, s.broke, strings.Join(s.log, "\n"), test, seed)
	case *simSeed != 0:
		t.Logf("schedule:\n%s", strings.Join(s.log, "\n"))
	}
}

// TestSimulatorFindsPlantedBugs plants each of three bugs in the model and
// shows the simulator finds it within 1,000 schedules, naming the rule
// the bug breaks.
func TestSimulatorFindsPlantedBugs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bug   plantedBug
		rules []string
	}{
		{"install a fetch begun before a host write", bugInstallOld, []string{"F-mono"}},
		{"drop the reports of an overflow", bugDropGap, []string{"F-gap"}},
		{"trust a listing across a reconnect", bugTrustAcross, []string{"F-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := simDir(t)
			first := int64(1)
			for i := range 1000 {
				seed := first + int64(i)
				dir, _ := os.MkdirTemp(base, "s")
				s := runSchedule(t, seed, dir, tc.bug, false)
				os.RemoveAll(dir)
				if s.broke != nil {
					t.Logf("found after %d schedules (seed %d): %v", i+1, seed, s.broke)
					if !slices.Contains(tc.rules, s.broke.rule) {
						t.Errorf("the bug broke %s, want one of %v\n%s", s.broke.rule, tc.rules, strings.Join(s.log, "\n"))
					}
					return
				}
			}
			t.Fatal("not found in 1,000 schedules")
		})
	}
}
