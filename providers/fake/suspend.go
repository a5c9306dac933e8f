package fake

import (
	"context"
	"fmt"

	"github.com/boxfs/boxfs/providers"
)

var (
	_ providers.Suspender   = (*Provider)(nil)
	_ providers.Snapshotter = (*Provider)(nil)
)

// fakeBox returns b as one of p's boxes, or Invalid.
func (p *Provider) fakeBox(op string, b providers.Box) (*Box, error) {
	fb, ok := b.(*Box)
	if !ok || fb.p != p {
		return nil, providers.Errorf(providers.Invalid, op, "not a box of this fake")
	}
	return fb, nil
}

// Suspend suspends b as a container is stopped: every command in it ends
// (Wait returns TransportLost), its files stay, and calls on it are Refused
// until Resume (its lifetime runs on). The id it returns is the box's.
// Suspending a suspended box is not an error. It is recorded and scripted
// as op "Suspend".
func (p *Provider) Suspend(ctx context.Context, b providers.Box) (string, error) {
	const op = "fake.Suspend"
	rec := p.record(Call{Op: "Suspend", Box: b.ID()}, nil, nil)
	fb, err := p.fakeBox(op, b)
	if err == nil {
		err = p.script(rec).before(ctx, p.clock, op, &rec.Call)
	}
	if err == nil {
		fb.mu.Lock()
		if !fb.suspended {
			if err = fb.usableLocked(op); err == nil {
				fb.suspendLocked()
			}
		}
		fb.mu.Unlock()
	}
	p.done(rec, err)
	if err != nil {
		return "", err
	}
	return fb.id, nil
}

// suspendLocked ends every command of the box and marks it suspended.
func (b *Box) suspendLocked() {
	b.suspended = true
	for pr := range b.procs {
		pr.settle(-1, providers.Errorf(providers.TransportLost, "fake.Exec", "the box was suspended").WithBox(b.id))
	}
	clear(b.procs)
	clear(b.pids)
}

// Resume brings back the box Suspend returned id for, files as they were,
// no command running. A box whose lifetime passed is Gone; an id never
// suspended (or a box that runs) is returned as it is when it is a box of
// the fake, else NotFound. It is recorded and scripted as op "Resume".
func (p *Provider) Resume(ctx context.Context, id string) (providers.Box, error) {
	const op = "fake.Resume"
	rec := p.record(Call{Op: "Resume", Box: id}, nil, nil)
	err := p.script(rec).before(ctx, p.clock, op, &rec.Call)
	var b *Box
	if err == nil {
		p.mu.Lock()
		b = p.boxes[id]
		p.mu.Unlock()
		if b == nil {
			err = providers.Errorf(providers.NotFound, op, "no box %q", id).WithBox(id)
		}
	}
	if err == nil {
		b.mu.Lock()
		b.suspended = false
		err = b.usableLocked(op)
		b.mu.Unlock()
	}
	p.done(rec, err)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Snapshot copies b's whole file tree as it is now; a box made with
// Spec.Snapshot set to the id returned starts with a copy of it. The id is
// "snap-NAME-N". It is recorded and scripted as op "Snapshot".
func (p *Provider) Snapshot(ctx context.Context, b providers.Box, name string) (string, error) {
	const op = "fake.Snapshot"
	rec := p.record(Call{Op: "Snapshot", Box: b.ID(), Path: name}, nil, nil)
	fb, err := p.fakeBox(op, b)
	if err == nil {
		err = p.script(rec).before(ctx, p.clock, op, &rec.Call)
	}
	if err == nil && (name == "" || !validWord(name)) {
		err = providers.Errorf(providers.Invalid, op, "snapshot name %q is not a word", name)
	}
	var t *tree
	if err == nil {
		fb.mu.Lock()
		if err = fb.usableLocked(op); err == nil {
			t = fb.tree.clone()
		}
		fb.mu.Unlock()
	}
	var id string
	if err == nil {
		p.mu.Lock()
		p.n++
		id = fmt.Sprintf("snap-%s-%d", name, p.n)
		if p.snapshot == nil {
			p.snapshot = map[string]*tree{}
		}
		p.snapshot[id] = t
		p.mu.Unlock()
	}
	p.done(rec, err)
	return id, err
}

// snapshotTree returns a copy of the tree of snapshot id, or NotFound.
func (p *Provider) snapshotTree(op, id string) (*tree, error) {
	p.mu.Lock()
	t := p.snapshot[id]
	p.mu.Unlock()
	if t == nil {
		return nil, providers.Errorf(providers.NotFound, op, "no snapshot %q", id)
	}
	return t.clone(), nil
}

// clone copies the tree: every node once, so hard links stay shared.
func (t *tree) clone() *tree {
	c := *t
	seen := map[*node]*node{}
	var cp func(n *node) *node
	cp = func(n *node) *node {
		if m := seen[n]; m != nil {
			return m
		}
		m := *n
		m.data = append([]byte(nil), n.data...)
		seen[n] = &m
		if n.kids != nil {
			m.kids = make(map[string]*node, len(n.kids))
			for name, k := range n.kids {
				m.kids[name] = cp(k)
			}
		}
		return &m
	}
	c.root = cp(t.root)
	for old, n := range seen {
		if old.parent != nil {
			n.parent = seen[old.parent]
		}
	}
	return &c
}

// suspendedLocked is the error of a call on a suspended box, or nil.
func (b *Box) suspendedLocked(op string) error {
	if b.suspended {
		return providers.Errorf(providers.Refused, op, "the box is suspended").WithBox(b.id)
	}
	return nil
}
