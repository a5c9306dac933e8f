package cache

// The simulator in write=behind. A close returns once the bytes are in the
// journal; the box gets them when a batch's timer fires (a step of its
// own: the simulator stops the pusher's goroutine from ever running, and
// pushes a batch from a goroutine it started, as run would) or at a
// barrier (FlushAll: flush, fsync, a command, release and umount all go
// through it). The box may refuse the host's writes for a while (a full
// disk), change a path whose host write is still queued, and answer a
// batch's calls in any order.
//
// Besides the rules of sim_test.go, the checker holds the cache to these
// rules of docs/design.md §6, in write=behind:
//
//   - F-dirty: a look begun while the host holds an acknowledged write of
//     a path the box lacks shows that write, or a state made after the
//     look began: never a box change made meanwhile, never an older state
//     (a reader on the host always sees its own writes).
//   - F-barrier: a barrier that returns success leaves in the box every
//     host write acknowledged before it began; a barrier while the box
//     refuses a write it must push fails (F-fail).
//   - F-order: a push never puts in the box a version of a path older
//     than one the host acknowledged later for it.
//   - F-fail: a batch whose write the box refused tells PushFailed (err
//     and facts.json say it); the host keeps its view (F-dirty) and the
//     file is pushed at a later batch or barrier.
//   - At the end (umount, the box taking writes again) the barrier
//     succeeds and the box holds the host's last acknowledged write of
//     every path it did not remove or rename since.
//
// A box change to a path with a queued host write is resolved as F-dirty
// says: the host keeps showing its write, and the push that follows
// replaces the box's change (checked: the host's version lands; F-order:
// never an older one).

import (
	"context"
	"errors"
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

var (
	simBehindSchedules = flag.Int("sim.behind", 3000, "schedules TestSimulatorBehind runs")
	// Listings are in the schedules: a listing begun while the host holds
	// a write the box lacks, answered after that write's push, is where
	// write=behind is most easily wrong (F-dirty). -sim.behind.lists=false
	// leaves them out.
	simBehindLists = flag.Bool("sim.behind.lists", true, "TestSimulatorBehind's schedules list directories too")
	// simBehindPlant plants a bug in the simulator's own barrier or
	// batch, to show the checker finds it: "noflush" (a barrier that
	// pushes nothing), "untold" (a refused batch not told to PushFailed).
	simBehindPlant = flag.String("sim.behind.plant", "", "plant a bug in TestSimulatorBehind's barriers or batches")
)

// simBehind is the write=behind part of a schedule's state.
type simBehind struct {
	on bool
	// dirty holds, per path, the host's acknowledged version the box
	// lacks.
	dirty map[string]int
	// seq orders acknowledgements: ackSeq and ackPath are each
	// acknowledged version's place and path, newest the place of the
	// newest version acknowledged for each path.
	seq     int
	ackSeq  map[int]int
	ackPath map[int]string
	newest  map[string]int
	// landed: versions a push put in the box; replaced: acknowledged
	// versions a later host change (a remove, a rename over them)
	// replaced before they were pushed.
	landed   map[int]bool
	landedBy map[int]*simOp
	replaced map[int]bool
	// refuse: the box refuses the host's writes (ENOSPC).
	refuse bool
	// linkedHere: names linkmoves gave files on the host alone; the box
	// makes a file under one of them more often than under other paths
	// (another writer of the same git object).
	linkedHere []string
	// removed: names the host removed while the box had them, the
	// remove queued for a batch (behindrm.go). Until the answer of the
	// batch's remove reaches the host, a look shows them missing, whatever
	// the box did meanwhile (F-dirty, as for a write: version 0).
	removed map[string]bool
	// batches, barriers, refusals and failed barriers: counted for the
	// test's log.
	stats simBehindStats
}

type simBehindStats struct {
	batches, barriers, failedBarriers, refused, overwrites int
	// linkmoves that moved the file, that link(2) refused (EEXIST), and
	// names a link made on the host that the box took meanwhile (lost)
	linkMoves, linkExists, lost int
	// linkmoves the host made alone (no box call at the link's name)
	linkHere int
	// removes the host made alone and queued for the box
	queuedRms int
}

// behindOptions sets o for write=behind, with every timer of the pusher
// out of reach (the simulator fires batches itself), and returns the
// remote the cache is to use: a batching one (one round trip per batch,
// as the agent's channel) for half the seeds.
func (s *sim) behindOptions(o *Options) Remote {
	s.wb = simBehind{on: true, dirty: map[string]int{}, removed: map[string]bool{}, ackSeq: map[int]int{}, ackPath: map[int]string{},
		newest: map[string]int{}, landed: map[int]bool{}, landedBy: map[int]*simOp{}, replaced: map[int]bool{}}
	o.WriteBehind = true
	o.Logger = slog.New(slog.DiscardHandler)
	o.BehindDelay, o.BehindMaxWait = 24*time.Hour, 24*time.Hour
	o.BehindFiles, o.BehindBytes = 1<<30, 1<<62
	o.PushFailed = func(rel string, err error) {
		if op := s.opOf(); op != nil && *simBehindPlant != "untold" {
			op.told = append(op.told, rel)
		}
	}
	o.Overwrote = func(rel string) { s.wb.stats.overwrites++ }
	h := heldStatRemote{heldRemote{Remote: s.box, s: s}}
	if s.rng.Intn(2) == 0 {
		return heldBatchRemote{h}
	}
	return h
}

// heldStatRemote writes a file and stats it in one held call, as the
// agent does (providers.StatWriter): a box change while the answer is
// held comes after both.
type heldStatRemote struct{ heldRemote }

func (r heldStatRemote) WriteFileStat(ctx context.Context, name string, rd io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	if err := r.s.refused(name); err != nil {
		r.s.hold("write " + name + " (refused)")
		return providers.FileInfo{}, err
	}
	fi, err := providers.AsStatWriter(r.s.box).WriteFileStat(ctx, name, rd, o)
	r.s.applied()
	rel := strings.TrimPrefix(name, simRoot+"/")
	v := r.s.boxv[rel]
	r.s.hold("write " + name)
	if o.Exclusive && providers.IsCode(err, providers.Exists) {
		r.s.lost(rel)
	}
	r.s.answered(rel, v)
	return fi, err
}

// answered notes that the answer of a push of version v of p reached the
// host: the host then holds that write as the box's, not its own
// (F-dirty), even while the rest of its batch is out.
func (s *sim) answered(p string, v int) {
	if s.wb.dirty[p] == v {
		delete(s.wb.dirty, p)
	}
}

func (r heldStatRemote) CreateStat(ctx context.Context, name string, perm providers.FileMode, excl bool) (providers.FileInfo, error) {
	fi, err := providers.AsStatWriter(r.s.box).CreateStat(ctx, name, perm, excl)
	r.s.applied()
	r.s.hold("create " + name)
	return fi, err
}

func (r heldStatRemote) MkdirStat(ctx context.Context, name string, perm providers.FileMode) (providers.FileInfo, error) {
	fi, err := providers.AsStatWriter(r.s.box).MkdirStat(ctx, name, perm)
	r.s.applied()
	r.s.hold("mkdir " + name)
	return fi, err
}

// opOf is the op running on the calling goroutine.
func (s *sim) opOf() *simOp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byGo[goid()]
}

// refused returns the error of a refused write of name while the box
// refuses the host's writes, and notes it for the op.
func (s *sim) refused(name string) error {
	if !s.wb.refuse {
		return nil
	}
	s.wb.stats.refused++
	rel := strings.TrimPrefix(name, simRoot+"/")
	if op := s.opOf(); op != nil {
		op.refused = append(op.refused, rel)
	}
	return providers.PathError("sim.WriteFile", "sim", name, syscall.ENOSPC)
}

// heldBatchRemote takes a batch of files in one call (providers.
// BatchWriter), answered as one held call.
type heldBatchRemote struct{ heldStatRemote }

func (r heldBatchRemote) WriteFiles(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	out := make([]providers.FileWritten, len(files))
	sw := providers.AsStatWriter(r.s.box)
	var names []string
	for i, f := range files {
		names = append(names, strings.TrimPrefix(f.Name, simRoot+"/"))
		switch {
		case f.Dir:
			out[i].Info, out[i].Err = providers.WriteDir(ctx, r.s.box, f)
		default:
			if err := r.s.refused(f.Name); err != nil {
				out[i].Err = err
				continue
			}
			out[i].Info, out[i].Err = sw.WriteFileStat(ctx, f.Name, f.Data, f.Options)
		}
	}
	r.s.applied()
	r.s.hold("batch " + strings.Join(names, ","))
	for i, f := range files {
		if f.Options.Exclusive && providers.IsCode(out[i].Err, providers.Exists) {
			r.s.lost(names[i])
		}
	}
	return out, nil
}

// locks returns the paths whose content locks an op on paths may take: in
// write=behind a rename or link may push every dirty file first
// (Cache.settle), and names of one file share its content lock (shared).
func (s *sim) locks(paths ...string) []string {
	if s.wb.on && (len(paths) > 1 || s.shared()) {
		return simPaths
	}
	return paths
}

// shared reports whether two paths may be names of one file, whose
// content lock the cache takes for either (Cache.openFileFor): the box
// holds two names of one file, or the cache knows of one that did.
func (s *sim) shared() bool {
	s.c.mu.Lock()
	n := len(s.c.links)
	s.c.mu.Unlock()
	if n > 0 {
		return true
	}
	inos := map[uint64]bool{}
	for _, p := range simPaths {
		if fi, err := s.box.Lstat(s.ctx, simRoot+"/"+p); err == nil {
			if inos[fi.Ino] {
				return true
			}
			inos[fi.Ino] = true
		}
	}
	return false
}

// hostState is the idx of the host's state ver of p.
func (s *sim) hostState(p string, ver int) int {
	for _, st := range s.hist[p] {
		if st.ver == ver && st.byHost {
			return st.idx
		}
	}
	return 0
}

// acked notes the close of the host's write of p, version ver, returned:
// from now on the host shows it (F-own, F-dirty), and the box is to get
// it at a batch or barrier.
func (s *sim) acked(op *simOp, p string, ver int) {
	w := &s.wb
	if old, ok := w.dirty[p]; ok {
		w.replaced[old] = true // never pushed: a later close of the file replaced it
	}
	w.seq++
	w.ackSeq[ver], w.ackPath[ver], w.newest[p] = w.seq, p, w.seq
	s.seen[p] = max(s.seen[p], s.hostState(p, ver))
	w.dirty[p] = ver
	delete(w.removed, p) // made again on the host: pushed after the remove
	s.pushed()
}

// landed notes that a host call put version v in the box at p (F-order):
// a push, or a rename that moved v there (moved). F-order is about
// pushes: a host rename moving a file back over its old name, which the
// host acknowledged a later write of, replaces that write (F-dirty: the
// host's rename is a change of its own), as on a disk.
func (s *sim) landed(p string, v int, moved bool) {
	w := &s.wb
	if !w.on || v <= 0 {
		return
	}
	if seq, ok := w.ackSeq[v]; ok && !moved && w.ackPath[v] == p && seq < w.newest[p] {
		s.fail("F-order", "a push put %s v%d in the box after the host acknowledged a later version of it (%s)", p, v, s.describe(p))
	}
	w.landed[v] = true
	w.landedBy[v] = s.opOf()
}

// pushed ends the queued writes whose push was answered: until its
// answer reaches the host, the host holds the write as its own (F-dirty).
func (s *sim) pushed() {
	for p, v := range s.wb.dirty {
		if op, ok := s.wb.landedBy[v]; ok && (op == nil || op.done) {
			delete(s.wb.dirty, p)
		}
	}
}

// hostReplaced notes the host removed p: its queued write is not pushed.
func (s *sim) hostReplaced(p string) {
	if v, ok := s.wb.dirty[p]; ok {
		s.wb.replaced[v] = true
		delete(s.wb.dirty, p)
	}
}

// hostMoved notes the host renamed from to to: a queued write moves with
// the name (the box gets it at to).
func (s *sim) hostMoved(op *simOp, from, to string) {
	if !s.wb.on {
		return
	}
	s.hostReplaced(to)
	if _, ok := s.wb.dirty[from]; ok {
		delete(s.wb.removed, to)
	}
	v, ok := s.wb.dirty[from]
	if !ok {
		return
	}
	delete(s.wb.dirty, from)
	s.wb.dirty[to] = v
	// The host's newest version of to is now the one it moved there,
	// whatever it acknowledged there before (F-order).
	s.wb.ackPath[v], s.wb.newest[to] = to, s.wb.ackSeq[v]
	_, fromInBox := op.applied[from]
	if _, toInBox := op.applied[to]; !toInBox && !fromInBox {
		// Renamed on the host only (the box never had the file): the
		// host's states of the two names.
		op.applied[to] = s.add(to, v, true)
		op.applied[from] = s.add(from, 0, true)
		if bv := s.boxv[from]; bv != 0 {
			// A file the box made under the old name meanwhile is
			// another file, which the rename leaves (as a remove on
			// the host only does).
			s.add(from, bv, false)
		}
	}
}

// lost notes that the box refused, with Exists, the exclusive push of p,
// a name a link gave the file on the host (linkHere) while the box made a
// file there meanwhile: link(2) never replaces a file. The answer has
// reached the host, which drops its write (never pushed) and shows the
// box's file from now on.
func (s *sim) lost(p string) {
	if op := s.opOf(); op != nil {
		op.lost = append(op.lost, p)
	}
	s.wb.stats.lost++
	if v, ok := s.wb.dirty[p]; ok {
		s.wb.replaced[v] = true
		delete(s.wb.dirty, p)
	}
	s.add(p, s.boxv[p], false)
	s.logf("the box made %s meanwhile: the host's linked name is dropped", p)
}

// linkOdds is one in how many host ops is a linkmove: one in two while
// the host has a file the box lacks and nothing is in flight (git's
// object, linked on the host alone), else one in six.
func (s *sim) linkOdds() int {
	if !s.busy(simPaths...) && len(s.hostOnly()) > 0 {
		return 2
	}
	return 6
}

// hostOnly returns the paths of files the host made and the box does not
// have yet.
func (s *sim) hostOnly() []string {
	var out []string
	for _, p := range simPaths {
		if f := s.c.localFile(p); f != nil && !f.hasAlias() && !s.inBox(f) {
			out = append(out, p)
		}
	}
	return out
}

// linkMoveOp starts a linkmove, mostly as git does one: of a file the
// host made and the box does not have yet, to a name of its directory the
// host last made or saw absent; the rest of the time, of any two paths.
func (s *sim) linkMoveOp() {
	from := s.hostOnly()
	if len(from) == 0 || s.rng.Intn(4) == 0 {
		from = simPaths
	}
	p := s.pick(from)
	to := simPaths
	if s.rng.Intn(4) != 0 {
		var free []string
		s.c.mu.Lock()
		for _, q := range simPaths {
			d, name := split(q)
			if l := s.c.dir(d); d == pathDir(p) && q != p && s.c.usable(l) && s.c.file(q) == nil {
				if _, taken := l.entries[name]; !taken {
					free = append(free, q) // linkHere's case
				}
			}
		}
		s.c.mu.Unlock()
		if len(free) == 0 {
			for _, q := range simPaths {
				if pathDir(q) == pathDir(p) && q != p && s.current(q).ver == 0 {
					free = append(free, q)
				}
			}
		}
		if len(free) > 0 {
			to = free
		}
	}
	q := s.pick(to)
	if p != q && !s.busy(s.locks(p, q)...) {
		s.hostLinkMove(p, q)
	}
}

// linkedTarget returns a name a linkmove gave a file on the host alone,
// which the box lacks yet, for half the box's changes; "" for the rest.
func (s *sim) linkedTarget() string {
	var live []string
	for _, q := range s.wb.linkedHere {
		if _, ok := s.wb.dirty[q]; ok {
			live = append(live, q)
		}
	}
	if len(live) == 0 || s.rng.Intn(2) == 0 {
		return ""
	}
	return s.pick(live)
}

// hostLinkMove is git's write of an object: link(p, q), then unlink(p).
// It is a rename that link(2)'s rule bounds: it fails with EEXIST when q
// exists on the host, and the name it gives never replaces a file the box
// made at q meanwhile (lost). In write=behind a file the box lacks is
// linked on the host alone (linkHere), and the batch makes q, never p; a
// box change to p meanwhile is another file, which the unlink leaves.
func (s *sim) hostLinkMove(p, q string) {
	s.start("linkmove "+p+" "+q, s.locks(p, q), func(op *simOp) {
		_, lerr := s.c.Link(s.ctx, p, q)
		var rerr error
		var queued bool
		if lerr == nil {
			rerr = s.c.Remove(s.ctx, p)
			queued = rerr == nil && s.queued(p)
		}
		op.check = func() {
			switch {
			case errors.Is(lerr, syscall.EEXIST):
				s.wb.stats.linkExists++
				s.logf("link %s %s: %v", p, q, lerr)
				return
			case lerr != nil:
				s.logf("link %s %s: %v", p, q, lerr)
				return
			case rerr != nil:
				// The box removed p meanwhile: q is the file's only
				// name, as the box's link made it.
				s.logf("unlink %s: %v", p, rerr)
				s.sawOwnOf(op, q)
				return
			}
			s.wb.stats.linkMoves++
			if _, inBox := op.applied[q]; !inBox {
				s.wb.stats.linkHere++
				s.wb.linkedHere = append(s.wb.linkedHere, q)
			}
			if v, ok := s.wb.dirty[q]; ok {
				// link(2) does not replace a file the host has.
				s.fail("F-dirty", "link %s %s succeeded over the host's write %s v%d", p, q, q, v)
				return
			}
			// Both names, between the link and the unlink, were the
			// box's calls and states when the box made them (applied);
			// made on the host alone, the op took no round trip and
			// no look saw them.
			s.hostMoved(op, p, q)
			if queued {
				s.queuedRemove(op, p)
			}
			s.sawOwnOf(op, p, q)
		}
	})
}

// inBox reports whether the box has f (a push made it there).
func (s *sim) inBox(f *file) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inBox
}

// sawOwnOf notes the states op made in the box at paths (F-own).
func (s *sim) sawOwnOf(op *simOp, paths ...string) {
	for _, p := range paths {
		if idx, ok := op.applied[p]; ok {
			s.seen[p] = max(s.seen[p], idx)
		}
	}
}

// batch is a batch's timer firing: the pusher's round (behind.run) on a
// goroutine of the simulator's.
func (s *sim) batch() {
	b := s.c.behind
	b.mu.Lock()
	var paths []string
	for f := range b.pending {
		paths = append(paths, f.path())
	}
	b.mu.Unlock()
	paths = append(paths, s.queuedPaths()...)
	slices.Sort(paths)
	if len(paths) == 0 || s.busy(s.locks(paths...)...) {
		return
	}
	s.wb.stats.batches++
	s.start("batch "+strings.Join(paths, ","), s.locks(paths...), func(op *simOp) {
		b.mu.Lock()
		files := make([]*file, 0, len(b.pending))
		for f := range b.pending {
			files = append(files, f)
		}
		clear(b.pending)
		b.bytes, b.first = 0, time.Time{}
		b.mu.Unlock()
		b.push(files)
		// A failure plans a retry on the real clock: the simulator
		// fires it as a later batch step instead.
		b.mu.Lock()
		if b.timer != nil {
			b.timer.Stop()
		}
		b.mu.Unlock()
		op.check = func() {
			for _, p := range op.refused {
				if !slices.Contains(op.told, p) {
					s.fail("F-fail", "the box refused the batch's write of %s and PushFailed was not told", p)
				}
			}
		}
	})
}

// barrier is a flush, fsync, command, release or umount: FlushAll.
func (s *sim) barrier() {
	paths := s.locks(slices.Concat(s.c.Dirty(), slices.Collect(maps.Keys(s.wb.dirty)), s.queuedPaths())...)
	if s.busy(paths...) {
		return
	}
	acked := maps.Clone(s.wb.dirty)
	s.wb.stats.barriers++
	s.start("barrier", paths, func(op *simOp) {
		var err error
		if *simBehindPlant != "noflush" {
			err = s.c.FlushAll(s.ctx)
		}
		op.check = func() {
			if err != nil {
				s.wb.stats.failedBarriers++
				s.logf("barrier: %v", err)
				if len(op.refused) == 0 && len(op.lost) == 0 {
					s.fail("F-barrier", "the barrier failed with no write refused and no linked name lost: %v", err)
				}
				return
			}
			for p, v := range acked {
				if !s.wb.landed[v] && !s.wb.replaced[v] {
					s.fail("F-barrier", "the barrier returned success, and the box never held %s v%d, acknowledged before it began (%s)", p, v, s.describe(p))
				}
			}
		}
	})
}

func (s *sim) toggleRefuse() {
	s.wb.refuse = !s.wb.refuse
	if s.wb.refuse {
		s.logf("box refuses the host's writes")
	} else {
		s.logf("box takes the host's writes again")
	}
}

// finishBehind is the umount at a schedule's end: the box takes writes
// again, and the last barrier leaves it holding every write the host
// acknowledged and kept.
func (s *sim) finishBehind() {
	if !s.wb.on {
		return
	}
	s.wb.refuse = false
	s.logf("umount")
	s.barrier()
	s.finish()
	if s.broke == nil && len(s.wb.removed) > 0 {
		s.fail("F-barrier", "after the last barrier the box still has names the host removed %v", slices.Sorted(maps.Keys(s.wb.removed)))
	}
	if s.broke == nil && len(s.wb.dirty) > 0 {
		s.fail("F-barrier", "after the last barrier the box lacks the host's acknowledged writes %v", s.wb.dirty)
	}
	if d := s.c.Dirty(); s.broke == nil && len(d) > 0 {
		s.fail("F-barrier", "after the last barrier the cache still holds dirty files %v", d)
	}
}

// TestSimulatorBehind runs seeded schedules in write=behind and holds
// every one to the contract; a failing seed replays with -sim.seed.
func TestSimulatorBehind(t *testing.T) {
	defer func(n int) { pruneMin = n }(pruneMin)
	pruneMin = 1
	base := simDir(t)
	seeds := []int64{*simSeed}
	if *simSeed == 0 {
		seeds = nil
		first := int64(1)
		if *simRandom {
			first = time.Now().UnixNano() % 1_000_000_000
		}
		n := *simBehindSchedules
		if testing.Short() {
			n = min(n, 300)
		}
		t.Logf("seeds %d to %d", first, first+int64(n)-1)
		for i := range n {
			seeds = append(seeds, first+int64(i))
		}
	}
	start := time.Now()
	counts := map[string]int{}
	var st simBehindStats
	defer func() {
		t.Logf("%d schedules in %v: %d batches, %d barriers (%d failed), %d writes refused, %d box changes overwritten and logged",
			len(seeds), time.Since(start).Round(time.Millisecond), st.batches, st.barriers, st.failedBarriers, st.refused, st.overwrites)
		t.Logf("links: %d moved a file (%d on the host alone), %d refused (EEXIST), %d linked names the box took meanwhile",
			st.linkMoves, st.linkHere, st.linkExists, st.lost)
		t.Logf("%d removes queued for a batch", st.queuedRms)
		if len(seeds) > 100 && st.queuedRms == 0 {
			t.Error("the schedules do not queue removes")
		}
		if len(seeds) > 100 && (st.failedBarriers == 0 || st.refused == 0 || st.batches == 0) {
			t.Error("the schedules do not exercise batches, refusals and failed barriers")
		}
		if len(seeds) > 100 && (st.linkMoves == 0 || st.linkHere == 0 || st.linkExists == 0 || st.lost == 0) {
			t.Error("the schedules do not exercise links (made on the host alone too), refused links and linked names the box took")
		}
		if len(counts) > 0 {
			t.Errorf("violations by rule: %v", counts)
		}
	}()
	for _, seed := range seeds {
		dir, _ := os.MkdirTemp(base, "s")
		s := runSchedule(t, seed, dir, plantedBug(*simBug), true)
		os.RemoveAll(dir)
		st.batches += s.wb.stats.batches
		st.barriers += s.wb.stats.barriers
		st.failedBarriers += s.wb.stats.failedBarriers
		st.refused += s.wb.stats.refused
		st.overwrites += s.wb.stats.overwrites
		st.linkMoves += s.wb.stats.linkMoves
		st.linkExists += s.wb.stats.linkExists
		st.lost += s.wb.stats.lost
		st.linkHere += s.wb.stats.linkHere
		st.queuedRms += s.wb.stats.queuedRms
		s.judge(t, "TestSimulatorBehind", seed, counts)
	}
}

// queued reports whether the cache holds a remove of p for the box.
func (s *sim) queued(p string) bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.c.prms.Has(p)
}

// queuedPaths returns the names whose removes the cache holds for the box.
func (s *sim) queuedPaths() []string {
	var out []string
	for _, op := range s.c.pendingRmOps() {
		out = append(out, op.rel)
	}
	return out
}

// queuedRemove notes op's remove of p, done on the host and queued for
// the box: the host shows p missing from now on (F-own), and until the
// batch's remove is answered a look shows that, whatever the box does
// meanwhile (F-dirty).
func (s *sim) queuedRemove(op *simOp, p string) {
	op.applied[p] = s.add(p, 0, true)
	s.wb.removed[p] = true
	s.wb.stats.queuedRms++
}

// rmAnswered notes the box's answer to a remove of p: where it is the
// host's queued remove (a batch's, or a barrier's before an op that
// needs it done), it ends when its op does.
func (s *sim) rmAnswered(p string, err error) {
	if !s.wb.removed[p] || (err != nil && !errors.Is(err, fs.ErrNotExist)) {
		return
	}
	op := s.opOf()
	if op == nil {
		return
	}
	op.rmsDone = append(op.rmsDone, p)
	if err != nil {
		// The box had removed the name itself: the remove changed
		// nothing, and a box change after it is after the remove (a
		// look begun since may show it), as one after a remove that
		// removed something is.
		op.applied[p] = s.add(p, 0, true)
	}
}

// rmsLanded ends the queued removes op's answers reached the host.
func (s *sim) rmsLanded(op *simOp) {
	for _, p := range op.rmsDone {
		delete(s.wb.removed, p)
	}
}
