package ledger

import (
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The methods in this file are the hook the box manager calls (they make
// a Ledger a boxes.Meter): the ledger never wraps a provider or a box.

// Created starts metering the box id that provider made from spec, as of
// the start the box reports (facts.StartedAt), else now (when the create
// answered). Its label is the host's (Config.Label) or the next box-N; its
// kind comes from facts, and from spec where the box did not report its
// GPU or isolation. A box whose create failed but left it behind is
// metered the same, with zero facts. A box that keeps its own count of
// billed calls (calls, nil otherwise) is priced per call by that count;
// any other by the Execs the ledger is told of.
func (l *Ledger) Created(provider, id string, spec providers.Spec, facts providers.Facts, calls providers.CallCounter) {
	from := facts.StartedAt
	if from.IsZero() {
		from = l.now()
	}
	l.track(&entry{
		provider: provider, id: id, label: l.label(spec),
		kind: l.kind(spec, facts), from: from, lifetime: spec.LifetimeOrDefault(),
		counter: calls,
	})
}

// Exec counts an Exec call on a box billed per call, unless the call was
// refused before it was made (see made); a box that keeps its own count of
// calls is priced by that count instead. An Exec that says the box is gone
// ends the box's metering.
func (l *Ledger) Exec(provider, id string, err error) {
	e := l.lookup(provider, id)
	if e == nil {
		return
	}
	if made(err) {
		l.counted(e)
	}
	if providers.IsCode(err, providers.Gone) {
		l.end(e, l.now())
	}
}

// Ended closes a box's metering at at (zero: now), capped at the end of
// its lifetime, and writes its receipt if it has a price. A box ends once;
// later calls, and calls for boxes this ledger did not see made (another
// process made them), do nothing.
func (l *Ledger) Ended(provider, id string, at time.Time) {
	if at.IsZero() {
		at = l.now()
	}
	l.end(l.lookup(provider, id), at)
}

// label is the host's label for a box, or the next box-N.
func (l *Ledger) label(spec providers.Spec) string {
	if l.cfg.Label != nil {
		if s := l.cfg.Label(spec); s != "" {
			return s
		}
	}
	return l.takeLabel()
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
