package boxes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// Options configure a Manager.
type Options struct {
	// StateDir holds the records of named boxes, their caches and journals
	// and their commands' output. It is created if missing.
	StateDir string
	// DefaultProvider is used by Create without a provider.
	DefaultProvider string
	// OpenProvider opens a provider by name (the CLI passes the registry
	// with its configuration).
	OpenProvider func(name string) (providers.Provider, error)
	// AttrTimeout is how long the caches trust attributes and listings
	// (default 1 s).
	AttrTimeout time.Duration
	// CacheBudget bounds the host disk the boxes' content caches take, all
	// together: least recently used clean copies go past it (default, 0: a
	// tenth of the state directory's file system; negative: no bound).
	CacheBudget int64
	// WriteBehind is the write mode of boxes whose own Settings say none:
	// close(2) returns once the bytes are journaled, and dirty files are
	// pushed in batches (boxes.WriteBehind).
	WriteBehind bool
	// BehindDelay, when set, is how long a write-behind batch waits after
	// the last close, and the longest a close waits for its batch (default:
	// the cache's, 100 ms and 1 s): a long one leaves pushing to the
	// barriers and full batches.
	BehindDelay time.Duration
	// NoWatch turns off the watch of the boxes' workspaces. With it on (the
	// default), each box that can be watched (the agent's inotify, a local
	// box's in-process inotify, the provider's own watch) reports its
	// changes as they happen, so changes made behind boxfs's back reach the
	// View at once instead of after AttrTimeout; a box's Settings.Watch
	// turns it off for that box alone.
	NoWatch bool
	// WatchLimit bounds the directories the agent's watch of one box
	// covers (0: the agent's default); a larger workspace is served with
	// timeouts.
	WatchLimit int
	// OpTimeout bounds one metadata operation on a box (default 15 s);
	// moving file content gets this plus time for its size.
	OpTimeout time.Duration
	// OutputCap is how much of one command's output is kept on the host:
	// its last bytes (default DefaultOutputCap). BoxOutputCap is how much
	// of a box's commands' output is kept in all, the oldest going first
	// (default DefaultBoxOutputCap).
	OutputCap, BoxOutputCap int64
	// AgentBinary is the boxfs binary hands uploads into boxes for the
	// agent channel (static: every Linux box; dynamic: boxes with the C
	// library it needs); "" runs without it.
	AgentBinary string
	// AgentOff, when AgentBinary is "", says why the agent channel is
	// off and how to turn it on; facts.json of each box that would have
	// used it says so (agentOff).
	AgentOff string
	// Meter is told when boxes are made, of the execs sent to them and
	// when they end (the ledger); nil meters nothing.
	Meter Meter
	// Declared are boxes known by name before they exist: made at their
	// first use (the config file's boxes).
	Declared []Declared
	// Now is the clock of the boxes' caches (default time.Now); tests pin
	// it to move past AttrTimeout without waiting.
	Now    func() time.Time
	Logger *slog.Logger
}

// Declared is a box the configuration names, made lazily.
type Declared struct {
	Name     string
	Provider string
	Spec     providers.Spec
	Settings Settings
	// ResumeAuto: a use of work/ while the box is suspended resumes it.
	ResumeAuto bool
}

// Manager keeps the named boxes of one state directory. It is safe for
// concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	boxes  map[string]*Box
	provs  map[string]providers.Provider
	view   View
	budget *cache.Budget // shared by the boxes' caches
	// mountpoint is where the namespace is mounted (SetMountpoint); ""
	// before, or with none.
	mountpoint string
}

// record is what the state directory keeps of a named box.
type record struct {
	Name     string          `json:"name"`
	Provider string          `json:"provider"`
	ID       string          `json:"id"`
	Created  time.Time       `json:"created"`
	Spec     *providers.Spec `json:"spec,omitempty"` // declared boxes not made yet
	Settings

	ResumeAuto bool        `json:"resumeAuto,omitempty"` // a use of work/ resumes the box when suspended
	Suspended  *suspension `json:"suspended,omitempty"`  // set while the box is suspended
	Snapshots  []Snapshot  `json:"snapshots,omitempty"`
	// Facts are the box's facts as its last open read them: the next open
	// chooses its path on them while it reads them again.
	Facts *providers.Facts `json:"facts,omitempty"`
	// Agent is where the last open's agent binary was in the box.
	Agent string `json:"agent,omitempty"`
}

// New opens the boxes kept in opts.StateDir: the boxes recorded there are
// found again (attached at their first use, journaled writes pushed).
func New(opts Options) (*Manager, error) {
	const op = "boxes.New"
	if opts.StateDir == "" {
		return nil, providers.Errorf(providers.Invalid, op, "no state directory")
	}
	if opts.AttrTimeout <= 0 {
		opts.AttrTimeout = time.Second
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.OpenProvider == nil {
		opts.OpenProvider = func(name string) (providers.Provider, error) {
			return providers.Open(name, providers.Config{StateDir: filepath.Join(opts.StateDir, "providers", name), Logger: opts.Logger})
		}
	}
	for _, d := range []string{"boxes", "cache", "cmds"} {
		if err := os.MkdirAll(filepath.Join(opts.StateDir, d), 0o700); err != nil {
			return nil, providers.E(providers.Unknown, op, err)
		}
	}
	if opts.CacheBudget == 0 {
		opts.CacheBudget = cache.DefaultBudget(opts.StateDir)
	}
	m := &Manager{
		opts:   opts,
		log:    opts.Logger,
		boxes:  map[string]*Box{},
		provs:  map[string]providers.Provider{},
		budget: cache.NewBudget(opts.CacheBudget),
	}
	if err := m.loadRecords(); err != nil {
		return nil, err
	}
	if opts.AgentBinary != "" {
		// Hashed while the mount starts, not at the first box's open.
		go agent.PrepareBinary(opts.AgentBinary)
	}
	for _, d := range opts.Declared {
		if err := checkName(d.Name); err != nil {
			return nil, providers.Errorf(providers.Invalid, op, "declared box: %v", err)
		}
		if _, ok := m.boxes[d.Name]; ok {
			continue // already made in an earlier run
		}
		spec := d.Spec
		m.boxes[d.Name] = m.newBox(record{Name: d.Name, Provider: m.providerName(d.Provider), Spec: &spec, Settings: d.Settings, ResumeAuto: d.ResumeAuto})
	}
	return m, nil
}

// Options returns the options the manager runs with, defaults filled in.
func (m *Manager) Options() Options { return m.opts }

// SetView has v told of the changes in the boxes' workspaces the host did
// not make through it. Set it before the boxes are used.
// SetMountpoint tells the manager where its namespace is mounted: a box
// whose spec's workspace is WorkspaceHost keeps its workspace at
// MOUNTPOINT/NAME/work.
func (m *Manager) SetMountpoint(dir string) {
	m.mu.Lock()
	m.mountpoint = dir
	m.mu.Unlock()
}

func (m *Manager) SetView(v View) {
	m.mu.Lock()
	m.view = v
	m.mu.Unlock()
}

func (m *Manager) viewer() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

func (m *Manager) providerName(p string) string {
	if p == "" {
		return m.opts.DefaultProvider
	}
	return p
}

func (m *Manager) loadRecords() error {
	dir := filepath.Join(m.opts.StateDir, "boxes")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return providers.E(providers.Unknown, "boxes.loadRecords", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		var r record
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || checkRecordName(r.Name) != nil {
			m.log.Error("unreadable box record skipped", "file", e.Name(), "err", err)
			continue
		}
		if r.ID != "" {
			// Commands were kept by box name before they were kept by id.
			old := filepath.Join(m.opts.StateDir, "cmds", safeKey(r.Name))
			if _, err := os.Stat(m.cmdsDir(r)); os.IsNotExist(err) {
				os.Rename(old, m.cmdsDir(r))
			}
		}
		m.boxes[r.Name] = m.newBox(r)
	}
	return nil
}

func (m *Manager) saveRecord(r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	name := filepath.Join(m.opts.StateDir, "boxes", r.Name+".json")
	if err := writeSync(name+".tmp", b); err != nil {
		return err
	}
	return os.Rename(name+".tmp", name)
}

func (m *Manager) removeRecord(name string) {
	os.Remove(filepath.Join(m.opts.StateDir, "boxes", name+".json"))
}

func writeSync(name string, b []byte) error {
	fd, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = fd.Write(b)
	if err == nil {
		err = fd.Sync()
	}
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	return err
}

// provider opens (once) the named provider.
func (m *Manager) provider(name string) (providers.Provider, error) {
	if name == "" {
		return nil, providers.Errorf(providers.Invalid, "boxes.provider", "no provider given and no default provider set")
	}
	m.mu.Lock()
	p := m.provs[name]
	m.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := m.opts.OpenProvider(name)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if q := m.provs[name]; q != nil {
		p = q
	} else {
		m.provs[name] = p
	}
	m.mu.Unlock()
	return p, nil
}

// Names returns the boxes' names, sorted.
func (m *Manager) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.boxes))
	for n := range m.boxes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the box named name, or nil.
func (m *Manager) Lookup(name string) *Box {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boxes[name]
}

// Box returns the box named name, or NotFound.
func (m *Manager) Box(name string) (*Box, error) {
	b := m.Lookup(name)
	if b == nil {
		return nil, providers.Errorf(providers.NotFound, "boxes", "no box named %q", name)
	}
	return b, nil
}

// reserve holds name for a box being made or attached, or says Exists.
func (m *Manager) reserve(op string, r record) (*Box, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, taken := m.boxes[r.Name]; taken {
		return nil, providers.Errorf(providers.Exists, op, "a box named %q exists", r.Name)
	}
	if err := m.twinLocked(op, r); err != nil {
		return nil, err
	}
	b := m.newBox(r)
	b.state = StateCreating
	m.boxes[r.Name] = b
	return b, nil
}

// twinLocked says Exists when a box other than r.Name already presents the
// box r names (same provider and id, m.mu held). Two names for one box
// would share its cache and command-record directories, each with its own
// in-memory state: one name's reads could see the other's bytes, and
// forgetting one would delete the other's command history.
func (m *Manager) twinLocked(op string, r record) error {
	if r.ID == "" {
		return nil
	}
	for name, b := range m.boxes {
		if name == r.Name {
			continue
		}
		b.mu.Lock()
		other := b.rec
		b.mu.Unlock()
		if other.ID != "" && m.cacheDir(other) == m.cacheDir(r) {
			return providers.Errorf(providers.Exists, op, "%s box %q is already attached as %q (forget %s first to give it another name)",
				r.Provider, r.ID, name, name)
		}
	}
	return nil
}

// release gives back a name reserve held, for a box that was not made.
func (m *Manager) release(name string) {
	m.mu.Lock()
	delete(m.boxes, name)
	m.mu.Unlock()
}

// Create makes a box from spec with the named provider ("" = default) and
// keeps it as name. The box's id is recorded before anything runs in it.
func (m *Manager) Create(ctx context.Context, name, provider string, spec providers.Spec) error {
	return m.CreateWith(ctx, name, provider, spec, Settings{})
}

// CreateWith is Create for a box with its own Settings.
func (m *Manager) CreateWith(ctx context.Context, name, provider string, spec providers.Spec, set Settings) error {
	const op = "boxes.Create"
	if err := checkName(name); err != nil {
		return providers.E(providers.Invalid, op, err)
	}
	provider = m.providerName(provider)
	p, err := m.provider(provider)
	if err != nil {
		return err
	}
	b, err := m.reserve(op, record{Name: name, Provider: provider})
	if err != nil {
		return err
	}
	box, err := m.make(ctx, p, provider, name, spec)
	if err != nil {
		m.release(name)
		return err
	}
	b.setBox(box)
	r := record{Name: name, Provider: provider, ID: box.ID(), Created: time.Now().UTC(), Settings: set}
	if err := m.saveRecord(r); err != nil {
		m.log.Error("box record not saved: a restart will not find this box", "box", name, "id", box.ID(), "err", err)
	}
	b.mu.Lock()
	b.rec = r
	b.mu.Unlock()
	m.log.Info("box created", "box", name, "provider", provider, "id", box.ID())
	return nil
}

// make asks p for a box and tells the meter of it: of the box made, or of
// the box a failed create left behind (the error's Box), which costs all
// the same.
func (m *Manager) make(ctx context.Context, p providers.Provider, provider, name string, spec providers.Spec) (providers.Box, error) {
	if spec.Workspace == WorkspaceHost {
		m.mu.Lock()
		mnt := m.mountpoint
		m.mu.Unlock()
		if mnt == "" {
			return nil, providers.Errorf(providers.Invalid, "boxes.Create", "workspace=%s: no mount, so no host path to keep the workspace at", WorkspaceHost)
		}
		spec.Workspace = filepath.Join(mnt, name, "work")
	}
	box, err := p.Create(ctx, spec)
	if m.opts.Meter == nil {
		return box, err
	}
	if err != nil {
		var e *providers.Error
		if errors.As(err, &e) && e.Box != "" {
			m.opts.Meter.Created(provider, e.Box, spec, providers.Facts{}, nil)
		}
		return nil, err
	}
	facts, ferr := box.Facts(ctx)
	if ferr != nil {
		m.log.Warn("no facts for a new box; metered from its spec, from when create answered", "id", box.ID(), "err", ferr)
		facts = providers.Facts{}
	}
	calls, _ := box.(providers.CallCounter)
	m.opts.Meter.Created(provider, box.ID(), spec, facts, calls)
	return box, nil
}

// Attach keeps an existing box as name.
func (m *Manager) Attach(ctx context.Context, name, provider, id string) error {
	const op = "boxes.Attach"
	if err := checkName(name); err != nil {
		return providers.E(providers.Invalid, op, err)
	}
	p, err := m.provider(provider)
	if err != nil {
		return err
	}
	b, err := m.reserve(op, record{Name: name, Provider: provider, ID: id})
	if err != nil {
		return err
	}
	box, err := p.Attach(ctx, id)
	if err != nil {
		m.release(name)
		if gone(err) {
			m.ended(provider, id, time.Time{})
		}
		return err
	}
	if box.ID() != id {
		// id was another spelling of the box (a container's name for
		// its id, a short id): check the one the provider answers with,
		// which is the one a create records.
		m.mu.Lock()
		err := m.twinLocked(op, record{Name: name, Provider: provider, ID: box.ID()})
		m.mu.Unlock()
		if err != nil {
			m.release(name)
			return err
		}
	}
	b.setBox(box)
	r := record{Name: name, Provider: provider, ID: id, Created: time.Now().UTC()}
	if err := m.saveRecord(r); err != nil {
		m.log.Error("box record not saved", "box", name, "err", err)
	}
	b.mu.Lock()
	b.rec = r
	b.mu.Unlock()
	return nil
}

// ended tells the meter a box ended at at (zero: now).
func (m *Manager) ended(provider, id string, at time.Time) {
	if m.opts.Meter != nil && id != "" {
		m.opts.Meter.Ended(provider, id, at)
	}
}

// gone reports whether err says the box no longer exists.
func gone(err error) bool {
	return providers.IsCode(err, providers.NotFound) || providers.IsCode(err, providers.Gone)
}

// Forget stops keeping a box without touching it; its record goes.
func (m *Manager) Forget(ctx context.Context, name string) error {
	m.mu.Lock()
	b := m.boxes[name]
	delete(m.boxes, name)
	m.mu.Unlock()
	if b == nil {
		return providers.Errorf(providers.NotFound, "boxes.Forget", "no box named %q", name)
	}
	b.close()
	m.removeRecord(name)
	b.dropState(false)
	return nil
}

// Shutdown pushes every box's dirty files (bounded by ctx) and closes the
// channels to the boxes. Files that could not be pushed stay journaled.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	boxes := make([]*Box, 0, len(m.boxes))
	for _, b := range m.boxes {
		boxes = append(boxes, b)
	}
	m.mu.Unlock()
	// Boxes are flushed and closed side by side (a few at a time), so
	// that an unmount waits for the slowest box, not for the sum of them.
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, shutdownParallel)
	)
	for _, b := range boxes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := b.Flush(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", b.name, err))
				mu.Unlock()
			}
			b.close()
		}()
	}
	wg.Wait()
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// shutdownParallel is how many boxes Shutdown flushes and closes at once.
const shutdownParallel = 16

// RecoverJournals connects every recorded box whose cache holds writes an
// earlier process journaled and did not push (a daemon that was killed),
// and pushes them. It returns the number of boxes it found such writes for;
// files that could not be pushed stay journaled and dirty, and the error
// names their boxes.
func (m *Manager) RecoverJournals(ctx context.Context) (int, error) {
	var errs []error
	found := 0
	for _, name := range m.Names() {
		b := m.Lookup(name)
		if b == nil {
			continue
		}
		rec := b.record()
		if rec.ID == "" {
			continue // declared, never made: nothing was written to it
		}
		if !m.journaled(rec) {
			continue
		}
		found++
		if err := b.connect(ctx); err != nil {
			b.SetErr(fmt.Errorf("journaled writes from an earlier run not pushed: %w", err))
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		b.mu.Lock()
		c := b.cache
		b.mu.Unlock()
		if c == nil {
			continue
		}
		if d := c.Dirty(); len(d) > 0 {
			errs = append(errs, providers.Errorf(providers.Unknown, "boxes.RecoverJournals", "%s: %d journaled files not pushed yet (kept; retried at the next flush)", name, len(d)).WithBox(name))
			continue
		}
		m.log.Info("journaled writes from an earlier run pushed", "box", name)
	}
	return found, errors.Join(errs...)
}

// journaled reports whether the cache of the box rec names holds writes
// journaled and not pushed yet.
func (m *Manager) journaled(rec record) bool {
	return cache.Journaled(m.cacheDir(rec))
}

// cmdsDir is where the commands of the box rec names are kept: by its
// provider and id, so a new box of an old name starts with none.
func (m *Manager) cmdsDir(rec record) string {
	return filepath.Join(m.opts.StateDir, "cmds", safeKey(rec.Provider+"-"+rec.ID))
}

// cacheDir is where the cache of the box rec names lives.
func (m *Manager) cacheDir(rec record) string {
	return filepath.Join(m.opts.StateDir, "cache", safeKey(rec.Provider+"-"+rec.ID))
}

// shownPath is where the times shown of the files pushed to the box rec
// names are kept (cache.Options.ShownPath): beside its cache, not in it,
// for they are not content. Removing the cache (as a cold start does)
// leaves them, so the box's files show the times they showed before, and
// git, whose index holds those, does not read every file pushed again.
func (m *Manager) shownPath(rec record) string {
	return filepath.Join(m.opts.StateDir, "shown", safeKey(rec.Provider+"-"+rec.ID)+".log")
}

func safeKey(s string) string {
	return strings.NewReplacer("/", "_", "\x00", "_").Replace(s)
}
