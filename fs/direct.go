package fs

import (
	"context"
	"sort"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine"
)

// The methods in this file drive boxes without a mount: the CLI uses them
// when nothing is mounted on the state directory, and for bulk moves (seed,
// pull) that should not go one file at a time through the kernel. They
// never open a box's cache, which belongs to the mounted daemon.

// BoxInfo is one named box, as `boxfs ls` shows it.
type BoxInfo struct {
	Name     string    `json:"name"`
	Provider string    `json:"provider"`
	ID       string    `json:"id"`
	State    string    `json:"state"`
	Created  time.Time `json:"created,omitzero"`
}

// List returns the named boxes, sorted by name.
func (f *FS) List() []BoxInfo {
	var out []BoxInfo
	for _, name := range f.Names() {
		b := f.lookupBox(name)
		if b == nil {
			continue
		}
		b.mu.Lock()
		st := b.state
		if b.health.bad && st == stateReady {
			st = "unhealthy"
		}
		out = append(out, BoxInfo{Name: name, Provider: b.rec.Provider, ID: b.rec.ID, State: st, Created: b.rec.Created})
		b.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (f *FS) box(name string) (*boxState, error) {
	b := f.lookupBox(name)
	if b == nil {
		return nil, providers.Errorf(providers.NotFound, "fs", "no box named %q", name)
	}
	return b, nil
}

// hands returns hands for the box without opening its cache: a declared box
// is made, a recorded one attached.
func (b *boxState) handsOnly(ctx context.Context) (*hands.Hands, error) {
	b.mu.Lock()
	h := b.hands
	b.mu.Unlock()
	if h != nil {
		return h, nil
	}
	b.connectMu.Lock()
	defer b.connectMu.Unlock()
	b.mu.Lock()
	if b.hands != nil {
		h := b.hands
		b.mu.Unlock()
		return h, nil
	}
	if b.state == stateGone {
		b.mu.Unlock()
		return nil, providers.Errorf(providers.Gone, "fs", "box %q is gone", b.name)
	}
	box := b.box
	b.mu.Unlock()
	if box == nil {
		var err error
		if box, err = b.attachOrCreate(ctx); err != nil {
			return nil, err
		}
	}
	h, err := hands.New(ctx, box, hands.Options{AgentBinary: b.fs.opts.AgentBinary, Logger: b.fs.log})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.hands, b.facts = h, h.Facts()
	b.mu.Unlock()
	return h, nil
}

// Exec runs a command in the named box, not recorded under cmds/.
func (f *FS) Exec(ctx context.Context, name string, cmd hands.Command) (providers.Process, error) {
	b, err := f.box(name)
	if err != nil {
		return nil, err
	}
	h, err := b.handsOnly(ctx)
	if err != nil {
		return nil, err
	}
	return h.Run(ctx, cmd)
}

// Destroy ends the named box.
func (f *FS) Destroy(ctx context.Context, name string) error {
	b, err := f.box(name)
	if err != nil {
		return err
	}
	return b.destroy(ctx)
}

// Release stops presenting the box; it keeps running until its lifetime.
func (f *FS) Release(ctx context.Context, name string) error {
	b, err := f.box(name)
	if err != nil {
		return err
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	return f.Forget(ctx, name)
}

// Facts renders the named box's facts.json.
func (f *FS) Facts(ctx context.Context, name string) ([]byte, error) {
	b, err := f.box(name)
	if err != nil {
		return nil, err
	}
	if _, err := b.handsOnly(ctx); err != nil {
		return nil, err
	}
	return b.factsJSON(ctx)
}

// Seed copies the host directory dir into the box's workspace in one tar.
func (f *FS) Seed(ctx context.Context, name, dir string, opts syncengine.SeedOptions) (syncengine.Receipt, error) {
	return f.SeedProgress(ctx, name, dir, opts, nil)
}

// Pull brings the box's workspace into the host directory dir:
// incrementally since the last pull into the same directory (its mark is
// kept in the state directory), in one tar.
func (f *FS) Pull(ctx context.Context, name, dir string, opts syncengine.PullOptions) (syncengine.Receipt, error) {
	return f.PullProgress(ctx, name, dir, opts, nil)
}
