package boxes

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/syncengine/cache"

	"github.com/boxfs/boxfs/providers"
)

// Box states of a suspend's life, as Info says them.
const (
	StateSuspending = "suspending" // its commands and files being settled, then its provider suspending it
	StateSuspended  = "suspended"  // at rest at its provider; work/ answers EHOSTDOWN unless resume=auto
	StateResuming   = "resuming"   // its provider bringing it back, then its workspace reopened
)

// settleBound bounds how long a forced suspend waits for the commands it
// killed to be recorded as ended; one that is not by then is recorded
// killed all the same, so no reader of its output waits for ever.
const settleBound = 30 * time.Second

// suspension is what a box's record keeps while the box is suspended.
type suspension struct {
	ID    string    `json:"id"`    // what the provider's Resume takes
	Box   string    `json:"box"`   // the box's id when it was suspended
	At    time.Time `json:"at"`    // when
	Keeps string    `json:"keeps"` // Facts.Suspend: memory, filesystem or snapshot
}

// Snapshot is one snapshot taken of a box: a line of its snapshots file.
type Snapshot struct {
	Name string    `json:"name"`
	ID   string    `json:"id"` // Spec.Snapshot of a box made from it
	At   time.Time `json:"at"`
}

// resumedFrom says where a box came back from (facts.json's resumedFrom):
// a resume of this process, or a reconnect to a box an earlier process
// kept.
type resumedFrom struct {
	How         string    `json:"how"` // "resume" or "reconnect"
	Box         string    `json:"box"` // the box's id before
	SuspendedAt time.Time `json:"suspendedAt,omitzero"`
	Keeps       string    `json:"keeps,omitempty"`
	At          time.Time `json:"at"`
}

// lockLife takes the box's life lock (one suspend, resume or snapshot at a
// time), waiting no longer than ctx.
func (b *Box) lockLife(ctx context.Context) error {
	select {
	case b.life <- struct{}{}:
		return nil
	case <-ctx.Done():
		return providers.E(0, "boxes", ctx.Err()).WithBox(b.name)
	}
}

func (b *Box) unlockLife() { <-b.life }

// asleep is the error a call on a box in state st answers instead of
// reaching the box, or nil for a box that is not suspended.
func (b *Box) asleep(st string) error {
	var what string
	switch st {
	case StateSuspended:
		what = fmt.Sprintf("box %q is suspended: resume it (echo resume > %s/ctl, or boxfs resume %s), or make it with resume=auto", b.name, b.name, b.name)
	case StateSuspending:
		what = fmt.Sprintf("box %q is being suspended", b.name)
	case StateResuming:
		what = fmt.Sprintf("box %q is being resumed", b.name)
	default:
		return nil
	}
	return &providers.Error{Code: providers.Unavailable, Op: "boxes", Box: b.name, Err: errnoText{what, syscall.EHOSTDOWN}}
}

// errnoText is an errno behind a sentence: the kernel is told the errno,
// the err file says the sentence.
type errnoText struct {
	text  string
	errno syscall.Errno
}

func (e errnoText) Error() string { return e.text }
func (e errnoText) Unwrap() error { return e.errno }

// busy is a refusal because something is in flight: EBUSY, and the text.
func busy(op, box, format string, args ...any) error {
	return &providers.Error{Code: providers.Unavailable, Op: op, Box: box, Err: errnoText{fmt.Sprintf(format, args...), syscall.EBUSY}}
}

// awake makes sure the box is not suspended before a call reaches it: a
// suspended box is resumed when its record says resume=auto, else the call
// fails at once; a box being resumed is waited for (within ctx), one being
// suspended fails at once.
func (b *Box) awake(ctx context.Context) error {
	for {
		b.mu.Lock()
		st, auto := b.state, b.rec.ResumeAuto
		b.mu.Unlock()
		switch {
		case st == StateResuming:
			// Wait for that resume, then look again.
			if err := b.lockLife(ctx); err != nil {
				return err
			}
			b.unlockLife()
		case st == StateSuspended && auto:
			if err := b.lockLife(ctx); err != nil {
				return err
			}
			err := b.resumeLocked(ctx)
			b.unlockLife()
			if err != nil {
				return err
			}
		case st == StateSuspended || st == StateSuspending:
			return b.asleep(st)
		default:
			return nil
		}
	}
}

// stateNow returns the box's state.
func (b *Box) stateNow() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// setState sets the box's state and returns the one before.
func (b *Box) setState(st string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.state
	b.state = st
	return prev
}

// update changes the box's record with f and saves it.
func (b *Box) update(f func(r *record)) error {
	b.mu.Lock()
	r := b.rec
	f(&r)
	b.rec = r
	b.mu.Unlock()
	if err := b.m.saveRecord(r); err != nil {
		return providers.E(providers.Unknown, "boxes.record", err).WithBox(b.name)
	}
	return nil
}

// suspender returns the box's provider as a Suspender, or Unsupported.
func (b *Box) suspender(op string) (providers.Suspender, error) {
	rec := b.record()
	p, err := b.m.provider(rec.Provider)
	if err != nil {
		return nil, err
	}
	sp, ok := p.(providers.Suspender)
	if !ok {
		return nil, providers.Errorf(providers.Unsupported, op, "provider %s cannot suspend its boxes", rec.Provider).WithBox(b.name)
	}
	return sp, nil
}

// providerBox returns the provider's box, finding a recorded one again by
// its id (without opening hands or a cache). A declared box not made yet
// is Invalid: there is nothing to suspend or snapshot.
func (b *Box) providerBox(ctx context.Context, op string) (providers.Box, error) {
	b.mu.Lock()
	box, declared := b.box, b.rec.ID == "" && b.rec.Spec != nil
	b.mu.Unlock()
	if box != nil {
		return box, nil
	}
	if declared {
		return nil, providers.Errorf(providers.Invalid, op, "box %q is declared and not made yet", b.name).WithBox(b.name)
	}
	b.connectMu.Lock()
	defer b.connectMu.Unlock()
	return b.attachOrCreate(ctx)
}

// Suspend suspends the box at its provider: dirty files are pushed, the
// channel to the box closed, and the provider suspends it (what it keeps
// is its facts' suspend). A box with commands running, or files of work/
// open, is refused (EBUSY) unless force: then its commands are killed
// first, and recorded killed, their readers at EOF. All or nothing: a
// suspend that fails leaves the box running. Suspending a suspended box
// does nothing.
func (b *Box) Suspend(ctx context.Context, force bool) error {
	const op = "boxes.Suspend"
	// Commands start under startMu, read-locked: once it is held here and
	// the state says suspending, none is starting.
	b.startMu.Lock()
	if err := b.lockLife(ctx); err != nil {
		b.startMu.Unlock()
		return err
	}
	defer b.unlockLife()
	switch st := b.stateNow(); st {
	case StateSuspended:
		b.startMu.Unlock()
		return nil
	case StateGone:
		b.startMu.Unlock()
		return b.refuse()
	}
	sp, err := b.suspender(op)
	if err != nil {
		b.startMu.Unlock()
		return err
	}
	box, err := b.providerBox(ctx, op)
	if err != nil {
		b.startMu.Unlock()
		return err
	}
	prev := b.setState(StateSuspending)
	b.startMu.Unlock()
	killed, err := b.quiesce(ctx, op, force)
	if err == nil {
		err = b.suspendAt(ctx, op, sp, box)
	}
	b.settle(killed)
	if err != nil {
		if b.stateNow() == StateSuspending {
			b.setState(prev)
		}
		return err
	}
	b.m.log.Info("box suspended", "box", b.name, "killed", len(killed))
	return nil
}

// quiesce checks that nothing is in flight (or, with force, kills the
// commands that are, and returns them), then pushes the dirty files and
// closes the channel to the box.
func (b *Box) quiesce(ctx context.Context, op string, force bool) ([]*Command, error) {
	running := b.cmds.running()
	b.mu.Lock()
	c := b.cache
	b.mu.Unlock()
	var open []string
	if c != nil && !force {
		open = openAfterRelease(ctx, c)
	}
	if !force {
		if len(running) > 0 {
			return nil, busy(op, b.name, "%d command(s) running (%s): wait for them, kill them, or write `suspend force`", len(running), cmdPaths(running))
		}
		if len(open) > 0 {
			return nil, busy(op, b.name, "work/%s is open (%d file(s) in all): close it, or write `suspend force`", open[0], len(open))
		}
	}
	for _, cmd := range running {
		if err := cmd.Kill(ctx); err != nil {
			b.m.log.Warn("a command not confirmed killed before the suspend (the suspend ends it)", "box", b.name, "n", cmd.N(), "err", err)
		}
	}
	if c != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.m.opts.OpTimeout+time.Minute)
		err := c.FlushAll(fctx)
		cancel()
		if err != nil {
			return running, providers.E(0, op, fmt.Errorf("dirty files not pushed, so the box was not suspended: %w", err)).WithBox(b.name)
		}
	}
	b.close()
	return running, nil
}

// releaseGrace bounds the wait for the kernel's release of files already
// closed: FUSE sends a file's release after close(2) has returned, so a
// file written and closed just before `suspend` can still look open.
const releaseGrace = 2 * time.Second

// openAfterRelease returns the files of c still open once the releases in
// flight have had releaseGrace (or ctx) to arrive.
func openAfterRelease(ctx context.Context, c *cache.Cache) []string {
	deadline := time.Now().Add(releaseGrace)
	for {
		open := c.OpenFiles()
		if len(open) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			return open
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func cmdPaths(cs []*Command) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("cmds/%d", c.N()))
	}
	return strings.Join(out, ", ")
}

// suspendAt has the provider suspend box, and records the suspension.
func (b *Box) suspendAt(ctx context.Context, op string, sp providers.Suspender, box providers.Box) error {
	b.mu.Lock()
	keeps := b.facts.Suspend
	b.mu.Unlock()
	if keeps == "" {
		if f, err := box.Facts(ctx); err == nil {
			keeps = f.Suspend
		}
	}
	id, err := sp.Suspend(ctx, box)
	if err != nil {
		if providers.IsCode(err, providers.Gone) {
			b.markGone(err, time.Time{})
		}
		return providers.E(0, op, err).WithBox(b.name)
	}
	s := &suspension{ID: id, Box: box.ID(), At: time.Now().UTC(), Keeps: keeps}
	if err := b.update(func(r *record) { r.Suspended = s }); err != nil {
		b.m.log.Error("a suspended box's record not saved: a restart will take it for running", "box", b.name, "err", err)
	}
	b.mu.Lock()
	b.state, b.box, b.health, b.resumed = StateSuspended, nil, health{}, nil
	b.mu.Unlock()
	if keeps == providers.SuspendSnapshot {
		b.m.ended(b.record().Provider, box.ID(), time.Time{}) // resuming makes another box
	}
	// Not from this goroutine: a resume=auto resume runs inside a request on
	// work/, whose directory the kernel holds while it is told.
	go b.allChanged()
	return nil
}

// settle waits, within settleBound, for the commands a forced suspend
// killed to be recorded as ended, and records as killed any that are not.
func (b *Box) settle(killed []*Command) {
	if len(killed) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleBound)
	defer cancel()
	for _, c := range killed {
		if err := c.waitEnd(ctx); err != nil {
			c.end(StatusKilled)
		}
	}
}

// Resume brings a suspended box back: its provider resumes it, then its
// workspace is reopened as for a box never seen (every listing read again,
// the agent started again, journaled writes pushed), commands left running
// are lost, and facts.json says resumedFrom. A box its provider finds
// ended is gone. A resume whose workspace cannot be reopened fails, and
// the box is suspended again. Resuming a running box does nothing.
func (b *Box) Resume(ctx context.Context) error {
	if err := b.lockLife(ctx); err != nil {
		return err
	}
	defer b.unlockLife()
	return b.resumeLocked(ctx)
}

func (b *Box) resumeLocked(ctx context.Context) error {
	const op = "boxes.Resume"
	b.mu.Lock()
	st, rec := b.state, b.rec
	b.mu.Unlock()
	switch {
	case st == StateGone:
		return b.refuse()
	case st != StateSuspended && st != StateResuming || rec.Suspended == nil:
		return nil
	}
	sp, err := b.suspender(op)
	if err != nil {
		return err
	}
	b.setState(StateResuming)
	box, err := sp.Resume(ctx, rec.Suspended.ID)
	if err != nil {
		if gone(err) {
			err = providers.E(providers.Gone, op, fmt.Errorf("the box ended while suspended: %w", err)).WithBox(b.name)
			b.markGone(err, time.Time{})
			b.SetErr(err)
			return err
		}
		b.setState(StateSuspended)
		return providers.E(0, op, fmt.Errorf("not resumed, still suspended: %w", err)).WithBox(b.name)
	}
	return b.reopen(ctx, op, sp, box, *rec.Suspended)
}

// reopen takes box, just resumed, as the box, and opens its workspace; if
// that fails the box is suspended again (or, if that fails too, kept
// unhealthy: calls fail fast with the error).
func (b *Box) reopen(ctx context.Context, op string, sp providers.Suspender, box providers.Box, was suspension) error {
	b.mu.Lock()
	b.box, b.hands, b.cache, b.health = box, nil, nil, health{}
	b.mu.Unlock()
	if err := b.update(func(r *record) {
		if r.ID != box.ID() {
			r.Facts, r.Agent = nil, "" // another box's
		}
		r.ID, r.Suspended = box.ID(), nil
	}); err != nil {
		b.m.log.Error("a resumed box's record not saved", "box", b.name, "err", err)
	}
	if box.ID() != was.Box && b.m.opts.Meter != nil {
		if f, err := box.Facts(ctx); err == nil {
			calls, _ := box.(providers.CallCounter)
			b.m.opts.Meter.Created(b.record().Provider, box.ID(), providers.Spec{}, f, calls)
		}
	}
	b.setState(StateReady)
	if err := b.connect(ctx); err != nil {
		return b.resuspend(ctx, op, sp, box, err)
	}
	b.mu.Lock()
	b.resumed = &resumedFrom{How: "resume", Box: was.Box, SuspendedAt: was.At, Keeps: was.Keeps, At: time.Now().UTC()}
	b.mu.Unlock()
	for _, c := range b.cmds.running() {
		c.end(StatusLost)
	}
	go b.allChanged() // see suspendAt
	b.m.log.Info("box resumed", "box", b.name, "id", box.ID(), "suspended", time.Since(was.At).Round(time.Second))
	return nil
}

// resuspend suspends again a box whose workspace could not be reopened
// after a resume, and returns why the resume failed.
func (b *Box) resuspend(ctx context.Context, op string, sp providers.Suspender, box providers.Box, cause error) error {
	b.close()
	b.setState(StateSuspending)
	err := b.suspendAt(context.WithoutCancel(ctx), op, sp, box)
	if err != nil {
		if b.stateNow() != StateGone {
			b.setState(StateReady)
			b.unhealthy(cause)
		}
		err = providers.E(0, op, fmt.Errorf("resumed, but its workspace could not be reopened (%v), and suspending it again failed: %w", cause, err)).WithBox(b.name)
		b.SetErr(err)
		return err
	}
	err = providers.E(0, op, fmt.Errorf("resumed, but its workspace could not be reopened, so it was suspended again: %w", cause)).WithBox(b.name)
	b.SetErr(err)
	return err
}

// snapshotName reports whether name can name a snapshot: a word of 1 to
// 63 letters, digits, '.', '_' or '-', not starting with '.' or '-'.
func snapshotName(name string) error {
	if name == "" || len(name) > 63 || name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("snapshot name %q: want 1 to 63 of A-Z a-z 0-9 . _ -, not starting with . or -", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("snapshot name %q: want 1 to 63 of A-Z a-z 0-9 . _ -, not starting with . or -", name)
		}
	}
	return nil
}

// CheckSnapshotName reports whether name can name a snapshot (Invalid if
// not).
func CheckSnapshotName(name string) error {
	if err := snapshotName(name); err != nil {
		return providers.E(providers.Invalid, "boxes.CheckSnapshotName", err)
	}
	return nil
}

// Snapshot saves the box's filesystem as an image named after name, once
// its dirty files are pushed, and records it in the box's snapshots. A box
// made with snapshot=ID (the record's id) starts from it. The box runs on.
func (b *Box) Snapshot(ctx context.Context, name string) (Snapshot, error) {
	const op = "boxes.Snapshot"
	if err := snapshotName(name); err != nil {
		return Snapshot{}, providers.E(providers.Invalid, op, err).WithBox(b.name)
	}
	rec := b.record()
	for _, s := range rec.Snapshots {
		if s.Name == name {
			return Snapshot{}, providers.Errorf(providers.Exists, op, "box %q has a snapshot named %q (id %s)", b.name, name, s.ID).WithBox(b.name)
		}
	}
	p, err := b.m.provider(rec.Provider)
	if err != nil {
		return Snapshot{}, err
	}
	sn, ok := p.(providers.Snapshotter)
	if !ok {
		return Snapshot{}, providers.Errorf(providers.Unsupported, op, "provider %s cannot snapshot its boxes", rec.Provider).WithBox(b.name)
	}
	if err := b.lockLife(ctx); err != nil {
		return Snapshot{}, err
	}
	defer b.unlockLife()
	if err := b.asleep(b.stateNow()); err != nil {
		return Snapshot{}, err
	}
	box, err := b.providerBox(ctx, op)
	if err != nil {
		return Snapshot{}, err
	}
	if err := b.Flush(ctx); err != nil {
		return Snapshot{}, providers.E(0, op, fmt.Errorf("dirty files not pushed, so no snapshot was taken: %w", err)).WithBox(b.name)
	}
	id, err := sn.Snapshot(ctx, box, name)
	if err != nil {
		return Snapshot{}, providers.E(0, op, err).WithBox(b.name)
	}
	s := Snapshot{Name: name, ID: id, At: time.Now().UTC()}
	if err := b.update(func(r *record) { r.Snapshots = append(r.Snapshots, s) }); err != nil {
		return s, providers.E(0, op, fmt.Errorf("snapshot %s taken (id %s) but not recorded: %w", name, id, err)).WithBox(b.name)
	}
	b.m.log.Info("box snapshot taken", "box", b.name, "snapshot", name, "id", id)
	return s, nil
}

// Snapshots returns the snapshots taken of the box, oldest first.
func (b *Box) Snapshots() []Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Snapshot(nil), b.rec.Snapshots...)
}

// SnapshotsText renders the box's snapshots file: one line per snapshot,
// "NAME ID TIME" (RFC 3339, UTC).
func (b *Box) SnapshotsText() []byte {
	var sb strings.Builder
	for _, s := range b.Snapshots() {
		fmt.Fprintf(&sb, "%s %s %s\n", s.Name, s.ID, s.At.UTC().Format(time.RFC3339))
	}
	return []byte(sb.String())
}

// SetResumeAuto sets whether a read or write in the box's workspace while
// it is suspended resumes it (auto) or fails at once, and records it.
func (b *Box) SetResumeAuto(auto bool) error {
	return b.update(func(r *record) { r.ResumeAuto = auto })
}

// destroySuspended ends a suspended box at its provider (a box its
// suspend replaced by a snapshot is gone already).
func (b *Box) destroySuspended(ctx context.Context) error {
	rec := b.record()
	p, err := b.m.provider(rec.Provider)
	if err != nil {
		return err
	}
	box, err := p.Attach(ctx, rec.ID)
	switch {
	case err == nil:
		if err := box.Destroy(ctx); err != nil && !gone(err) {
			return err
		}
	case !gone(err):
		return err
	}
	b.markGone(providers.Errorf(providers.Gone, "boxes", "box %q was destroyed while suspended", b.name), time.Time{})
	b.m.log.Info("box destroyed", "box", b.name)
	return nil
}

// SplitResume takes the resume= word out of the words of a new or attach
// message: resume=auto or resume=manual (the default). It returns whether
// the box resumes itself and the other words; a resume= word with another
// value, or given twice, is Invalid.
func SplitResume(words []string) (auto bool, rest []string, err error) {
	seen := false
	for _, w := range words {
		v, ok := strings.CutPrefix(w, "resume=")
		if !ok {
			rest = append(rest, w)
			continue
		}
		if seen {
			return false, nil, providers.Errorf(providers.Invalid, "boxes.SplitResume", "key \"resume\" given twice")
		}
		seen = true
		switch v {
		case "auto":
			auto = true
		case "manual":
		default:
			return false, nil, providers.Errorf(providers.Invalid, "boxes.SplitResume", "resume=%q: want auto or manual", v)
		}
	}
	return auto, rest, nil
}

// running returns the commands that run, oldest first.
func (t *Commands) running() []*Command {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Command
	for _, n := range t.order {
		if c := t.cmds[n]; c != nil && c.Running() {
			out = append(out, c)
		}
	}
	return out
}

// waitEnd waits until the command is recorded as ended, or ctx ends.
func (c *Command) waitEnd(ctx context.Context) error {
	for {
		c.mu.Lock()
		st, grow := c.status, c.grow
		c.mu.Unlock()
		if st != StatusRunning {
			return nil
		}
		select {
		case <-grow:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Suspend suspends the named box (see Box.Suspend).
func (m *Manager) Suspend(ctx context.Context, name string, force bool) error {
	b, err := m.Box(name)
	if err != nil {
		return err
	}
	return b.Suspend(ctx, force)
}

// Resume resumes the named box (see Box.Resume).
func (m *Manager) Resume(ctx context.Context, name string) error {
	b, err := m.Box(name)
	if err != nil {
		return err
	}
	return b.Resume(ctx)
}

// Snapshot snapshots the named box as snap (see Box.Snapshot).
func (m *Manager) Snapshot(ctx context.Context, name, snap string) (Snapshot, error) {
	b, err := m.Box(name)
	if err != nil {
		return Snapshot{}, err
	}
	return b.Snapshot(ctx, snap)
}
