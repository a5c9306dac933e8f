package local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Box is one local box: a directory under the provider's root.
type Box struct {
	p       *Provider
	id, dir string
	ws      string // the workspace, dir/work: every file call's path starts with it
	labels  map[string]string
	created time.Time

	mu        sync.Mutex
	root      *os.Root // the box directory, opened on first file access
	rootD     *os.File // the same, for openat2 (nil: os.Root resolves every path)
	destroyed bool     // this handle destroyed the box
}

var _ providers.Box = (*Box)(nil)

func (p *Provider) box(dir string, rec record) *Box {
	return &Box{p: p, id: rec.ID, dir: dir, ws: filepath.Join(dir, "work"), labels: rec.Labels, created: rec.Created}
}

// ID returns the box's id: 16 hex digits, its directory's name.
func (b *Box) ID() string { return b.id }

// Dir returns the box's directory on the host.
func (b *Box) Dir() string { return b.dir }

// Workspace returns the host path of the box's workspace.
func (b *Box) Workspace() string { return b.ws }

// Labels returns the caller's labels plus boxfs.provider=local.
func (b *Box) Labels() map[string]string {
	out := make(map[string]string, len(b.labels)+1)
	for k, v := range b.labels {
		out[k] = v
	}
	out[LabelProvider] = Name
	return out
}

// read returns the box's record; a box whose record is gone is Gone.
func (b *Box) read(op string) (record, error) {
	b.mu.Lock()
	destroyed := b.destroyed
	b.mu.Unlock()
	if destroyed {
		return record{}, b.goneErr(op)
	}
	rec, err := readRecord(b.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, b.goneErr(op)
	}
	if err != nil {
		return rec, providers.E(providers.Unknown, op, err).WithBox(b.id)
	}
	return rec, nil
}

func (b *Box) goneErr(op string) error {
	return providers.Errorf(providers.Gone, op, "the box has been destroyed").WithBox(b.id)
}

// exists reports whether the box's record is still there.
func (b *Box) exists() bool {
	_, err := os.Lstat(filepath.Join(b.dir, recordName))
	return err == nil
}

// Facts reports what the box is: a directory on this machine, with the
// machine's CPUs, memory, network and kernel settings.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "local.Facts"
	rec, err := b.read(op)
	if err != nil {
		return providers.Facts{}, err
	}
	shell := "/bin/sh"
	if fi, err := os.Stat("/bin/bash"); err == nil && fi.Mode().IsRegular() {
		shell = "/bin/bash"
	}
	return providers.Facts{
		Provider:      Name,
		ID:            b.id,
		Isolation:     providers.IsolationNone,
		OS:            runtime.GOOS,
		Arch:          runtime.GOARCH,
		Workspace:     b.Workspace(),
		TmpDir:        filepath.Join(b.dir, "tmp"),
		Shell:         shell,
		CPUs:          float64(runtime.NumCPU()),
		MemoryMB:      memoryMB(),
		DiskGB:        diskGB(b.dir),
		Network:       providers.NetworkOpen,
		Ports:         []int{},
		PtraceScope:   ptraceScope(),
		LiveProcesses: providers.Bool(true),
		Stdin:         providers.Bool(true),
		SecretsVia:    "fd",
		StartedAt:     rec.Created,
	}, nil
}

// Status reports running or ended. A running box past its deadline (its
// watchdog is late or was killed) is ended here and then.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "local.Status"
	rec, err := b.read(op)
	if err != nil {
		return providers.Status{}, err
	}
	if rec.State == providers.StateRunning && !time.Now().Before(rec.Deadline) {
		if err := endBox(ctx, b.dir, b.id, "lifetime"); err != nil {
			return providers.Status{}, providers.E(0, op, err).WithBox(b.id)
		}
		if rec, err = b.read(op); err != nil {
			return providers.Status{}, err
		}
	}
	return providers.Status{State: rec.State, StartedAt: rec.Created, EndedAt: rec.EndedAt, Reason: rec.Reason}, nil
}

// Destroy ends every process of the box, stops its watchdog and removes
// its directory. A box already destroyed is not an error. A directory with
// a file system mounted under it is not removed (Refused): removing it
// would reach into the mount.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "local.Destroy"
	b.mu.Lock()
	destroyed := b.destroyed
	b.mu.Unlock()
	if destroyed {
		return nil
	}
	// b.mu is not held from here on: an Exec holding the box's lock shared
	// may need it to finish, and the box's lock orders us after it.
	if err := markEnding(b.dir); errors.Is(err, fs.ErrNotExist) {
		b.markDestroyed()
		return nil
	}
	unlock, err := lockBox(ctx, b.dir, true)
	if errors.Is(err, fs.ErrNotExist) {
		b.markDestroyed()
		return nil
	}
	if err != nil {
		return providers.E(0, op, err).WithBox(b.id)
	}
	defer unlock()
	rec, err := readRecord(b.dir)
	if errors.Is(err, fs.ErrNotExist) {
		b.markDestroyed()
		return nil
	}
	if err == nil && rec.State != providers.StateEnded {
		rec.State, rec.EndedAt, rec.Reason = providers.StateEnded, time.Now(), "destroyed"
		if err := writeRecord(b.dir, rec); err != nil {
			return providers.E(0, op, err).WithBox(b.id)
		}
	}
	if err := sweep(ctx, b.id); err != nil {
		return providers.E(0, op, err).WithBox(b.id)
	}
	if rec.Watchdog > 0 {
		stopWatchdog(rec.Watchdog, b.dir)
	}
	if m := mountsUnder(b.dir); len(m) > 0 {
		return providers.Errorf(providers.Refused, op, "not removing %s: file systems are mounted under it: %q", b.dir, m).WithBox(b.id)
	}
	// The record goes first, so a concurrent reader sees a gone box rather
	// than a half-removed one.
	if err := os.Remove(filepath.Join(b.dir, recordName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return providers.E(0, op, err).WithBox(b.id)
	}
	if err := os.RemoveAll(b.dir); err != nil {
		return providers.E(0, op, err).WithBox(b.id)
	}
	b.markDestroyed()
	return nil
}

func (b *Box) markDestroyed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.destroyed = true
	if b.root != nil {
		b.root.Close()
		b.root = nil
	}
	if b.rootD != nil {
		b.rootD.Close()
		b.rootD = nil
	}
}

// endBox marks the box in dir ended (if it is not yet) and kills every
// process of it. It is what the watchdog does at the deadline; a host that
// finds a box past its deadline does it too. A box already removed is left
// alone.
func endBox(ctx context.Context, dir, id, reason string) error {
	if err := markEnding(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := lockBox(ctx, dir, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := readRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if rec.State != providers.StateEnded {
		rec.State, rec.EndedAt, rec.Reason = providers.StateEnded, time.Now(), reason
		if err := writeRecord(dir, rec); err != nil {
			return err
		}
	}
	return sweep(ctx, id)
}

// markEnding tells Exec to start nothing more in the box in dir, before
// the caller waits for the box's lock: Execs keep taking the lock shared,
// and without this a stream of them could keep an exclusive taker out for
// ever.
func markEnding(dir string) error {
	return os.WriteFile(filepath.Join(dir, endingName), nil, 0o600)
}

// isEnding reports whether the box in dir is being ended or destroyed.
func isEnding(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, endingName))
	return err == nil
}
