package fake

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// DefaultWorkspace is a box's workspace when its Spec names none.
const DefaultWorkspace = "/work"

// DefaultSupported are the Spec fields a fake honours unless WithSupported
// says otherwise; the others (region, mounts, capabilities) are
// Unsupported.
var DefaultSupported = []string{
	"image", "snapshot", "lifetime", "cpus", "memoryMb", "gpu", "isolation", "network",
	"ports", "env", "labels", "workspace", "user",
}

// Provider is the fake provider. Its zero value is not usable; call New.
type Provider struct {
	name      string
	clock     *Clock
	supported []string
	facts     []func(*providers.Facts)
	umask     providers.FileMode

	mu       sync.Mutex
	n        int // boxes made
	pid      int // the last process id given out
	boxes    map[string]*Box
	order    []*Box
	programs map[string]Program
	calls    []*record
	rules    []*Rule
	snapshot map[string]*tree // snapshot id -> the tree Snapshot copied
}

var (
	_ providers.Provider   = (*Provider)(nil)
	_ providers.Box        = (*Box)(nil)
	_ providers.Files      = (*Box)(nil)
	_ providers.Walker     = (*Box)(nil)
	_ providers.Archiver   = (*Box)(nil)
	_ providers.PathStater = (*Box)(nil)
)

func init() {
	providers.Register("fake", func(cfg providers.Config) (providers.Provider, error) {
		if err := providers.CheckOptions("fake.Open", cfg.Options); err != nil {
			return nil, err
		}
		return New(), nil
	})
}

// Option configures a Provider.
type Option func(*Provider)

// WithClock makes the provider read clk for lifetimes, delays and file
// times. Without it the provider has a RealClock of its own.
func WithClock(clk *Clock) Option { return func(p *Provider) { p.clock = clk } }

// WithName sets the provider's name (Name, Facts.Provider, the
// boxfs.provider label); "fake" by default. A ledger test can pose as
// "archil".
func WithName(name string) Option { return func(p *Provider) { p.name = name } }

// WithSupported sets the Spec fields the provider honours; Create refuses
// the others with Unsupported.
func WithSupported(fields ...string) Option {
	return func(p *Provider) { p.supported = slices.Clone(fields) }
}

// WithFacts lets f adjust the Facts every box reports (after the fake fills
// them in), e.g. to leave StartedAt absent or claim an OS and arch.
func WithFacts(f func(*providers.Facts)) Option {
	return func(p *Provider) { p.facts = append(p.facts, f) }
}

// WithUmask sets the umask new files and directories get; 022 by default.
func WithUmask(umask providers.FileMode) Option { return func(p *Provider) { p.umask = umask } }

// New returns a fake provider with no boxes, no programs and no rules.
func New(opts ...Option) *Provider {
	p := &Provider{
		name:      "fake",
		supported: DefaultSupported,
		umask:     0o022,
		boxes:     map[string]*Box{},
		programs:  map[string]Program{},
	}
	for _, o := range opts {
		o(p)
	}
	if p.clock == nil {
		p.clock = RealClock()
	}
	return p
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Clock returns the clock the provider reads.
func (p *Provider) Clock() *Clock { return p.clock }

// Create makes a box holding an empty workspace, HOME (/root) and /tmp, or
// the tree of the snapshot its spec names (NotFound if there is none). Its
// lifetime starts now on the provider's clock.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "fake.Create"
	rec := p.record(Call{Op: "Create", Labels: maps.Clone(spec.Labels), Image: spec.Image}, spec.Env, nil)
	b, err := p.create(ctx, op, rec, spec)
	p.done(rec, err)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (p *Provider) create(ctx context.Context, op string, rec *record, spec providers.Spec) (*Box, error) {
	out := p.script(rec)
	if err := out.before(ctx, p.clock, op, &rec.Call); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxError(ctx, op)
	}
	if err := spec.Validate(); err != nil {
		return nil, providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, p.supported...); err != nil {
		return nil, err
	}
	if spec.GPU != "" && spec.GPU != "any" && !validWord(spec.GPU) {
		return nil, providers.Errorf(providers.Invalid, op, "gpu %q is not a model name", spec.GPU)
	}

	p.mu.Lock()
	p.n++
	id := fmt.Sprintf("%s-%d", p.name, p.n)
	p.mu.Unlock()

	b := &Box{p: p, id: id, spec: spec}
	b.view = view{b: b, host: true}
	b.labels = maps.Clone(spec.Labels)
	if b.labels == nil {
		b.labels = map[string]string{}
	}
	b.labels["boxfs.provider"] = p.name
	b.workspace = spec.Workspace
	if b.workspace == "" {
		b.workspace = DefaultWorkspace
	}
	b.startedAt = p.clock.Now()
	b.deadline = b.startedAt.Add(spec.LifetimeOrDefault())
	b.tree = newTree(uint64(0xfa4e0000+p.n), p.umask, p.clock.Now)
	if spec.Snapshot != "" {
		t, err := p.snapshotTree(op, spec.Snapshot)
		if err != nil {
			return nil, err
		}
		b.tree = t
	}
	b.tree.mkdirAll(b.workspace)
	b.tree.mkdirAll(baseEnv["HOME"])
	b.tree.mkdirAll("/tmp")
	b.tree.chmod("/tmp", 0o777|fs.ModeSticky)
	b.procs = map[*process]struct{}{}
	b.pids = map[int]*process{}

	b.mu.Lock()
	b.lifeTimer = p.clock.AfterFunc(spec.LifetimeOrDefault(), func() { b.end(b.deadline, "lifetime") })
	b.mu.Unlock()

	p.mu.Lock()
	p.boxes[id] = b
	p.order = append(p.order, b)
	rec.Box = id
	p.mu.Unlock()

	if out.leaveBox {
		code := out.code
		if code == 0 {
			code = providers.OutcomeUnknown
		}
		return nil, (&providers.Error{Code: code, Op: op, Err: errors.New("create failed after the box was made")}).WithBox(id)
	}
	return b, nil
}

func validWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return s != ""
}

// Attach returns the box with id: NotFound once it was destroyed, vanished
// or swept. A box whose lifetime passed is still found (Status says ended)
// until Sweep.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "fake.Attach"
	rec := p.record(Call{Op: "Attach", Box: id}, nil, nil)
	b, err := p.attach(ctx, op, rec, id)
	p.done(rec, err)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (p *Provider) attach(ctx context.Context, op string, rec *record, id string) (*Box, error) {
	if err := p.script(rec).before(ctx, p.clock, op, &rec.Call); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx, op)
	}
	p.mu.Lock()
	b := p.boxes[id]
	p.mu.Unlock()
	if b == nil {
		return nil, providers.Errorf(providers.NotFound, op, "no box %q", id).WithBox(id)
	}
	return b, nil
}

// List returns the boxes carrying every label in labels, in the order they
// were made; ended boxes are listed until Sweep.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "fake.List"
	rec := p.record(Call{Op: "List", Labels: maps.Clone(labels)}, nil, nil)
	bs, err := p.list(ctx, op, rec, labels)
	p.done(rec, err)
	return bs, err
}

func (p *Provider) list(ctx context.Context, op string, rec *record, labels map[string]string) ([]providers.Box, error) {
	if err := p.script(rec).before(ctx, p.clock, op, &rec.Call); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx, op)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []providers.Box
	for _, b := range p.order {
		if providers.MatchLabels(b.labels, labels) {
			out = append(out, b)
		}
	}
	return out, nil
}

// Boxes returns every box the provider still knows, in the order they were
// made (no call is recorded).
func (p *Provider) Boxes() []*Box {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.order)
}

// Sweep removes every box whose lifetime has passed, as a provider's
// garbage collector would: Attach finds them no more and Status on them is
// Gone. It returns the ids removed.
func (p *Provider) Sweep() []string {
	var ids []string
	for _, b := range p.Boxes() {
		b.mu.Lock()
		b.checkLifeLocked()
		ended := b.ended
		b.mu.Unlock()
		if ended {
			b.remove("swept")
			ids = append(ids, b.id)
		}
	}
	return ids
}

// Box is one fake box: an in-memory file tree, the provider's programs, a
// lifetime on the fake clock. It implements providers.Box, Files, Walker,
// Archiver and PathStater; every call is recorded and may be scripted.
type Box struct {
	view      // the file operations, as the host calls them
	p         *Provider
	id        string
	spec      providers.Spec
	labels    map[string]string
	workspace string
	startedAt time.Time
	deadline  time.Time
	lifeTimer *Timer

	mu        sync.Mutex
	tree      *tree
	suspended bool // Suspend stopped it: calls are Refused until Resume
	ended     bool // its lifetime passed or it vanished: nothing runs in it
	removed   bool // destroyed, vanished or swept: the provider knows it no more
	endedAt   time.Time
	reason    string
	procs     map[*process]struct{}
	pids      map[int]*process // live process ids: commands and what they spawned
}

// ID returns the box's id, "<provider name>-<n>".
func (b *Box) ID() string { return b.id }

// Labels returns the spec's labels plus boxfs.provider.
func (b *Box) Labels() map[string]string { return maps.Clone(b.labels) }

// Files returns the box's files as a program in it sees them: calls through
// it are neither recorded nor scripted.
func (b *Box) Files() providers.Files { return view{b: b} }

// Deadline returns when the box's lifetime ends.
func (b *Box) Deadline() time.Time { return b.deadline }

// checkLifeLocked ends the box if the clock has passed its deadline (the
// lifetime timer may not have run yet).
func (b *Box) checkLifeLocked() {
	if !b.ended && !b.p.clock.Now().Before(b.deadline) {
		b.endLocked(b.deadline, "lifetime")
	}
}

// end ends the box: every command in it is gone, and it cannot run again.
func (b *Box) end(at time.Time, reason string) {
	b.mu.Lock()
	b.endLocked(at, reason)
	b.mu.Unlock()
}

func (b *Box) endLocked(at time.Time, reason string) {
	if b.ended {
		return
	}
	b.ended, b.endedAt, b.reason = true, at, reason
	for pr := range b.procs {
		pr.settle(-1, providers.Errorf(providers.Gone, "fake.Exec", "the box ended (%s)", reason).WithBox(b.id))
	}
	clear(b.procs)
	clear(b.pids)
	if b.lifeTimer != nil {
		b.lifeTimer.Stop()
	}
}

// remove ends the box and makes the provider forget it.
func (b *Box) remove(reason string) {
	b.end(b.p.clock.Now(), reason)
	b.mu.Lock()
	b.removed = true
	b.mu.Unlock()
	p := b.p
	p.mu.Lock()
	delete(p.boxes, b.id)
	p.order = slices.DeleteFunc(p.order, func(x *Box) bool { return x == b })
	p.mu.Unlock()
}

// Vanish removes the box as if someone else had deleted it: what runs in it
// is Gone, Status is Gone, Attach is NotFound. No call is recorded.
func (b *Box) Vanish() { b.remove("vanished") }

// usableLocked returns Gone if nothing can run in the box any more.
func (b *Box) usableLocked(op string) error {
	b.checkLifeLocked()
	if b.ended || b.removed {
		return providers.Errorf(providers.Gone, op, "the box has ended (%s)", b.reason).WithBox(b.id)
	}
	return b.suspendedLocked(op)
}

// Facts reports the spec's resources and what the fake knows of itself;
// WithFacts options adjust them last.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "fake.Facts"
	rec := b.p.record(Call{Op: "Facts", Box: b.id}, nil, nil)
	f, err := b.facts(ctx, op, rec)
	b.p.done(rec, err)
	return f, err
}

func (b *Box) facts(ctx context.Context, op string, rec *record) (providers.Facts, error) {
	if err := b.p.script(rec).before(ctx, b.p.clock, op, &rec.Call); err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	err := b.usableLocked(op)
	b.mu.Unlock()
	if err != nil {
		return providers.Facts{}, err
	}
	s := b.spec
	f := providers.Facts{
		Provider:      b.p.name,
		ID:            b.id,
		Isolation:     s.Isolation,
		OS:            "linux",
		Workspace:     b.workspace,
		TmpDir:        "/tmp",
		CPUs:          s.CPUs,
		MemoryMB:      s.MemoryMB,
		GPU:           s.GPU,
		DiskGB:        float64(fsBlocks*blockSize) / (1 << 30),
		Network:       s.Network.Mode,
		Ports:         slices.Clone(s.Ports),
		FUSE:          providers.Bool(false),
		LiveProcesses: providers.Bool(true),
		Stdin:         providers.Bool(true),
		StartedAt:     b.startedAt,
		Suspend:       providers.SuspendFilesystem,
	}
	if f.Isolation == "" {
		f.Isolation = providers.IsolationNone
	}
	if f.Network == "" {
		f.Network = providers.NetworkOpen
	}
	if f.Ports == nil {
		f.Ports = []int{}
	}
	b.p.mu.Lock()
	switch {
	case b.p.programs["bash"] != nil:
		f.Shell = "/bin/bash"
	case b.p.programs["sh"] != nil:
		f.Shell = "/bin/sh"
	}
	b.p.mu.Unlock()
	for _, adjust := range b.p.facts {
		adjust(&f)
	}
	return f, nil
}

// Status reports running, or ended once the lifetime passed; a box that was
// destroyed, vanished or swept is Gone.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "fake.Status"
	rec := b.p.record(Call{Op: "Status", Box: b.id}, nil, nil)
	st, err := b.status(ctx, op, rec)
	b.p.done(rec, err)
	return st, err
}

func (b *Box) status(ctx context.Context, op string, rec *record) (providers.Status, error) {
	if err := b.p.script(rec).before(ctx, b.p.clock, op, &rec.Call); err != nil {
		return providers.Status{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checkLifeLocked()
	switch {
	case b.removed:
		return providers.Status{}, providers.Errorf(providers.Gone, op, "the box is gone (%s)", b.reason).WithBox(b.id)
	case b.ended:
		return providers.Status{State: providers.StateEnded, StartedAt: b.startedAt, EndedAt: b.endedAt, Reason: b.reason}, nil
	case b.suspended:
		return providers.Status{State: providers.StateStopped, StartedAt: b.startedAt, Reason: "suspended"}, nil
	}
	return providers.Status{State: providers.StateRunning, StartedAt: b.startedAt}, nil
}

// Destroy ends every command in the box and removes it. Destroying a box
// that is gone already is not an error.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "fake.Destroy"
	rec := b.p.record(Call{Op: "Destroy", Box: b.id}, nil, nil)
	err := b.p.script(rec).before(ctx, b.p.clock, op, &rec.Call)
	if err == nil {
		b.remove("destroyed")
	}
	b.p.done(rec, err)
	return err
}

// mkdirAll makes dir and its parents, for setting a box up.
func (t *tree) mkdirAll(dir string) {
	p := "/"
	for _, c := range splitPath(dir) {
		p = path.Join(p, c)
		t.mkdir(p, 0o755)
	}
}
