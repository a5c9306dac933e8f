package boxes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// Box states, as Info says them.
const (
	StateDeclared  = "declared" // named by the config, made at first use
	StateCreating  = "creating"
	StateReady     = "ready"
	StateUnhealthy = "unhealthy" // ready, but not answering: calls fail fast
	StateGone      = "gone"      // destroyed, or found ended
)

// Box is one named box: its provider's box, the hands that reach into it,
// the cache of its workspace, its commands, its health.
type Box struct {
	m    *Manager
	name string

	connectMu sync.Mutex    // one connect at a time
	startMu   sync.RWMutex  // read-held while a command starts; Suspend write-holds it to settle the state
	life      chan struct{} // the life lock: one suspend, resume or snapshot at a time (lockLife)

	mu      sync.Mutex
	rec     record
	state   string
	box     providers.Box
	hands   *hands.Hands
	cache   *cache.Cache
	facts   providers.Facts
	errText string
	health  health
	cmds    *Commands
	resumed *resumedFrom // how this process got the box back, if it did

	launches launches // names made and input pending, host-side

	stopWatch context.CancelFunc // ends the watch of the workspace; nil without one
	fresh     freshness          // how box-side changes reach the host
	keptAlive time.Time          // when the provider was last told the box is in use (keepalive.go)
}

// health is whether the box answers. After a failure that says the box (not
// the request) is in trouble, calls fail fast until a probe succeeds.
type health struct {
	bad     bool
	since   time.Time
	lastErr error
	probing bool
	fails   int
}

func (m *Manager) newBox(r record) *Box {
	b := &Box{m: m, name: r.Name, rec: r, state: StateReady, life: make(chan struct{}, 1)}
	switch {
	case r.Spec != nil && r.ID == "":
		b.state = StateDeclared
	case r.Suspended != nil:
		b.state = StateSuspended
	}
	dir := "" // a declared box's commands find their place once it is made
	if r.ID != "" {
		dir = m.cmdsDir(r)
	}
	b.cmds = newCommands(b, dir)
	return b
}

// Name returns the box's name.
func (b *Box) Name() string { return b.name }

// Info is what the listings say of a box.
type Info struct {
	Name     string    `json:"name"`
	Provider string    `json:"provider"`
	ID       string    `json:"id"` // "" for a declared box not made yet
	State    string    `json:"state"`
	Created  time.Time `json:"created,omitzero"`
}

// Info returns the box's name, provider, id and state.
func (b *Box) Info() Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.state
	if b.health.bad && st == StateReady {
		st = StateUnhealthy
	}
	return Info{Name: b.name, Provider: b.rec.Provider, ID: b.rec.ID, State: st, Created: b.rec.Created}
}

// Status is what a box's ctl says of it.
type Status struct {
	Info
	Via        string // the path hands takes; "" before the first connect
	Dirty      int    // files written on the host and not pushed yet
	LastCmd    int    // the newest command's number; 0 for none
	LastStatus string // and its status
}

// Status returns the box's state, its path, its dirty files' count and its
// newest command.
func (b *Box) Status() Status {
	st := Status{Info: b.Info()}
	b.mu.Lock()
	c := b.cache
	if b.hands != nil {
		st.Via = b.hands.Via()
	}
	b.mu.Unlock()
	if c != nil {
		st.Dirty = len(c.Dirty())
	}
	st.LastCmd, st.LastStatus = b.cmds.Last()
	return st
}

func (b *Box) record() record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec
}

func (b *Box) setBox(box providers.Box) {
	b.mu.Lock()
	b.box = box
	b.state = StateReady
	if b.rec.ID != box.ID() {
		b.rec.ID, b.rec.Facts, b.rec.Agent = box.ID(), nil, "" // another box's
	}
	b.mu.Unlock()
}

// Isolation returns how the box is separated from the host, as its facts
// say once it was reached ("" before, or when the provider does not say).
func (b *Box) Isolation() providers.Isolation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.facts.Isolation
}

// Err returns the text of the last error on the box ("" for none).
func (b *Box) Err() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errText
}

// SetErr keeps err's text as the box's last error and logs it; nil does
// nothing.
func (b *Box) SetErr(err error) {
	if err == nil {
		return
	}
	b.mu.Lock()
	b.errText = err.Error()
	b.mu.Unlock()
	var e *providers.Error
	attrs := []any{"box", b.name, "code", providers.CodeOf(err).String(), "err", err}
	if errors.As(err, &e) {
		attrs = append(attrs, "op", e.Op, "path", e.Path)
	}
	b.m.log.Warn("box operation failed", attrs...)
}

// panicked records a panic in work done for the box (err from guard): the
// work ended, the process serving every box goes on.
func (b *Box) panicked(err error) {
	b.m.log.Error("panic in work for one box; that work ended", "box", b.name, "err", err)
	b.mu.Lock()
	b.errText = fmt.Sprintf("internal error (a panic, logged) in work for this box: %s", strings.SplitN(err.Error(), "\n", 2)[0])
	b.mu.Unlock()
}

// Commands returns the box's commands.
func (b *Box) Commands() *Commands { return b.cmds }

// connect makes sure the box exists and its hands and cache are open: a
// declared box is made, a recorded one attached, the journal pushed.
func (b *Box) connect(ctx context.Context) error {
	b.mu.Lock()
	if b.cache != nil {
		b.mu.Unlock()
		return nil
	}
	if b.state == StateGone {
		b.mu.Unlock()
		return providers.Errorf(providers.Gone, "boxes.connect", "box %q is gone", b.name)
	}
	b.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*b.m.opts.OpTimeout)
	defer cancel()
	h, err := b.Hands(ctx)
	if err != nil {
		return err
	}
	b.connectMu.Lock()
	defer b.connectMu.Unlock()
	b.mu.Lock()
	if b.cache != nil {
		b.mu.Unlock()
		return nil
	}
	rec := b.rec
	b.mu.Unlock()
	c, err := b.openCache(h, rec)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.cache = c
	switch {
	case b.m.opts.NoWatch:
		b.fresh = freshness{note: "the watch is off for the mount (watch=off)"}
	case rec.Watch == WatchOff:
		b.fresh = freshness{note: "the watch is off for this box (new ... watch=off)"}
	case !h.CanWatch():
		b.fresh = freshness{note: fmt.Sprintf("the box cannot be watched: it is reached %s, without the agent, and its provider watches nothing", h.Via())}
	default:
		b.fresh = freshness{note: "the watch is starting"}
		wctx, stop := context.WithCancel(context.Background())
		b.stopWatch = stop
		guard.Go(func() { b.watch(wctx, h, c, c.Root()) }, b.panicked)
	}
	b.mu.Unlock()
	if len(c.Dirty()) > 0 {
		if err := c.Recover(ctx); err != nil {
			b.SetErr(fmt.Errorf("journaled writes from an earlier run not pushed yet: %w", err))
		}
	}
	return nil
}

// WriteMode returns when a close(2) in the box's work/ returns:
// WriteThrough or WriteBehind.
func (b *Box) WriteMode() string {
	rec := b.record()
	switch {
	case rec.Write != "":
		return rec.Write
	case b.m.opts.WriteBehind:
		return WriteBehind
	}
	return WriteThrough
}

// openCache opens the cache of the workspace h reaches.
func (b *Box) openCache(h *hands.Hands, rec record) (*cache.Cache, error) {
	root := h.Facts().Workspace
	if root == "" {
		return nil, providers.Errorf(providers.Unsupported, "boxes.connect", "box %q reports no workspace", b.name)
	}
	return cache.Open(h, cache.Options{
		Dir:           b.m.cacheDir(rec),
		ShownPath:     b.m.shownPath(rec),
		Root:          root,
		Box:           b.name,
		AttrTimeout:   b.m.opts.AttrTimeout,
		Logger:        b.m.log,
		Now:           b.m.opts.Now,
		WriteBehind:   b.WriteMode() == WriteBehind,
		BehindDelay:   b.m.opts.BehindDelay,
		BehindMaxWait: b.m.opts.BehindDelay,
		Budget:        b.m.budget,
		PushFailed: func(rel string, err error) {
			var rm *cache.RemoveError
			switch {
			case errors.As(err, &rm) && rm.Queued:
				b.SetErr(fmt.Errorf("work/%s: not removed in the box yet (the box did not answer; the remove stays queued and is sent again): %w", rel, err))
			case errors.As(err, &rm):
				b.SetErr(fmt.Errorf("work/%s: the box refused the remove queued for it (the name shows again as the box has it, and the next flush, fsync or command fails): %w", rel, err))
			default:
				b.SetErr(fmt.Errorf("work/%s: not pushed (write-behind; the file stays dirty, is tried again, and the next flush, fsync or command fails until it is pushed): %w", rel, err))
			}
		},
		Overwrote: func(rel string) {
			// Logged by the cache; err tells a reader of the box.
			b.mu.Lock()
			b.errText = fmt.Sprintf("work/%s: the push at close replaced a change the box made to the file after this host read it (the later close wins)", rel)
			b.mu.Unlock()
		},
		Recovered: func(rel, kept string) {
			// Logged by the cache; err tells a reader of the box.
			b.mu.Lock()
			b.errText = fmt.Sprintf("work/%s: the box changed the file after this host's unpushed writes to it were journaled (the daemon stopped before pushing them): the box's file keeps the name, the host's writes are in work/%s", rel, kept)
			b.mu.Unlock()
		},
	})
}

// Hands returns hands for the box without opening its cache: a declared
// box is made, a recorded one attached.
func (b *Box) Hands(ctx context.Context) (*hands.Hands, error) {
	b.mu.Lock()
	h := b.hands
	b.mu.Unlock()
	if h != nil {
		return h, nil
	}
	if err := b.awake(ctx); err != nil {
		return nil, err
	}
	b.connectMu.Lock()
	defer b.connectMu.Unlock()
	b.mu.Lock()
	if b.hands != nil {
		h := b.hands
		b.mu.Unlock()
		return h, nil
	}
	if b.state == StateGone {
		b.mu.Unlock()
		return nil, providers.Errorf(providers.Gone, "boxes", "box %q is gone", b.name)
	}
	box, rec := b.box, b.rec
	b.mu.Unlock()
	if box == nil {
		var err error
		if box, err = b.attachOrCreate(ctx); err != nil {
			return nil, err
		}
		rec = b.record()
	}
	// The facts the last open read let this one start at once; the box's
	// own, read again in the background, are recorded for the next.
	opts := hands.Options{AgentBinary: b.m.opts.AgentBinary, Logger: b.m.log, WatchLimit: b.m.opts.WatchLimit,
		KnownFacts: rec.Facts, AgentAt: rec.Agent, OnFacts: func(f providers.Facts) { b.factsRead(f) }}
	if mt := b.m.opts.Meter; mt != nil {
		opts.OnExec = func(err error) { mt.Exec(rec.Provider, rec.ID, err) }
	}
	h, err := hands.New(ctx, box, opts)
	if err != nil {
		return nil, err
	}
	// Facts read now (none were known) and where the agent runs go into
	// the record in one write.
	f, at := h.Facts(), h.AgentPath()
	if fresh := rec.Facts == nil; fresh || at != rec.Agent {
		if err := b.update(func(r *record) {
			if fresh {
				r.Facts = &f
			}
			r.Agent = at
		}); err != nil {
			b.m.log.Warn("box record not saved", "box", b.name, "err", err)
		}
	}
	b.mu.Lock()
	b.hands, b.facts = h, h.Facts()
	b.mu.Unlock()
	return h, nil
}

// factsRead keeps the facts the box told, and records them when they
// changed.
func (b *Box) factsRead(f providers.Facts) {
	b.mu.Lock()
	if b.hands != nil {
		b.facts = f
	}
	rec := b.rec
	b.mu.Unlock()
	if sameFacts(rec.Facts, f) {
		return
	}
	if err := b.update(func(r *record) { r.Facts = &f }); err != nil {
		b.m.log.Warn("box record not saved", "box", b.name, "err", err)
	}
}

// sameFacts reports whether a recorded box's facts are f.
func sameFacts(rec *providers.Facts, f providers.Facts) bool {
	if rec == nil {
		return false
	}
	a, err1 := json.Marshal(rec)
	b, err2 := json.Marshal(f)
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

// attachOrCreate finds the box again by its recorded id, or makes a
// declared one and records its id before anything runs in it.
func (b *Box) attachOrCreate(ctx context.Context) (providers.Box, error) {
	rec := b.record()
	p, err := b.m.provider(rec.Provider)
	if err != nil {
		return nil, err
	}
	var box providers.Box
	if rec.ID == "" && rec.Spec != nil {
		box, err = b.m.make(ctx, p, rec.Provider, b.name, *rec.Spec)
		if err != nil {
			return nil, err
		}
		rec.ID, rec.Created, rec.Spec = box.ID(), time.Now().UTC(), nil
		if err := b.m.saveRecord(rec); err != nil {
			b.m.log.Error("box record not saved", "box", b.name, "err", err)
		}
		b.mu.Lock()
		b.rec = rec
		b.mu.Unlock()
	} else {
		box, err = p.Attach(ctx, rec.ID)
		if err != nil {
			if providers.CodeOf(err) == providers.NotFound {
				b.markGone(providers.E(providers.Gone, "boxes.attach", err), time.Time{})
			}
			return nil, err
		}
		b.mu.Lock()
		b.resumed = &resumedFrom{How: "reconnect", Box: rec.ID, At: time.Now().UTC()}
		b.mu.Unlock()
	}
	b.setBox(box)
	return box, nil
}

// Parts returns the open hands and cache, connecting first (and resuming
// a suspended box whose record says resume=auto).
func (b *Box) Parts(ctx context.Context) (*hands.Hands, *cache.Cache, error) {
	if err := b.awake(ctx); err != nil {
		return nil, nil, err
	}
	if err := b.connect(ctx); err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == StateGone {
		return nil, nil, providers.Errorf(providers.Gone, "boxes", "box %q is gone", b.name)
	}
	return b.hands, b.cache, nil
}

// markGone marks the box gone for err, and tells the meter it ended at at
// (zero: now), once.
func (b *Box) markGone(err error, at time.Time) {
	b.mu.Lock()
	was := b.state
	b.state = StateGone
	b.health.lastErr = err
	rec := b.rec
	b.mu.Unlock()
	if was != StateGone {
		b.m.ended(rec.Provider, rec.ID, at)
	}
}

// Do runs one operation on the box within the operation bound, plus extra.
// A mutation is not abandoned when the caller is interrupted (it finishes,
// and its true result is answered); anything else is. Failures that mean
// the box, not the request, is in trouble mark it unhealthy: later calls
// fail fast until a background probe gets an answer.
func (b *Box) Do(ctx context.Context, mutation bool, extra time.Duration, fn func(ctx context.Context) error) error {
	if err := b.refuse(); err != nil {
		return err
	}
	b.inUse()
	if mutation {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, b.m.opts.OpTimeout+extra)
	defer cancel()
	err := fn(ctx)
	if err != nil {
		switch providers.CodeOf(err) {
		case providers.Timeout, providers.Liveness, providers.TransportLost, providers.Unavailable:
			if ctx.Err() == context.Canceled {
				break // the caller gave up; says nothing of the box
			}
			if gone := b.checkGone(); gone != nil {
				return gone
			}
			b.unhealthy(err)
		case providers.Gone:
			b.markGone(err, time.Time{})
		}
	}
	return err
}

// refuse is the error a gone or unhealthy box answers at once, or nil.
func (b *Box) refuse() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == StateGone:
		err := b.health.lastErr
		if err == nil || providers.CodeOf(err) != providers.Gone {
			err = providers.Errorf(providers.Gone, "boxes", "box %q is gone", b.name)
		}
		return err
	case b.health.bad:
		return providers.E(0, "boxes", b.health.lastErr).WithBox(b.name)
	}
	return b.asleep(b.state)
}

// checkGone asks the provider whether a box that stopped answering still
// exists; a box found ended or removed is marked gone (ENODEV from then on)
// and its error returned.
func (b *Box) checkGone() error {
	b.mu.Lock()
	box := b.box
	b.mu.Unlock()
	if box == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := box.Status(ctx)
	var gone error
	var at time.Time
	switch {
	case err != nil && (providers.CodeOf(err) == providers.Gone || providers.CodeOf(err) == providers.NotFound):
		gone = providers.E(providers.Gone, "boxes", err).WithBox(b.name)
	case err == nil && st.State == providers.StateEnded:
		gone = providers.Errorf(providers.Gone, "boxes", "box %q ended: %s", b.name, st.Reason)
		at = st.EndedAt
	}
	if gone != nil {
		b.markGone(gone, at)
		b.SetErr(gone)
	}
	return gone
}

func (b *Box) unhealthy(err error) {
	b.mu.Lock()
	if b.health.bad || b.state != StateReady {
		b.mu.Unlock()
		return
	}
	b.health = health{bad: true, since: time.Now(), lastErr: err, probing: true}
	b.mu.Unlock()
	b.SetErr(fmt.Errorf("box not answering, failing fast until it does: %w", err))
	guard.Go(b.probe, b.panicked)
}

// probe asks the box for its workspace's attributes every few seconds until
// it answers (healthy again) or is found gone.
func (b *Box) probe() {
	delay := time.Second
	for {
		time.Sleep(delay)
		if delay < 10*time.Second {
			delay *= 2
		}
		b.mu.Lock()
		h, c := b.hands, b.cache
		gone := b.state == StateGone
		b.mu.Unlock()
		if gone || h == nil || c == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.m.opts.OpTimeout)
		_, err := h.Lstat(ctx, c.Root())
		cancel()
		if err == nil {
			b.mu.Lock()
			b.health = health{}
			b.mu.Unlock()
			c.Invalidate()
			b.m.log.Info("box answers again", "box", b.name)
			return
		}
		if providers.CodeOf(err) == providers.Gone || b.checkGone() != nil {
			b.markGone(err, time.Time{})
			return
		}
		b.mu.Lock()
		b.health.lastErr = err
		b.health.fails++
		b.mu.Unlock()
	}
}

// Flush pushes the box's dirty files.
func (b *Box) Flush(ctx context.Context) error {
	b.mu.Lock()
	c := b.cache
	b.mu.Unlock()
	if c == nil {
		return nil
	}
	return b.Do(ctx, true, time.Minute, c.FlushAll)
}

// Sync pushes the box's dirty files, then reads its whole listing again
// and tells the view what changed.
func (b *Box) Sync(ctx context.Context) error {
	if err := b.Flush(ctx); err != nil {
		return err
	}
	return b.Refresh(ctx)
}

// Refresh reads the box's whole listing again (one walk) and tells the
// view which names and contents changed, so the next open sees them.
func (b *Box) Refresh(ctx context.Context) error {
	if b.stateNow() != StateReady {
		return nil // a box being suspended, or at rest: its listing is read again when it is back
	}
	_, c, err := b.Parts(ctx)
	if err != nil {
		return err
	}
	v := b.m.viewer()
	ch, err := c.Refresh(ctx)
	if err != nil {
		if v != nil {
			v.AllChanged(b)
		}
		return err
	}
	if v != nil {
		v.Changed(b, ch)
	}
	return nil
}

// close ends the channel to the box; the box keeps running.
func (b *Box) close() {
	b.mu.Lock()
	h, c := b.hands, b.cache
	b.hands, b.cache = nil, nil
	if b.stopWatch != nil {
		b.stopWatch()
		b.stopWatch = nil
	}
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if h != nil {
		h.Close()
	}
}

// Destroy ends the box, its running commands first. A declared box never
// made is not made to be destroyed: it is only marked gone.
func (b *Box) Destroy(ctx context.Context) error {
	if err := b.lockLife(ctx); err != nil {
		return err
	}
	defer b.unlockLife()
	if b.stateNow() == StateSuspended {
		return b.destroySuspended(ctx)
	}
	b.mu.Lock()
	box := b.box
	declared := b.rec.ID == "" && b.rec.Spec != nil
	b.mu.Unlock()
	if declared {
		b.markGone(providers.Errorf(providers.Gone, "boxes", "box %q was destroyed before it was made", b.name), time.Time{})
		return nil
	}
	if box == nil {
		// A box found gone (an earlier process destroyed it, or its
		// provider ended it) is what destroy asks for.
		if err := b.connect(ctx); err != nil && !gone(err) {
			return err
		}
		b.mu.Lock()
		box = b.box
		b.mu.Unlock()
	}
	if b.WriteMode() == WriteBehind {
		// A barrier: what was closed reaches the box before it ends. The
		// user asked for the end: a failed push is said, not in the way.
		if err := b.Flush(ctx); err != nil {
			b.SetErr(fmt.Errorf("destroy: dirty files not pushed before the box ended: %w", err))
		}
	}
	b.cmds.KillAll(ctx)
	b.close()
	if box != nil {
		if err := box.Destroy(ctx); err != nil && !gone(err) {
			return err
		}
	}
	b.markGone(providers.Errorf(providers.Gone, "boxes", "box %q was destroyed", b.name), time.Time{})
	b.dropState(true)
	b.m.log.Info("box destroyed", "box", b.name)
	return nil
}

// dropState removes what the state directory keeps of the box besides its
// record: its commands, and its cache and the times shown of its files
// unless the cache holds writes not pushed yet and the box may still take
// them (it was forgotten, not destroyed). Its connection must be closed
// first.
func (b *Box) dropState(destroyed bool) {
	rec := b.record()
	if rec.ID == "" {
		return
	}
	b.cmds.drop()
	if !destroyed && b.m.journaled(rec) {
		b.m.log.Warn("the forgotten box's cache holds writes not pushed yet; kept for a later attach", "box", b.name, "id", rec.ID)
		return
	}
	if err := os.RemoveAll(b.m.cacheDir(rec)); err != nil {
		b.m.log.Warn("cache of a box not removed", "box", b.name, "err", err)
	}
	if err := os.Remove(b.m.shownPath(rec)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.m.log.Warn("times shown of a box's files not removed", "box", b.name, "err", err)
	}
}

// FactsJSON renders the box's facts.json: the provider's facts plus what
// the host knows of the box's health and cache. It connects first, unless
// the box is gone or only declared.
func (b *Box) FactsJSON(ctx context.Context) ([]byte, error) {
	b.mu.Lock()
	connected, state := b.hands != nil, b.state
	b.mu.Unlock()
	if !connected && state == StateReady {
		b.connect(ctx) // what is not known says so
	}
	b.mu.Lock()
	facts, h, c := b.facts, b.hands, b.cache
	health := b.health
	state, rec, resumed := b.state, b.rec, b.resumed
	b.mu.Unlock()
	out := struct {
		providers.Facts
		Name    string   `json:"name"`
		State   string   `json:"state"`
		Via     string   `json:"via,omitempty"`
		Health  string   `json:"health"`
		Since   string   `json:"unhealthySince,omitempty"`
		LastErr string   `json:"lastError,omitempty"`
		Dirty   []string `json:"dirtyFiles"`
		// PushErrors is why each dirty file whose push failed was not taken.
		PushErrors map[string]string `json:"pushErrors,omitempty"`
		// Removes are the names removed through the mount that the box
		// has not removed yet (queued for its next batch).
		Removes []string `json:"pendingRemoves,omitempty"`
		// Write is when a close in work/ returns: "through" (the box has
		// the bytes) or "behind" (the host's journal has them).
		Write       string       `json:"write"`
		Commands    int          `json:"commands"`
		ResumeAuto  bool         `json:"resumeAuto,omitempty"`
		SuspendedAt string       `json:"suspendedAt,omitempty"`
		ResumedFrom *resumedFrom `json:"resumedFrom,omitempty"`
		// Agent is the agent channel's counters (round trips, restarts),
		// when the box is reached through it.
		Agent *agent.Stats `json:"agent,omitempty"`
		// AgentOff is why a box that would be reached through the agent
		// channel is not (Options.AgentOff).
		AgentOff string `json:"agentOff,omitempty"`
		// Freshness is how a change made in the box behind boxfs's back
		// reaches the host: "watch" (reported as it happens) or "timeout"
		// (asked again once older than the attribute timeout);
		// FreshnessMs the longest that takes, not counting the trip from
		// the box; FreshnessNote why there is no watch.
		Freshness     string  `json:"freshness"`
		FreshnessMs   float64 `json:"freshnessMs"`
		FreshnessNote string  `json:"freshnessNote,omitempty"`
		// WatchReports counts the watch's reports: taken (made their
		// path stale) and dropped as echoes of the host's own changes.
		WatchReports *cache.ReportCounts `json:"watchReports,omitempty"`
	}{Facts: facts, Name: b.name, State: state, Health: "ok", Dirty: []string{}, Write: b.WriteMode(), ResumeAuto: rec.ResumeAuto, ResumedFrom: resumed}
	var bound time.Duration
	out.Freshness, bound, out.FreshnessNote = b.Freshness()
	out.FreshnessMs = float64(bound) / float64(time.Millisecond)
	if rec.Suspended != nil {
		out.SuspendedAt = rec.Suspended.At.Format(time.RFC3339)
	}
	if out.Facts.Provider == "" {
		out.Facts.Provider, out.Facts.ID = rec.Provider, rec.ID
	}
	if out.Facts.Ports == nil {
		out.Facts.Ports = []int{}
	}
	if h != nil {
		out.Via = h.Via()
		if st, ok := h.AgentStats(); ok {
			out.Agent = &st
		}
		if out.Via == hands.ViaNative || out.Via == hands.ViaScript {
			out.AgentOff = b.m.opts.AgentOff
			if why := h.AgentOff(); why != "" {
				out.AgentOff = why
			}
		}
	}
	if health.bad {
		out.Health = StateUnhealthy
		out.Since = health.since.UTC().Format(time.RFC3339)
	}
	if health.lastErr != nil {
		out.LastErr = health.lastErr.Error()
	}
	if c != nil {
		rc := c.Reports()
		out.WatchReports = &rc
		out.Dirty = append(out.Dirty, c.Dirty()...)
		out.Removes = c.PendingRemoves()
		for rel, err := range c.PushErrors() {
			if out.PushErrors == nil {
				out.PushErrors = map[string]string{}
			}
			out.PushErrors[rel] = err.Error()
		}
	}
	out.Commands = b.cmds.Count()
	buf, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(buf, '\n'), nil
}

// ReceiptJSON renders the box's receipt.json through the meter.
func (b *Box) ReceiptJSON(ctx context.Context) ([]byte, error) {
	rec := b.record()
	if b.m.opts.Meter == nil {
		return fmt.Appendf(nil, "{\"box\": %q, \"cost_usd\": null, \"note\": \"no prices configured\"}\n", b.name), nil
	}
	return b.m.opts.Meter.ReceiptJSON(ctx, rec.Provider, rec.ID)
}
