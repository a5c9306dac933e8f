package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/providers"
)

// Options configure an FS.
type Options struct {
	// StateDir holds the records of named boxes, their caches and journals
	// and their commands' output. It is created if missing.
	StateDir string
	// DefaultProvider is used by `new NAME` without provider= (and mkdir).
	DefaultProvider string
	// OpenProvider opens a provider by name (the CLI passes the registry
	// with its configuration).
	OpenProvider func(name string) (providers.Provider, error)
	// AttrTimeout is how long the kernel and the cache trust attributes and
	// listings (default 1 s).
	AttrTimeout time.Duration
	// Watch has the agent watch each box's workspace (inotify), so changes
	// made behind boxfs's back show at once instead of after AttrTimeout.
	// Experimental and off by default: with it on, one run of the
	// integration suite saw git gc fail through the mount (not reproduced
	// alone).
	Watch bool
	// OpTimeout bounds one metadata operation on a box (default 15 s);
	// moving file content gets this plus time for its size.
	OpTimeout time.Duration
	// AgentBinary is the static boxfs binary hands uploads into boxes for
	// the agent channel; "" runs without it.
	AgentBinary string
	// Receipt renders a box's receipt.json; nil says no ledger is set up.
	Receipt func(ctx context.Context, providerName, boxID string) ([]byte, error)
	// Declared are boxes known by name before they exist: made at their
	// first use (the config file's boxes).
	Declared []Declared
	Logger   *slog.Logger
}

// Declared is a box the configuration names, made lazily.
type Declared struct {
	Name     string
	Provider string
	Spec     providers.Spec
}

// FS is the boxfs namespace: named boxes, their control files and their
// work trees. It can be mounted (Mount) and also driven directly (NewBox,
// Exec ...) by the CLI when nothing is mounted.
type FS struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	boxes   map[string]*boxState
	provs   map[string]providers.Provider
	errText string // the root's last error

	root   *rootNode
	server *fuse.Server
}

// record is what the state directory keeps of a named box.
type record struct {
	Name     string          `json:"name"`
	Provider string          `json:"provider"`
	ID       string          `json:"id"`
	Created  time.Time       `json:"created"`
	Spec     *providers.Spec `json:"spec,omitempty"` // declared boxes not made yet
}

// New opens the namespace kept in opts.StateDir: the boxes recorded there
// are found again (attached at their first use, journaled writes pushed).
func New(opts Options) (*FS, error) {
	const op = "fs.New"
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
	f := &FS{
		opts:  opts,
		log:   opts.Logger,
		boxes: map[string]*boxState{},
		provs: map[string]providers.Provider{},
	}
	if err := f.loadRecords(); err != nil {
		return nil, err
	}
	for _, d := range opts.Declared {
		if err := checkName(d.Name); err != nil {
			return nil, providers.Errorf(providers.Invalid, op, "declared box: %v", err)
		}
		if _, ok := f.boxes[d.Name]; ok {
			continue // already made in an earlier run
		}
		spec := d.Spec
		f.boxes[d.Name] = f.newBoxState(record{Name: d.Name, Provider: f.providerName(d.Provider), Spec: &spec})
	}
	f.root = &rootNode{fs: f}
	return f, nil
}

func (f *FS) providerName(p string) string {
	if p == "" {
		return f.opts.DefaultProvider
	}
	return p
}

func (f *FS) loadRecords() error {
	dir := filepath.Join(f.opts.StateDir, "boxes")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return providers.E(providers.Unknown, "fs.loadRecords", err)
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
		if err != nil || checkName(r.Name) != nil {
			f.log.Error("unreadable box record skipped", "file", e.Name(), "err", err)
			continue
		}
		f.boxes[r.Name] = f.newBoxState(r)
	}
	return nil
}

func (f *FS) saveRecord(r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	name := filepath.Join(f.opts.StateDir, "boxes", r.Name+".json")
	if err := writeSync(name+".tmp", b); err != nil {
		return err
	}
	return os.Rename(name+".tmp", name)
}

func (f *FS) removeRecord(name string) {
	os.Remove(filepath.Join(f.opts.StateDir, "boxes", name+".json"))
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
func (f *FS) provider(name string) (providers.Provider, error) {
	if name == "" {
		return nil, providers.Errorf(providers.Invalid, "fs.provider", "no provider given and no default provider set")
	}
	f.mu.Lock()
	p := f.provs[name]
	f.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := f.opts.OpenProvider(name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if q := f.provs[name]; q != nil {
		p = q
	} else {
		f.provs[name] = p
	}
	f.mu.Unlock()
	return p, nil
}

// Names returns the boxes' names, sorted.
func (f *FS) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.boxes))
	for n := range f.boxes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (f *FS) lookupBox(name string) *boxState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boxes[name]
}

// NewBox makes a box from spec with the named provider ("" = default) and
// presents it as name. The box's id is recorded before anything runs in it.
func (f *FS) NewBox(ctx context.Context, name, provider string, spec providers.Spec) error {
	const op = "fs.NewBox"
	if err := checkName(name); err != nil {
		return providers.E(providers.Invalid, op, err)
	}
	provider = f.providerName(provider)
	p, err := f.provider(provider)
	if err != nil {
		return err
	}
	f.mu.Lock()
	if _, taken := f.boxes[name]; taken {
		f.mu.Unlock()
		return providers.Errorf(providers.Exists, op, "a box named %q exists", name)
	}
	b := f.newBoxState(record{Name: name, Provider: provider})
	b.state = stateCreating
	f.boxes[name] = b // holds the name while the provider works
	f.mu.Unlock()

	box, err := p.Create(ctx, spec)
	if err != nil {
		f.mu.Lock()
		delete(f.boxes, name)
		f.mu.Unlock()
		return err
	}
	b.setBox(box)
	r := record{Name: name, Provider: provider, ID: box.ID(), Created: time.Now().UTC()}
	if err := f.saveRecord(r); err != nil {
		f.log.Error("box record not saved: a restart will not find this box", "box", name, "id", box.ID(), "err", err)
	}
	b.mu.Lock()
	b.rec = r
	b.mu.Unlock()
	f.log.Info("box created", "box", name, "provider", provider, "id", box.ID())
	return nil
}

// AttachBox presents an existing box under name.
func (f *FS) AttachBox(ctx context.Context, name, provider, id string) error {
	const op = "fs.AttachBox"
	if err := checkName(name); err != nil {
		return providers.E(providers.Invalid, op, err)
	}
	p, err := f.provider(provider)
	if err != nil {
		return err
	}
	f.mu.Lock()
	if _, taken := f.boxes[name]; taken {
		f.mu.Unlock()
		return providers.Errorf(providers.Exists, op, "a box named %q exists", name)
	}
	b := f.newBoxState(record{Name: name, Provider: provider, ID: id})
	b.state = stateCreating
	f.boxes[name] = b
	f.mu.Unlock()
	box, err := p.Attach(ctx, id)
	if err != nil {
		f.mu.Lock()
		delete(f.boxes, name)
		f.mu.Unlock()
		return err
	}
	b.setBox(box)
	r := record{Name: name, Provider: provider, ID: id, Created: time.Now().UTC()}
	if err := f.saveRecord(r); err != nil {
		f.log.Error("box record not saved", "box", name, "err", err)
	}
	b.mu.Lock()
	b.rec = r
	b.mu.Unlock()
	return nil
}

// Forget stops presenting a box without touching it; its record goes.
func (f *FS) Forget(ctx context.Context, name string) error {
	f.mu.Lock()
	b := f.boxes[name]
	delete(f.boxes, name)
	f.mu.Unlock()
	if b == nil {
		return providers.Errorf(providers.NotFound, "fs.Forget", "no box named %q", name)
	}
	b.close()
	f.removeRecord(name)
	return nil
}

// Shutdown pushes every box's dirty files (bounded by ctx) and closes the
// channels to the boxes. Files that could not be pushed stay journaled.
func (f *FS) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	boxes := make([]*boxState, 0, len(f.boxes))
	for _, b := range f.boxes {
		boxes = append(boxes, b)
	}
	f.mu.Unlock()
	var errs []error
	for _, b := range boxes {
		if err := b.flush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b.name, err))
		}
		b.close()
	}
	return errors.Join(errs...)
}

func (f *FS) setErr(err error) {
	f.mu.Lock()
	f.errText = err.Error()
	f.mu.Unlock()
	f.log.Warn("ctl", "err", err)
}

// Root returns the root node to mount.
func (f *FS) Root() gofs.InodeEmbedder { return f.root }

// MountOptions are the kernel-facing settings of Mount.
type MountOptions struct {
	AllowOther bool
	Debug      bool
	FsName     string
}

// Mount serves the namespace at mountpoint through the kernel.
func (f *FS) Mount(mountpoint string, mo MountOptions) (*fuse.Server, error) {
	timeout := f.opts.AttrTimeout
	name := mo.FsName
	if name == "" {
		name = "boxfs"
	}
	opts := &gofs.Options{
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		MountOptions: fuse.MountOptions{
			AllowOther:    mo.AllowOther,
			Debug:         mo.Debug,
			FsName:        name,
			Name:          "boxfs",
			DirectMount:   true,
			DisableXAttrs: true, // the kernel stops asking (ls -l asks twice per file)
			MaxWrite:      1 << 20,
			MaxBackground: 32,
		},
		NullPermissions: true,
	}
	server, err := gofs.Mount(mountpoint, f.root, opts)
	if err != nil {
		return nil, providers.E(providers.Unknown, "fs.Mount", err)
	}
	f.mu.Lock()
	f.server = server
	f.mu.Unlock()
	return server, nil
}
