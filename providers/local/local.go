// Package local provides boxes that are directories on this machine.
//
// A box is the directory ROOT/ID/ with work/ (the workspace), home/ (its
// HOME), tmp/ (its TMPDIR), box.json (the record that lets Attach and List
// find it again from another process, mode 0600 since it holds the spec's
// env) and lock. There is no isolation: programs run as the caller's user
// and see the host's file system, with host paths. What a box does keep to
// itself:
//
//   - Environment: a program gets PATH (FixedPath), HOME and TMPDIR inside
//     the box, the spec's Env, the request's Env, and the marker
//     BOXFS_LOCAL_BOX=ID; nothing of the host's environment. It holds
//     stdin, stdout and stderr and no other descriptor: descriptors the host
//     process inherited without close-on-exec (Go opens none such) are
//     marked close-on-exec before each start, a change to the host process
//     that only its children can notice.
//   - Process groups: each Exec is its own process group. Cancelling its ctx
//     or calling Kill sends SIGKILL to the whole group and returns only
//     once no live (non-zombie) member is left.
//   - Lifetime: a detached watchdog process per box (its own session, stdio
//     on /dev/null, no other descriptor of its parent) sleeps until the
//     box's deadline and then ends it, also when the process that made the
//     box is gone. Ending a box (the watchdog, or Destroy) kills every
//     process of the box, found through /proc: every process whose
//     environment carries the box's marker (a program that went to the
//     background, called setsid or double-forked keeps it), plus every
//     descendant of one. A program that both clears its environment and
//     leaves its parent escapes this sweep; only a cgroup would catch it.
//
// The watchdog is the running binary itself, re-executed through
// /proc/self/exe with argv[0] "boxfs-local-watchdog" and
// BOXFS_LOCAL_WATCHDOG=1 set: this package's init function recognises that
// pair and runs the watchdog instead of the program. Any binary that links
// this package (cmd/boxfs, a test binary, a library user's program) can so
// serve as its own watchdog, and no subcommand is needed.
//
// The spec fields a local box honours are lifetime, env, labels, isolation
// ("none" only) and network ("open" only); every other field, and any other
// isolation or network mode, is refused as Unsupported. Paths given to a
// local box (an absolute ExecRequest.Dir, the Files methods) are host paths.
// The Files methods are confined to the box directory: a path outside it,
// or one that leaves it through "..", a symlink pointing out or a symlink
// with an absolute target, is refused as Unsafe (os.Root semantics).
//
// A box that reached its lifetime is ended, not removed: Status reports
// StateEnded, Exec returns Gone, its files stay readable through Files
// until Destroy removes the directory. After Destroy every call is Gone and
// Attach of its id is NotFound.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Name is the provider's registry name.
const Name = "local"

// FixedPath is the PATH every program in a local box starts with.
const FixedPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// MarkerEnv is the environment variable that tags every process of a box
// with the box's id.
const MarkerEnv = "BOXFS_LOCAL_BOX"

// LabelProvider is the reserved label every local box carries.
const LabelProvider = "boxfs.provider"

const (
	watchdogEnv  = "BOXFS_LOCAL_WATCHDOG"
	watchdogArg0 = "boxfs-local-watchdog"
	recordName   = "box.json"
	lockName     = "lock"
	endingName   = "ending" // present once the box is being ended or destroyed
)

// supportedFields are the spec fields a local box honours.
var supportedFields = []string{"lifetime", "env", "labels", "isolation", "network"}

func init() {
	if len(os.Args) == 2 && os.Args[0] == watchdogArg0 && os.Getenv(watchdogEnv) == "1" {
		os.Exit(watchdogMain(os.Args[1]))
	}
	providers.Register(Name, open)
}

// open is the registry's factory: option "root", default StateDir/local.
func open(cfg providers.Config) (providers.Provider, error) {
	const op = "local.Open"
	if err := providers.CheckOptions(op, cfg.Options, "root"); err != nil {
		return nil, err
	}
	root := cfg.Options["root"]
	if root == "" {
		if cfg.StateDir == "" {
			return nil, providers.Errorf(providers.Invalid, op, "no root option and no state directory")
		}
		root = filepath.Join(cfg.StateDir, "local")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, providers.E(providers.Invalid, op, err)
	}
	p := New(abs)
	if cfg.Logger != nil {
		p.log = cfg.Logger
	}
	return p, nil
}

// Provider makes local boxes under one root directory.
type Provider struct {
	root string
	log  *slog.Logger
}

var _ providers.Provider = (*Provider)(nil)

// New returns a provider keeping its boxes under root, which it creates
// when the first box is made. root should be absolute; a relative root is
// taken from the current directory once, here.
func New(root string) *Provider {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	return &Provider{root: filepath.Clean(root), log: slog.Default()}
}

// Name returns "local".
func (p *Provider) Name() string { return Name }

// Root returns the directory the provider keeps its boxes in.
func (p *Provider) Root() string { return p.root }

// record is what box.json holds.
type record struct {
	ID       string            `json:"id"`
	Labels   map[string]string `json:"labels,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Lifetime time.Duration     `json:"lifetimeNs"`
	Created  time.Time         `json:"created"`
	Deadline time.Time         `json:"deadline"`
	State    providers.State   `json:"state"`
	EndedAt  time.Time         `json:"endedAt,omitzero"`
	Reason   string            `json:"reason,omitempty"`
	Watchdog int               `json:"watchdogPid,omitempty"`
}

func readRecord(dir string) (record, error) {
	var rec record
	b, err := os.ReadFile(filepath.Join(dir, recordName))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("box record %s: %w", filepath.Join(dir, recordName), err)
	}
	return rec, nil
}

// writeRecord replaces box.json atomically. Callers that read, change and
// write a record hold the box's lock exclusively.
func writeRecord(dir string, rec record) error {
	b, err := json.MarshalIndent(rec, "", "\t")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".box.json-*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, recordName))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// validID reports whether id has the form newID makes: 16 lowercase hex
// digits. Anything else never names a box and never reaches a path.
func validID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// checkSpec refuses what a local box cannot honour.
func checkSpec(op string, spec providers.Spec) error {
	if err := spec.Validate(); err != nil {
		return providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supportedFields...); err != nil {
		return err
	}
	if spec.Isolation != "" && spec.Isolation != providers.IsolationNone {
		return providers.Errorf(providers.Unsupported, op, "isolation %q: a local box has none", spec.Isolation)
	}
	if spec.Network.Mode != "" && spec.Network.Mode != providers.NetworkOpen {
		return providers.Errorf(providers.Unsupported, op, "network %q: a local box shares the host's network", spec.Network.Mode)
	}
	return nil
}

// Create makes a box directory, writes its record and starts its watchdog.
// It returns once the watchdog has taken charge of the box.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "local.Create"
	if err := checkSpec(op, spec); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, providers.E(0, op, err)
	}
	if err := os.MkdirAll(p.root, 0o700); err != nil {
		return nil, providers.E(0, op, err)
	}
	var id, dir string
	for {
		id = providers.NewID(8)
		dir = filepath.Join(p.root, id)
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, providers.E(0, op, err)
		}
	}
	b, err := p.create(ctx, op, id, dir, spec)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.log.Debug("local box created", "box", id, "dir", dir, "lifetime", spec.LifetimeOrDefault())
	return b, nil
}

func (p *Provider) create(ctx context.Context, op, id, dir string, spec providers.Spec) (*Box, error) {
	for _, sub := range []struct {
		name string
		perm fs.FileMode
	}{{"work", 0o755}, {"home", 0o700}, {"tmp", 0o700}} {
		if err := os.Mkdir(filepath.Join(dir, sub.name), sub.perm); err != nil {
			return nil, providers.E(0, op, err).WithBox(id)
		}
	}
	now := time.Now()
	rec := record{
		ID:       id,
		Labels:   cloneMap(spec.Labels),
		Env:      cloneMap(spec.Env),
		Lifetime: spec.LifetimeOrDefault(),
		Created:  now,
		Deadline: now.Add(spec.LifetimeOrDefault()),
		State:    providers.StateRunning,
	}
	if err := writeRecord(dir, rec); err != nil {
		return nil, providers.E(0, op, err).WithBox(id)
	}
	pid, err := startWatchdog(ctx, dir)
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(id)
	}
	rec.Watchdog = pid
	return p.box(dir, rec), nil
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Attach finds the box id again from its record. A box whose deadline has
// passed while no watchdog ran (the machine was off) is ended now; a
// running box whose watchdog is gone gets a new one.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "local.Attach"
	if !validID(id) {
		return nil, providers.Errorf(providers.Invalid, op, "%q is not a local box id", id).WithBox(id)
	}
	dir := filepath.Join(p.root, id)
	rec, err := readRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, providers.Errorf(providers.NotFound, op, "no box %s under %s", id, p.root).WithBox(id)
	}
	if err != nil {
		return nil, providers.E(providers.Unknown, op, err).WithBox(id)
	}
	b := p.box(dir, rec)
	if rec.State == providers.StateRunning {
		if !time.Now().Before(rec.Deadline) {
			if err := endBox(ctx, dir, id, "lifetime"); err != nil {
				return nil, providers.E(0, op, err).WithBox(id)
			}
		} else if err := ensureWatchdog(ctx, dir, rec); err != nil {
			return nil, providers.E(0, op, err).WithBox(id)
		}
	}
	return b, nil
}

// List returns the boxes under the root that carry every label in labels,
// oldest first, ended ones included.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "local.List"
	ents, err := os.ReadDir(p.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	var boxes []*Box
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return nil, providers.E(0, op, err)
		}
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		dir := filepath.Join(p.root, e.Name())
		rec, err := readRecord(dir)
		if err != nil || rec.ID != e.Name() {
			continue // being made, being removed, or not ours
		}
		b := p.box(dir, rec)
		if providers.MatchLabels(b.Labels(), labels) {
			boxes = append(boxes, b)
		}
	}
	slices.SortFunc(boxes, func(a, b *Box) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return compareStrings(a.id, b.id)
	})
	out := make([]providers.Box, len(boxes))
	for i, b := range boxes {
		out[i] = b
	}
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
