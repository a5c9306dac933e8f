package ledger

import (
	"context"
	"errors"

	"github.com/boxfs/boxfs/providers"
)

// Wrap returns p metered by the ledger. Boxes made through it are labelled,
// priced and metered from their start; each gets exactly one receipt (if
// priced) when it ends: destroyed through it, found ended by Status, or
// found gone by Attach, Status or Exec. A create that fails but names the
// box it left behind (the error's Box) meters that box too.
//
// The wrapper has p's name, and its boxes the inner boxes' ids and labels
// and the same optional interfaces (Files, Walker, Archiver, PathStater;
// Endpointer on the provider). Boxes found by Attach or List that were not
// made through this ledger (another process made them) are passed through
// unmetered.
func (l *Ledger) Wrap(p providers.Provider) providers.Provider {
	w := &provider{l: l, inner: p}
	if e, ok := p.(providers.Endpointer); ok {
		return struct {
			*provider
			providers.Endpointer
		}{w, e}
	}
	return w
}

type provider struct {
	l     *Ledger
	inner providers.Provider
}

var (
	_ providers.Provider = (*provider)(nil)
	_ providers.Box      = (*box)(nil)
)

func (w *provider) Name() string { return w.inner.Name() }

// Unwrap returns the provider the ledger wraps.
func (w *provider) Unwrap() providers.Provider { return w.inner }

func (w *provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	l := w.l
	b, err := w.inner.Create(ctx, spec)
	answered := l.now()
	if err != nil {
		var e *providers.Error
		if errors.As(err, &e) && e.Box != "" {
			// The create failed but left a box: it costs all the same.
			l.track(&entry{
				provider: w.inner.Name(), id: e.Box, label: w.label(spec),
				kind: l.kind(spec, providers.Facts{}), from: answered, lifetime: spec.LifetimeOrDefault(),
			})
		}
		return nil, err
	}
	f, ferr := b.Facts(ctx)
	if ferr != nil {
		l.log.Warn("ledger: no facts for a new box; kind from its spec, start from when create answered", "id", b.ID(), "err", ferr)
		f = providers.Facts{}
	}
	from := f.StartedAt
	if from.IsZero() {
		from = answered
	}
	e := &entry{
		provider: w.inner.Name(), id: b.ID(), label: w.label(spec),
		kind: l.kind(spec, f), from: from, lifetime: spec.LifetimeOrDefault(),
	}
	l.track(e)
	return l.wrapBox(b, e), nil
}

// label is the host's label for a box, or the next box-N.
func (w *provider) label(spec providers.Spec) string {
	if w.l.cfg.Label != nil {
		if s := w.l.cfg.Label(spec); s != "" {
			return s
		}
	}
	return w.l.takeLabel()
}

// kind is gpu:<model> for a box with a GPU, else its isolation, unless the
// host's Kind function names it.
func (l *Ledger) kind(spec providers.Spec, f providers.Facts) string {
	if f.GPU == "" {
		f.GPU = spec.GPU
	}
	if f.Isolation == "" {
		f.Isolation = spec.Isolation
	}
	if l.cfg.Kind != nil {
		if k := l.cfg.Kind(f); k != "" {
			return k
		}
	}
	switch {
	case f.GPU != "":
		return "gpu:" + f.GPU
	case f.Isolation != "":
		return string(f.Isolation)
	}
	return "unknown"
}

func (w *provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	l := w.l
	e := l.lookup(w.inner.Name(), id)
	b, err := w.inner.Attach(ctx, id)
	if err != nil {
		if gone(err) {
			l.end(e, l.now())
		}
		return nil, err
	}
	if e != nil {
		// Found again: has it ended meanwhile (its lifetime ran out)?
		st, err := b.Status(ctx)
		l.sawStatus(e, st, err)
	}
	return l.wrapBox(b, e), nil
}

func (w *provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	bs, err := w.inner.List(ctx, labels)
	if err != nil {
		return nil, err
	}
	out := make([]providers.Box, len(bs))
	for i, b := range bs {
		out[i] = w.l.wrapBox(b, w.l.lookup(w.inner.Name(), b.ID()))
	}
	return out, nil
}

// gone reports whether err says the box no longer exists.
func gone(err error) bool {
	return providers.IsCode(err, providers.NotFound) || providers.IsCode(err, providers.Gone)
}

// sawStatus ends e if a Status answer says its box has ended or is gone.
func (l *Ledger) sawStatus(e *entry, st providers.Status, err error) {
	switch {
	case e == nil:
	case err != nil:
		if gone(err) {
			l.end(e, l.now())
		}
	case st.State == providers.StateEnded:
		to := st.EndedAt
		if to.IsZero() {
			to = l.now()
		}
		l.end(e, to)
	}
}

// box is a metered box. Its optional interfaces come from the inner box
// through the anonymous struct types wrapBox makes.
type box struct {
	l     *Ledger
	inner providers.Box
	e     *entry // nil: not made through this ledger
}

// Unwrap returns the box the ledger wraps.
func (b *box) Unwrap() providers.Box { return b.inner }

func (b *box) ID() string                { return b.inner.ID() }
func (b *box) Labels() map[string]string { return b.inner.Labels() }

func (b *box) Facts(ctx context.Context) (providers.Facts, error) {
	f, err := b.inner.Facts(ctx)
	if err != nil && providers.IsCode(err, providers.Gone) {
		b.l.end(b.e, b.l.now())
	}
	return f, err
}

// Exec counts the call for a box billed per call, unless it was refused
// before it was made.
func (b *box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	p, err := b.inner.Exec(ctx, req)
	if b.e != nil && made(err) {
		b.l.counted(b.e)
	}
	if err != nil && providers.IsCode(err, providers.Gone) {
		b.l.end(b.e, b.l.now())
	}
	return p, err
}

// made reports whether an Exec that returned err may have reached the box
// (and so be billed): it succeeded, or failed in a way that leaves it
// unknown (timeout, cancel, a lost channel). A call refused up front
// (invalid, unsupported, refused, gone, auth, unavailable ...) was not.
func made(err error) bool {
	switch providers.CodeOf(err) {
	case 0, providers.Timeout, providers.Aborted, providers.Liveness,
		providers.TransportLost, providers.OutcomeUnknown, providers.Unknown:
		return true
	}
	return false
}

func (b *box) Status(ctx context.Context) (providers.Status, error) {
	st, err := b.inner.Status(ctx)
	b.l.sawStatus(b.e, st, err)
	return st, err
}

func (b *box) Destroy(ctx context.Context) error {
	err := b.inner.Destroy(ctx)
	if err == nil || gone(err) {
		b.l.end(b.e, b.l.now())
	}
	return err
}

// wrapBox wraps inner so that the result has exactly inner's optional
// interfaces among Files, Walker, Archiver and PathStater.
func (l *Ledger) wrapBox(inner providers.Box, e *entry) providers.Box {
	b := &box{l: l, inner: inner, e: e}
	if e != nil {
		e.countCalls(inner)
	}
	f, isF := inner.(providers.Files)
	w, isW := inner.(providers.Walker)
	a, isA := inner.(providers.Archiver)
	s, isS := inner.(providers.PathStater)
	type (
		F = providers.Files
		W = providers.Walker
		A = providers.Archiver
		S = providers.PathStater
	)
	switch [4]bool{isF, isW, isA, isS} {
	case [4]bool{false, false, false, false}:
		return b
	case [4]bool{true, false, false, false}:
		return struct {
			*box
			F
		}{b, f}
	case [4]bool{false, true, false, false}:
		return struct {
			*box
			W
		}{b, w}
	case [4]bool{false, false, true, false}:
		return struct {
			*box
			A
		}{b, a}
	case [4]bool{false, false, false, true}:
		return struct {
			*box
			S
		}{b, s}
	case [4]bool{true, true, false, false}:
		return struct {
			*box
			F
			W
		}{b, f, w}
	case [4]bool{true, false, true, false}:
		return struct {
			*box
			F
			A
		}{b, f, a}
	case [4]bool{true, false, false, true}:
		return struct {
			*box
			F
			S
		}{b, f, s}
	case [4]bool{false, true, true, false}:
		return struct {
			*box
			W
			A
		}{b, w, a}
	case [4]bool{false, true, false, true}:
		return struct {
			*box
			W
			S
		}{b, w, s}
	case [4]bool{false, false, true, true}:
		return struct {
			*box
			A
			S
		}{b, a, s}
	case [4]bool{true, true, true, false}:
		return struct {
			*box
			F
			W
			A
		}{b, f, w, a}
	case [4]bool{true, true, false, true}:
		return struct {
			*box
			F
			W
			S
		}{b, f, w, s}
	case [4]bool{true, false, true, true}:
		return struct {
			*box
			F
			A
			S
		}{b, f, a, s}
	case [4]bool{false, true, true, true}:
		return struct {
			*box
			W
			A
			S
		}{b, w, a, s}
	default: // all four
		return struct {
			*box
			F
			W
			A
			S
		}{b, f, w, a, s}
	}
}
