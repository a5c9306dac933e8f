package boxes

import (
	"context"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
)

// The methods in this file drive boxes by name, as the CLI does when
// nothing is mounted on the state directory. They never open a box's
// cache, which belongs to the mounted daemon.

// List returns the boxes, sorted by name.
func (m *Manager) List() []Info {
	var out []Info
	for _, name := range m.Names() {
		if b := m.Lookup(name); b != nil {
			out = append(out, b.Info())
		}
	}
	return out
}

// Exec runs a command in the named box, not kept among its Commands.
func (m *Manager) Exec(ctx context.Context, name string, cmd hands.Command) (providers.Process, error) {
	_, h, err := m.hands(ctx, name)
	if err != nil {
		return nil, err
	}
	return h.Run(ctx, cmd)
}

// hands returns the named box and its hands (see Box.Hands).
func (m *Manager) hands(ctx context.Context, name string) (*Box, *hands.Hands, error) {
	b, err := m.Box(name)
	if err != nil {
		return nil, nil, err
	}
	h, err := b.Hands(ctx)
	if err != nil {
		return nil, nil, err
	}
	return b, h, nil
}

// Destroy ends the named box.
func (m *Manager) Destroy(ctx context.Context, name string) error {
	b, err := m.Box(name)
	if err != nil {
		return err
	}
	return b.Destroy(ctx)
}

// Release pushes the box's dirty files and stops keeping it; it keeps
// running until its lifetime.
func (m *Manager) Release(ctx context.Context, name string) error {
	b, err := m.Box(name)
	if err != nil {
		return err
	}
	if err := b.Flush(ctx); err != nil {
		return err
	}
	return m.Forget(ctx, name)
}

// Facts renders the named box's facts.json.
func (m *Manager) Facts(ctx context.Context, name string) ([]byte, error) {
	b, _, err := m.hands(ctx, name)
	if err != nil {
		return nil, err
	}
	return b.FactsJSON(ctx)
}
