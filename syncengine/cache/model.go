package cache

import (
	"time"

	"github.com/boxfs/boxfs/providers"
)

// model orders what the cache learns of the box; it is the one place the
// freshness contract (docs/design.md §6: F-mono, F-noundo, F-watch,
// F-trust, F-gap, F-echo) is decided. Three sources race: fetches the
// cache asks (a listing, a stat, a walk, a read-ahead), the host's own
// changes (each a fetch of its own: Cache.intend), and the watch's
// reports. The model orders them with no clock: each event takes one tick
// of a logical counter, a fetch keeps the tick it began at (its ticket),
// and while anything is in flight the model keeps, per path, the tick of
// the last host change, of the newest fetch installed and of the last
// report (mark). A fetch's answer is then judged path by path (verdict):
//
//   - begun before a gap of the watch, or before a walk of the workspace
//     that was installed first: nothing of it is installed (stale);
//   - the host changed the path (or a directory above it) since, and
//     began that change after the fetch began, or a fetch begun later was
//     installed for it first with no report after it: what the cache
//     holds wins (hostWins), stale where a report made it so;
//   - the watch reported the path since, or a host change overlapped the
//     fetch: the answer is installed, then made stale again, so the path
//     is asked of the box at its next use (reported);
//   - otherwise it is installed (install), and trusted past the attribute
//     timeout when the watch was healthy for the whole fetch (trusted).
//
// A host change is judged the same way when it ends (newsSince): a report,
// a gap or a newer fetch while it was in flight leaves what it recorded
// stale. What a fetch or change brings is as old as its ask.
//
// What the cache holds of each path (attrEntry, dirList) carries the rest
// of the per-path state: when it was fetched, whether a report or a
// setattr made it stale, and whether the watch vouches for it.
//
// The model is guarded by Cache.mu.
type model struct {
	tick     uint64
	inflight int
	open     map[uint64]struct{} // the tickets in flight
	// marks counts the marks in since; past pruneAt, end drops those
	// older than every fetch in flight.
	marks, pruneAt int
	// since holds, while fetches are in flight, the last change of each
	// path the host made or the watch reported: directory -> name -> mark.
	since map[string]map[string]*mark
	// listed holds, while fetches are in flight, the ticket of the
	// newest listing installed for each directory: a walk begun before
	// it keeps that listing.
	listed map[string]uint64
	// gapAt is the tick of the last gap of the watch: no fetch begun
	// before it is installed.
	gapAt uint64
	// walkAt is the ticket of the newest installed walk of the workspace.
	walkAt uint64
	// hostOps are the host changes in flight: path -> the tick the
	// newest began (Cache.intend).
	hostOps map[string]uint64
	// held are reports of paths with a host change in flight: the last
	// one of each, judged once the change records what it left (hold).
	held map[string]heldReport

	// healthy: the watch reports every change of the box; healthyAt is
	// the tick it became so.
	healthy   bool
	healthyAt uint64

	// lastWalk is when the last walk was installed; walkOff is when a
	// revalidating walk may run again after the tree was too large.
	lastWalk, walkOff time.Time

	// hostAt is when the host last changed each path, for echoWindow:
	// a report is dropped as an echo only of the host's own change.
	hostAt      map[string]time.Time
	hostPruneAt int

	// learned are the paths fetches found changed in the box since the
	// last Refresh (learned.go); reports counts the watch's reports.
	learned learnedSet
	reports ReportCounts

	// bug plants a deliberate bug (simulator tests only: they show that
	// the simulator finds each).
	bug plantedBug
}

// ticket is the tick a fetch began at.
type ticket uint64

type mark struct {
	// newer is the tick of the last host change, fetched the ticket of
	// the newest fetch installed, box the tick of the last report.
	newer, fetched, box uint64
	// pushed is the tick a push of the host's writes of the path was
	// recorded at, pushBegan the tick that push began at (pushEnded).
	pushed, pushBegan uint64
	// began is when the host change recorded at newer began (0: known
	// to be newer than any fetch begun before newer). A fetch begun
	// after it began may have seen its effect, or a box change after
	// it: its answer is installed stale, neither taken nor dropped.
	began uint64
}

// verdict is what becomes of a fetch's answer for one path.
type verdict int

const (
	install  verdict = iota // keep the answer
	reported                // keep it, then lay the report over it: asked again at next use
	hostWins                // keep what the host knows: it changed the path since
	stale                   // keep nothing: a gap or a newer walk came first
)

// plantedBug names a deliberate bug the simulator's tests plant.
type plantedBug int

const (
	noBug plantedBug = iota
	// bugInstallOld installs a fetch begun before a host change over it.
	bugInstallOld
	// bugDropGap ignores a gap: what was held stays as it was.
	bugDropGap
	// bugTrustAcross trusts, once the watch is healthy again, what was
	// fetched while it was not.
	bugTrustAcross
)

func newModel() model {
	return model{since: map[string]map[string]*mark{}, listed: map[string]uint64{}, hostOps: map[string]uint64{},
		held: map[string]heldReport{}, open: map[uint64]struct{}{}, pruneAt: pruneMin, hostAt: map[string]time.Time{}}
}

// begin notes a fetch starting and returns its ticket.
func (m *model) begin() ticket {
	m.inflight++
	m.tick++
	m.open[m.tick] = struct{}{}
	return ticket(m.tick)
}

// end notes the fetch with ticket t ended (installed or not). Call it
// after judging the fetch's paths: the last end forgets the marks, and
// while fetches overlap without end, marks older than every fetch in
// flight are dropped once they are many (they can judge nothing now).
func (m *model) end(t ticket) {
	m.inflight--
	delete(m.open, uint64(t))
	if m.inflight == 0 {
		clear(m.since)
		clear(m.listed)
		m.marks = 0
		return
	}
	if m.marks > m.pruneAt || m.marks > pruneMin && m.oldest(t) {
		m.prune()
	}
}

// oldest reports whether t is older than every fetch in flight: marks it
// kept may be free now.
func (m *model) oldest(t ticket) bool {
	for o := range m.open {
		if o < uint64(t) {
			return false
		}
	}
	return true
}

// prune drops the marks no fetch in flight is older than.
func (m *model) prune() {
	oldest := uint64(0)
	for t := range m.open {
		if oldest == 0 || t < oldest {
			oldest = t
		}
	}
	m.marks = 0
	for dir, names := range m.since {
		for name, mk := range names {
			if max(mk.newer, mk.fetched, mk.box, mk.pushed) < oldest {
				delete(names, name)
			} else {
				m.marks++
			}
		}
		if len(names) == 0 {
			delete(m.since, dir)
		}
	}
	for dir, l := range m.listed {
		if l < oldest {
			delete(m.listed, dir)
		}
	}
	m.pruneAt = max(pruneMin, 2*m.marks)
}

// pruneMin is the fewest marks that make end prune (a variable: the
// simulator prunes at every chance).
var pruneMin = 4096

// hostChanged notes a change the host made to rel.
func (m *model) hostChanged(rel string) {
	m.tick++
	if p := m.markOf(rel); p != nil {
		p.newer, p.began = m.tick, m.hostOps[rel]
	}
}

// pushEnded notes that the push of the host's writes of rel was recorded
// (after hostChanged, which noted when it began): what a fetch begun
// before the push brought of rel does not replace what the push recorded
// (judgeMark).
func (m *model) pushEnded(rel string) {
	if p := m.markOf(rel); p != nil {
		p.pushed, p.pushBegan = m.tick, p.began
	}
}

// hostBegin notes a host change of rels beginning; it returns its ticket,
// for hostEnd. The change counts as a fetch in flight meanwhile.
func (m *model) hostBegin(rels []string) ticket {
	t := m.begin()
	for _, rel := range rels {
		m.hostOps[rel] = uint64(t)
	}
	return t
}

// dirListed notes that a listing of dir with ticket t was installed.
func (m *model) dirListed(dir string, t ticket) {
	if m.inflight >= 2 && m.listed[dir] < uint64(t) {
		m.listed[dir] = uint64(t)
	}
}

// listedAfter reports whether a listing of dir begun after t was
// installed (F-mono: t's answer is older).
func (m *model) listedAfter(dir string, t ticket) bool {
	return m.listed[dir] > uint64(t) && m.bug != bugInstallOld
}

// listedSince returns the directories a listing begun after t was
// installed for.
func (m *model) listedSince(t ticket) []string {
	var out []string
	for dir, l := range m.listed {
		if l > uint64(t) && m.bug != bugInstallOld {
			out = append(out, dir)
		}
	}
	return out
}

// echoWindow is how long after the host changed a path a report of the
// state it left is taken for the echo of that change (the watch reports
// within about 60 ms; the rest is room for a loaded machine).
const echoWindow = 10 * time.Second

// noteHost notes the host changed rel at now; old notes are dropped once
// they are many (then twice as many as were kept, so a burst costs a
// constant per change).
func (m *model) noteHost(rel string, now time.Time) {
	if len(m.hostAt) >= max(pruneMin, m.hostPruneAt) {
		for p, at := range m.hostAt {
			if now.Sub(at) >= echoWindow {
				delete(m.hostAt, p)
			}
		}
		m.hostPruneAt = 2 * len(m.hostAt)
	}
	m.hostAt[rel] = now
}

// hostRecent reports whether the host changed rel within echoWindow.
func (m *model) hostRecent(rel string, now time.Time) bool {
	at, ok := m.hostAt[rel]
	return ok && now.Sub(at) < echoWindow
}

// hostBusy reports whether a host change of rel is in flight.
func (m *model) hostBusy(rel string) bool {
	_, ok := m.hostOps[rel]
	return ok
}

// heldReport is a report held while a host change of its path is in
// flight, and the tick it was noted at.
type heldReport struct {
	ch   providers.Change
	tick uint64
}

// hold notes a report of rel, whose host change is in flight, to be
// judged when the change ends (heldFor): the watch's report and the
// change's answer come by separate ways, and the report of the state the
// change left often comes first.
func (m *model) hold(ch providers.Change) {
	m.boxReported(ch.Path)
	m.held[ch.Path] = heldReport{ch: ch, tick: m.tick}
}

// heldFor returns (and forgets) the report held for rel if the host
// change with ticket t is its newest; one for a newer change waits for
// that change's end.
func (m *model) heldFor(rel string, t ticket) (heldReport, bool) {
	h, ok := m.held[rel]
	if !ok || m.hostOps[rel] != uint64(t) {
		return heldReport{}, false
	}
	delete(m.held, rel)
	return h, true
}

// heldIdle returns (and forgets) the report held for rel when no host
// change of rel is in flight: one held while an open wrote the file.
func (m *model) heldIdle(rel string) (heldReport, bool) {
	h, ok := m.held[rel]
	if !ok || m.hostBusy(rel) {
		return heldReport{}, false
	}
	delete(m.held, rel)
	return h, true
}

// hostEnd notes the host change with ticket t ended.
func (m *model) hostEnd(rels []string, t ticket) {
	for _, rel := range rels {
		if m.hostOps[rel] == uint64(t) {
			delete(m.hostOps, rel)
		}
	}
	m.end(t)
}

// installed notes that a fetch with ticket t was installed for rel: a
// fetch begun before it and answered after is older (F-mono).
func (m *model) installed(rel string, t ticket) {
	if m.inflight < 2 {
		return // no other fetch to judge
	}
	if p := m.markOf(rel); p.fetched < uint64(t) {
		p.fetched = uint64(t)
	}
}

// boxReported notes a report of the watch naming rel (and, for a
// directory, all below it).
func (m *model) boxReported(rel string) {
	m.tick++
	if p := m.markOf(rel); p != nil {
		p.box = m.tick
	}
}

func (m *model) markOf(rel string) *mark {
	if m.inflight == 0 {
		return nil // no fetch to judge: nothing to keep
	}
	dir, name := splitMark(rel)
	names := m.since[dir]
	if names == nil {
		names = map[string]*mark{}
		m.since[dir] = names
	}
	mk := names[name]
	if mk == nil {
		mk = &mark{}
		names[name] = mk
		m.marks++
	}
	return mk
}

// splitMark is split, with the root kept under ("", "").
func splitMark(rel string) (dir, name string) {
	if rel == "" {
		return "", ""
	}
	return split(rel)
}

// gap notes a gap of the watch (F-gap): no fetch in flight is installed,
// and the watch is not healthy until setHealthy(true). It reports whether
// the cache is to make everything stale (always, but for a planted bug).
func (m *model) gap() bool {
	m.tick++
	if m.bug == bugDropGap {
		return false
	}
	m.gapAt = m.tick
	m.healthy = false
	return true
}

// setHealthy says whether the watch now reports every change.
func (m *model) setHealthy(on bool) {
	m.tick++
	m.healthy = on
	m.healthyAt = m.tick
}

// judge returns what becomes of a fetch's answer for rel.
func (m *model) judge(rel string, t ticket) verdict {
	if uint64(t) < m.gapAt || uint64(t) < m.walkAt {
		return stale
	}
	v := install
	for p := rel; ; {
		dir, name := splitMark(p)
		switch m.judgeMark(m.since[dir][name], t) {
		case hostWins:
			return hostWins
		case reported:
			v = reported
		}
		if p == "" {
			return v
		}
		p = dir
	}
}

// newsSince reports whether, since t, the watch reported rel (or a
// directory above it), had a gap (which reports everything), or a fetch
// begun after t was installed for it: what a host change begun at t
// recorded may then be older than what the cache learned meanwhile. A
// report of rel itself at tick echo (a held report found to be the echo
// of this change) is not news.
func (m *model) newsSince(rel string, t ticket, echo uint64) bool {
	if m.gapAt > uint64(t) || m.walkAt > uint64(t) {
		return true
	}
	for p := rel; ; {
		dir, name := splitMark(p)
		if mk := m.since[dir][name]; mk != nil && (mk.box > uint64(t) && (p != rel || mk.box != echo) || mk.fetched > uint64(t)) {
			return true
		}
		if p == "" {
			return false
		}
		p = dir
	}
}

// judgeMark judges a fetch with ticket t against one path's mark: what
// the cache holds wins when it is certainly newer; a report after the
// fetch began, or a host change that may overlap the fetch, makes the
// answer installed stale.
//
// A host change begun after the fetch began is newer than the fetch's
// answer whatever the watch reported since: the answer is from before
// the change, and installing it would undo the change (F-noundo; F-dirty
// for a file holding writes the box lacks). A report after the change
// made what the cache holds stale, so it is asked again at its next use
// (F-watch). What a fetch installed later holds wins only with no report
// after it: it is the box's word, not the host's own change.
//
// A push begun after the fetch began and recorded since is the exception:
// the fetch's answer for its path may be from before the push, which the
// host showed unpushed (F-dirty), and a report since (the push's own
// echo, or a box change after it) does not make the answer win either:
// what the cache holds is then the report's state, or stale and asked
// again at its next use (F-watch). A push out before the fetch began may
// have landed before it, and a box change after it with it: that answer
// stays reported, as for any host change overlapping the fetch.
func (m *model) judgeMark(mk *mark, t ticket) verdict {
	if mk == nil {
		return install
	}
	if m.bug == bugInstallOld {
		mk = &mark{box: mk.box}
	}
	newer := mk.newer > uint64(t)
	switch {
	case mk.pushed > uint64(t) && mk.pushBegan > uint64(t):
		return hostWins
	case newer && (mk.began == 0 || mk.began > uint64(t)),
		mk.fetched > uint64(t) && mk.box <= mk.fetched:
		return hostWins
	case newer, mk.fetched > uint64(t), mk.box > uint64(t):
		return reported
	}
	return install
}

// changedIn calls fn for each name in dir the host changed or the watch
// reported after t, with the verdict for it.
func (m *model) changedIn(dir string, t ticket, fn func(name string, v verdict)) {
	for name, mk := range m.since[dir] {
		if name == "" && dir == "" {
			continue
		}
		if v := m.judgeMark(mk, t); v != install {
			fn(name, v)
		}
	}
}

// changedDirs returns the directories with a name changed or reported
// since t.
func (m *model) changedDirs() []string {
	out := make([]string, 0, len(m.since))
	for dir := range m.since {
		out = append(out, dir)
	}
	return out
}

// trusted reports whether what a fetch with ticket t brought is vouched
// for by the watch past the attribute timeout (F-trust): the watch was
// healthy when the fetch began and has stayed so.
func (m *model) trusted(t ticket) bool {
	if !m.healthy {
		return false
	}
	return uint64(t) > m.healthyAt || m.bug == bugTrustAcross
}

// vouches reports whether the watch vouches now for an entry installed
// with trust (F-trust): it is healthy, and was for the entry's whole
// fetch.
func (m *model) vouches(trust bool) bool {
	return m.healthy && (trust || m.bug == bugTrustAcross)
}

// walkInstalled notes a walk with ticket t installed; false when a walk
// begun later was installed first (t's is then dropped).
func (m *model) walkInstalled(t ticket, now time.Time) bool {
	if uint64(t) < m.walkAt {
		return false
	}
	m.walkAt = uint64(t)
	m.lastWalk = now
	return true
}
