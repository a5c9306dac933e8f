package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// LabelsFile is the name of the file in the state directory that lists
// every box label the ledger has given out, one per line, so that
// numbering continues past them after a restart.
const LabelsFile = "labels"

// Price is what a provider charges for one kind of box, as read from a
// published price list. Exactly one of USDPerSecond and USDPerCall is set.
type Price struct {
	USDPerSecond *float64 `json:"usd_per_second,omitempty" toml:"usd_per_second"`
	USDPerCall   *float64 `json:"usd_per_call,omitempty" toml:"usd_per_call"`
	Source       string   `json:"source" toml:"source"` // where it was read (a URL)
	Priced       string   `json:"priced" toml:"priced"` // the date it was read, 2006-01-02
}

// Prices maps PriceKey(provider, kind) to a price; a key of the provider's
// name alone prices every kind of that provider that has no key of its own.
type Prices map[string]Price

// PriceKey is the key of a provider's kind in Prices: "docker/container",
// "modal/gpu:A100".
func PriceKey(provider, kind string) string { return provider + "/" + kind }

// Lookup returns the price of a provider's kind.
func (ps Prices) Lookup(provider, kind string) (Price, bool) {
	if p, ok := ps[PriceKey(provider, kind)]; ok {
		return p, true
	}
	p, ok := ps[provider]
	return p, ok
}

// Check returns an Invalid error for the first price that does not set
// exactly one non-negative rate, a source and a date.
func (ps Prices) Check() error {
	const op = "ledger.Prices.Check"
	for k, p := range ps {
		bad := func(format string, args ...any) error {
			return providers.Errorf(providers.Invalid, op, "price %q: "+format, append([]any{k}, args...)...)
		}
		if (p.USDPerSecond == nil) == (p.USDPerCall == nil) {
			return bad("set exactly one of usd_per_second and usd_per_call")
		}
		rate := p.USDPerSecond
		if rate == nil {
			rate = p.USDPerCall
		}
		if err := checkFinite(*rate); err != nil || *rate < 0 {
			return bad("rate %v must be a number >= 0", *rate)
		}
		if p.Source == "" {
			return bad("no source")
		}
		if _, err := time.Parse(time.DateOnly, p.Priced); err != nil {
			return bad("priced %q is not a date (2006-01-02)", p.Priced)
		}
	}
	return nil
}

// Clock tells the time; *fake.Clock is one.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Config is what a Ledger is opened with.
type Config struct {
	// StateDir holds the receipts and labels files; it is made if missing.
	StateDir string
	// Prices prices the boxes; a box without a price gets no receipt.
	Prices Prices
	// Clock tells the time; nil is the wall clock.
	Clock Clock
	// Logger receives a line per receipt; nil is slog.Default().
	Logger *slog.Logger
	// Label, if set, names a box's receipt from its spec (e.g. from one of
	// its labels); an empty answer numbers it box-N.
	Label func(providers.Spec) string
	// Kind, if set, names a box's kind from its facts (GPU and Isolation
	// filled in from the spec where the box did not report them); an empty
	// answer falls back to gpu:<model>, else the isolation.
	Kind func(providers.Facts) string
}

// Ledger meters the boxes the box manager tells it of and writes one
// receipt for each when it ends. It is safe for concurrent use.
type Ledger struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	next    int               // the highest box-N given out
	entries map[string]*entry // by key(provider, id)
}

// entry is one box the ledger meters.
type entry struct {
	provider string
	id       string
	label    string
	kind     string
	price    *Price // nil: no price
	from     time.Time
	lifetime time.Duration
	calls    int64
	counter  providers.CallCounter // the box's own count of billed calls; nil: count Execs
	ended    bool
	to       time.Time
	final    *Receipt // the receipt written when it ended (priced boxes)
}

func key(provider, id string) string { return provider + "\x00" + id }

// Open opens the ledger whose files live in cfg.StateDir, reading back the
// labels taken so far. Boxes made by an earlier process are not its own: it
// writes no receipt for them.
func Open(cfg Config) (*Ledger, error) {
	const op = "ledger.Open"
	if cfg.StateDir == "" {
		return nil, providers.Errorf(providers.Invalid, op, "no state directory")
	}
	if err := cfg.Prices.Check(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	l := &Ledger{cfg: cfg, log: cfg.Logger, entries: map[string]*entry{}}
	if l.log == nil {
		l.log = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, providers.E(providers.Unknown, op, err).WithPath(cfg.StateDir)
	}
	// Labels taken: those listed, and those on receipts (a receipts file
	// from before the labels file, or a labels file lost).
	taken, err := readLabels(filepath.Join(cfg.StateDir, LabelsFile))
	if err != nil {
		return nil, providers.E(providers.Unknown, op, err)
	}
	rs, err := ReadAll(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		taken = max(taken, labelNumber(r.Box))
	}
	l.next = taken
	return l, nil
}

// labelNumber is N for "box-N", else 0.
func labelNumber(label string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(label, "box-"))
	if !strings.HasPrefix(label, "box-") || err != nil || n < 1 {
		return 0
	}
	return n
}

// readLabels returns the highest box-N in the labels file.
func readLabels(name string) (int, error) {
	data, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return highestLabel(data), nil
}

// highestLabel is the highest N of the box-N lines in data.
func highestLabel(data []byte) int {
	highest := 0
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		highest = max(highest, labelNumber(string(bytes.TrimSpace(line))))
	}
	return highest
}

// takeLabel gives the next box-N, recorded in the labels file under an
// exclusive lock, so that processes sharing the state directory never give
// out one label twice. If the file cannot be written the label is still
// given (the box exists and is metered) and the failure logged.
func (l *Ledger) takeLabel() string {
	name := filepath.Join(l.cfg.StateDir, LabelsFile)
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := lockedAppendLabel(name, l.next)
	if err != nil {
		l.log.Error("ledger: cannot record a box label; numbering may repeat after a restart", "file", name, "err", err)
		n = l.next + 1
	}
	l.next = n
	return fmt.Sprintf("box-%d", n)
}

func (l *Ledger) now() time.Time { return l.cfg.Clock.Now() }

// track starts metering a box.
func (l *Ledger) track(e *entry) {
	if p, ok := l.cfg.Prices.Lookup(e.provider, e.kind); ok {
		e.price = &p
	}
	l.mu.Lock()
	l.entries[key(e.provider, e.id)] = e
	l.mu.Unlock()
}

func (l *Ledger) lookup(provider, id string) *entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[key(provider, id)]
}

// billedCalls is the calls a box billed per call has made: its own count
// where it keeps one (a box whose file operations, create and removal make
// billed calls that never pass through Exec), else the Execs the ledger
// was told of. A box that ended keeps the count its receipt priced.
func (e *entry) billedCalls() int64 {
	if e.counter != nil && e.final == nil {
		e.calls = e.counter.BilledCalls()
	}
	return e.calls
}

// counted adds one billed call.
func (l *Ledger) counted(e *entry) {
	l.mu.Lock()
	if !e.ended {
		e.calls++
	}
	l.mu.Unlock()
}

// end closes a box's metering at time to (capped at the end of its
// lifetime) and, if it has a price, writes its receipt. A box ends once;
// later calls do nothing.
func (l *Ledger) end(e *entry, to time.Time) {
	l.mu.Lock()
	if e == nil || e.ended {
		l.mu.Unlock()
		return
	}
	e.ended = true
	e.to = e.capped(to)
	var r Receipt
	if e.price != nil {
		r = e.receiptLocked(e.to)
		e.final = &r
	}
	l.mu.Unlock()
	if e.price == nil {
		l.log.Info("ledger: box ended without a price; its cost is unknown", "box", e.label, "provider", e.provider, "kind", e.kind)
		return
	}
	if err := appendReceipt(l.cfg.StateDir, r); err != nil {
		l.log.Error("ledger: cannot write a receipt", "box", r.Box, "err", err)
	}
	l.log.Info("ledger: receipt", "box", r.Box, "provider", r.Provider, "kind", r.Kind,
		"from", r.From, "to", r.To, "seconds", r.Seconds, "cost_usd", *r.CostUSD, "source", r.Source, "priced", r.Priced)
}

// capped keeps an end time within the box's life: not before its start,
// not after its lifetime ran out.
func (e *entry) capped(to time.Time) time.Time {
	if e.lifetime > 0 {
		if last := e.from.Add(e.lifetime); to.After(last) {
			to = last
		}
	}
	if to.Before(e.from) {
		to = e.from
	}
	return to
}

func (e *entry) receiptLocked(to time.Time) Receipt {
	d := to.Sub(e.from)
	r := Receipt{
		Box:      e.label,
		Provider: e.provider,
		Kind:     e.kind,
		From:     e.from.UTC(),
		To:       to.UTC(),
		Seconds:  round9(bigSeconds(d)),
	}
	if e.price != nil {
		r.price(*e.price, d, e.billedCalls())
	}
	return r
}

// Estimate returns the running receipt of a box made through the ledger:
// its cost so far, with To now (CostUSD nil if it has no price). Once the
// box has ended it returns the end's numbers. ok is false for a box the
// ledger does not meter.
func (l *Ledger) Estimate(provider, boxID string) (r Receipt, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[key(provider, boxID)]
	if e == nil {
		return Receipt{}, false
	}
	to := e.to
	if !e.ended {
		to = e.capped(now)
	}
	return e.receiptLocked(to), true
}

// Final returns the receipt written when the box ended; ok is false while
// it lives, and for a box without a price (it gets no receipt).
func (l *Ledger) Final(provider, boxID string) (Receipt, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[key(provider, boxID)]
	if e == nil || e.final == nil {
		return Receipt{}, false
	}
	return *e.final, true
}

// ReceiptJSON renders a box's receipt.json: the final receipt once it has
// ended, else the running estimate; for a box the ledger does not meter, a
// receipt with only the provider and a null cost.
func (l *Ledger) ReceiptJSON(ctx context.Context, provider, boxID string) ([]byte, error) {
	r, ok := l.Final(provider, boxID)
	if !ok {
		r, ok = l.Estimate(provider, boxID)
	}
	var out []byte
	var err error
	if ok {
		out, err = json.MarshalIndent(r, "", "  ")
	} else {
		out, err = json.MarshalIndent(struct {
			Provider string   `json:"provider"`
			CostUSD  *float64 `json:"cost_usd"`
		}{provider, nil}, "", "  ")
	}
	if err != nil {
		return nil, providers.E(providers.Unknown, "ledger.ReceiptJSON", err)
	}
	return append(out, '\n'), nil
}

// appendNextLabel reads the labels in f, appends box-(highest+1) and
// fsyncs it; created says f is new, so its directory is fsync'd too.
func appendNextLabel(f *os.File, known int, created bool) (int, error) {
	data, err := io.ReadAll(f)
	if err != nil {
		return 0, err
	}
	n := max(known, highestLabel(data)) + 1
	line := fmt.Sprintf("box-%d\n", n)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		line = "\n" + line // a line cut short by a crash stays apart
	}
	if _, err := f.WriteString(line); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if created {
		if err := syncDir(filepath.Dir(f.Name())); err != nil {
			return 0, err
		}
	}
	return n, nil
}
