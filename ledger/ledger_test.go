package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func usd(f float64) *float64 { return &f }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(bytes.NewBuffer(nil), nil)) }

// env is a ledger told of the boxes of a fake provider, as the box manager
// tells it.
type env struct {
	clk  *fake.Clock
	fake *fake.Provider
	l    *ledger.Ledger
	dir  string
}

func newEnv(t *testing.T, prices ledger.Prices, opts ...fake.Option) *env {
	t.Helper()
	clk := fake.NewClock(t0)
	fk := fake.New(append([]fake.Option{fake.WithClock(clk)}, opts...)...)
	fk.Program("true", func(ctx context.Context, pc *fake.Proc) int { return 0 })
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Config{StateDir: dir, Prices: prices, Clock: clk, Logger: quiet()})
	require.NoError(t, err)
	return &env{clk: clk, fake: fk, l: l, dir: dir}
}

// create makes a box and tells the ledger, with the box's facts.
func (e *env) create(t *testing.T, spec providers.Spec) providers.Box {
	t.Helper()
	return created(t, e.l, e.fake, spec)
}

func created(t *testing.T, l *ledger.Ledger, p providers.Provider, spec providers.Spec) providers.Box {
	t.Helper()
	b, err := p.Create(context.Background(), spec)
	require.NoError(t, err)
	f, err := b.Facts(context.Background())
	require.NoError(t, err)
	calls, _ := b.(providers.CallCounter)
	l.Created(p.Name(), b.ID(), spec, f, calls)
	return b
}

// exec runs true in b and tells the ledger how the call went.
func (e *env) exec(b providers.Box) {
	pr, err := b.Exec(context.Background(), providers.ExecRequest{Argv: []string{"true"}})
	e.l.Exec(e.fake.Name(), b.ID(), err)
	if err == nil {
		pr.Wait()
	}
}

// destroy ends b and tells the ledger.
func (e *env) destroy(t *testing.T, b providers.Box) {
	t.Helper()
	require.NoError(t, b.Destroy(context.Background()))
	e.l.Ended(e.fake.Name(), b.ID(), time.Time{})
}

func readAll(t *testing.T, dir string) []ledger.Receipt {
	t.Helper()
	rs, err := ledger.ReadAll(dir)
	require.NoError(t, err)
	return rs
}

func TestReceiptArithmetic(t *testing.T) {
	perSecond := func(rate float64) ledger.Prices {
		return ledger.Prices{"fake/container": {USDPerSecond: usd(rate), Source: "https://example.com/pricing", Priced: "2026-11-30"}}
	}
	perCall := func(rate float64) ledger.Prices {
		return ledger.Prices{"archil": {USDPerCall: usd(rate), Source: "https://archil.example/pricing", Priced: "2026-11-29"}}
	}
	tests := []struct {
		name     string
		prices   ledger.Prices
		opts     []fake.Option
		spec     providers.Spec
		lived    time.Duration
		refuse   int // Exec calls refused before they were made
		calls    int // Exec calls made
		wantFrom time.Time
		want     string // the receipt's JSON line; "" for none
	}{
		{
			name: "per second", prices: perSecond(0.0001), spec: providers.Spec{Isolation: providers.IsolationContainer},
			lived: 90 * time.Second, calls: 2,
			want: `{"box":"box-1","provider":"fake","kind":"container","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:01:30Z","seconds":90,"usd_per_second":0.0001,"cost_usd":0.009,"source":"https://example.com/pricing","priced":"2026-11-30"}`,
		},
		{
			name: "per second, nanoseconds", prices: perSecond(0.000123), spec: providers.Spec{Isolation: providers.IsolationContainer},
			lived: 1500*time.Millisecond + 1,
			want:  `{"box":"box-1","provider":"fake","kind":"container","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:00:01.500000001Z","seconds":1.500000001,"usd_per_second":0.000123,"cost_usd":0.0001845,"source":"https://example.com/pricing","priced":"2026-11-30"}`,
		},
		{
			name: "decimal, not binary: 3 s at 0.1", prices: perSecond(0.1), spec: providers.Spec{Isolation: providers.IsolationContainer},
			lived: 3 * time.Second,
			want:  `{"box":"box-1","provider":"fake","kind":"container","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:00:03Z","seconds":3,"usd_per_second":0.1,"cost_usd":0.3,"source":"https://example.com/pricing","priced":"2026-11-30"}`,
		},
		{
			name: "rounds half up at the 9th decimal", prices: perSecond(0.0000000005), spec: providers.Spec{Isolation: providers.IsolationContainer},
			lived: time.Second,
			want:  `{"box":"box-1","provider":"fake","kind":"container","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:00:01Z","seconds":1,"usd_per_second":0.0000000005,"cost_usd":0.000000001,"source":"https://example.com/pricing","priced":"2026-11-30"}`,
		},
		{
			name: "rounds down below half", prices: perSecond(0.0000000004), spec: providers.Spec{Isolation: providers.IsolationContainer},
			lived: time.Second,
			want:  `{"box":"box-1","provider":"fake","kind":"container","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:00:01Z","seconds":1,"usd_per_second":0.0000000004,"cost_usd":0,"source":"https://example.com/pricing","priced":"2026-11-30"}`,
		},
		{
			name: "per call: refused calls are not counted", prices: perCall(0.0002), opts: []fake.Option{fake.WithName("archil")},
			lived: time.Hour, calls: 3, refuse: 2,
			want: `{"box":"box-1","provider":"archil","kind":"none","from":"2026-12-01T09:00:00Z","to":"2026-12-01T10:00:00Z","seconds":3600,"usd_per_call":0.0002,"calls":3,"cost_usd":0.0006,"source":"https://archil.example/pricing","priced":"2026-11-29"}`,
		},
		{
			name: "per call, no calls: cost 0, calls 0", prices: perCall(0.0002), opts: []fake.Option{fake.WithName("archil")},
			lived: time.Minute,
			want:  `{"box":"box-1","provider":"archil","kind":"none","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:01:00Z","seconds":60,"usd_per_call":0.0002,"calls":0,"cost_usd":0,"source":"https://archil.example/pricing","priced":"2026-11-29"}`,
		},
		{
			name: "gpu kind", prices: ledger.Prices{"fake/gpu:H100": {USDPerSecond: usd(0.001), Source: "s", Priced: "2026-11-30"}},
			spec: providers.Spec{GPU: "H100", Isolation: providers.IsolationMicroVM}, lived: 10 * time.Second,
			want: `{"box":"box-1","provider":"fake","kind":"gpu:H100","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:00:10Z","seconds":10,"usd_per_second":0.001,"cost_usd":0.01,"source":"s","priced":"2026-11-30"}`,
		},
		{
			name: "provider-wide price", prices: ledger.Prices{"fake": {USDPerSecond: usd(0.5), Source: "s", Priced: "2026-11-30"}},
			spec: providers.Spec{Isolation: providers.IsolationGVisor}, lived: 2 * time.Second,
			want: `{"box":"box-1","provider":"fake","kind":"gvisor","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:00:02Z","seconds":2,"usd_per_second":0.5,"cost_usd":1,"source":"s","priced":"2026-11-30"}`,
		},
		{
			name: "no price: no receipt", prices: perSecond(0.1), spec: providers.Spec{Isolation: providers.IsolationMicroVM},
			lived: time.Minute, want: "",
		},
		{
			name: "the box's own start time", prices: perSecond(0.01), spec: providers.Spec{Isolation: providers.IsolationContainer},
			opts:  []fake.Option{fake.WithFacts(func(f *providers.Facts) { f.StartedAt = t0.Add(-10 * time.Second) })},
			lived: 5 * time.Second,
			want:  `{"box":"box-1","provider":"fake","kind":"container","from":"2026-12-01T08:59:50Z","to":"2026-12-01T09:00:05Z","seconds":15,"usd_per_second":0.01,"cost_usd":0.15,"source":"https://example.com/pricing","priced":"2026-11-30"}`,
		},
		{
			name: "no start time from the box: when create answered", prices: perSecond(0.01), spec: providers.Spec{Isolation: providers.IsolationContainer},
			opts:  []fake.Option{fake.WithFacts(func(f *providers.Facts) { f.StartedAt = time.Time{} })},
			lived: 5 * time.Second,
			want:  `{"box":"box-1","provider":"fake","kind":"container","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:00:05Z","seconds":5,"usd_per_second":0.01,"cost_usd":0.05,"source":"https://example.com/pricing","priced":"2026-11-30"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.prices, tt.opts...)
			ctx := context.Background()
			b := e.create(t, tt.spec)
			rule := e.fake.On(fake.Match{Op: "Exec"}).Fail(providers.Refused).Times(tt.refuse)
			for range tt.refuse + tt.calls {
				e.exec(b)
			}
			require.Equal(t, tt.refuse, rule.Hits(), "calls refused")
			e.clk.Advance(tt.lived)
			e.destroy(t, b)
			rs := readAll(t, e.dir)
			final, ok := e.l.Final(e.fake.Name(), b.ID())
			if tt.want == "" {
				assert.Empty(t, rs, "a box with no price got a receipt")
				assert.False(t, ok, "Final of a box with no price")
				est, ok := e.l.Estimate("fake", b.ID())
				assert.True(t, ok)
				assert.Nil(t, est.CostUSD, "Estimate of an unpriced box")
				assert.Nil(t, est.USDPerSecond, "Estimate of an unpriced box")
				js, _ := e.l.ReceiptJSON(ctx, "fake", b.ID())
				assert.Contains(t, string(js), `"cost_usd": null`)
				return
			}
			require.Len(t, rs, 1)
			require.True(t, ok, "Final")
			line, err := os.ReadFile(filepath.Join(e.dir, ledger.ReceiptsFile))
			require.NoError(t, err)
			assert.Equal(t, tt.want, strings.TrimSuffix(string(line), "\n"), "receipt")
			js, _ := json.Marshal(final)
			assert.Equal(t, tt.want, string(js), "Final")
			// What ReadAll gives back writes the same line again.
			js, _ = json.Marshal(rs[0])
			assert.Equal(t, tt.want, string(js), "ReadAll round trip")
		})
	}
}

func TestExactlyOneReceipt(t *testing.T) {
	e := newEnv(t, ledger.Prices{"fake": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}})
	b := e.create(t, providers.Spec{})
	e.clk.Advance(time.Second)
	e.destroy(t, b)
	e.clk.Advance(time.Second)
	e.l.Ended("fake", b.ID(), time.Time{})
	e.l.Exec("fake", b.ID(), providers.Errorf(providers.Gone, "test", "gone"))
	rs := readAll(t, e.dir)
	require.Len(t, rs, 1)
	assert.Equal(t, 1.0, rs[0].Seconds)
}

// A box found ended long after its lifetime ran out is receipted up to
// the end of its lifetime, at the time the box says it ended or when it
// was found.
func TestLifetimeRanOut(t *testing.T) {
	prices := ledger.Prices{"fake": {USDPerSecond: usd(0.001), Source: "s", Priced: "2026-11-30"}}
	for _, tc := range []struct {
		name string
		at   func() time.Time
	}{
		{"found ended, no end time", func() time.Time { return time.Time{} }},
		{"the box's own end time", func() time.Time { return t0.Add(50 * time.Minute) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, prices)
			b := e.create(t, providers.Spec{Lifetime: 10 * time.Minute})
			e.clk.Advance(4 * time.Minute)
			est, ok := e.l.Estimate("fake", b.ID())
			require.True(t, ok)
			assert.Equal(t, 240.0, est.Seconds)
			assert.Equal(t, 0.24, *est.CostUSD)
			_, ok = e.l.Final("fake", b.ID())
			assert.False(t, ok, "Final while the box lives")
			e.clk.Advance(time.Hour)
			est, _ = e.l.Estimate("fake", b.ID())
			assert.Equal(t, 600.0, est.Seconds, "the estimate stops at the end of the lifetime")
			assert.Empty(t, readAll(t, e.dir), "a receipt before the box was found ended")

			e.l.Ended("fake", b.ID(), tc.at())
			rs := readAll(t, e.dir)
			require.Len(t, rs, 1)
			r := rs[0]
			assert.True(t, r.From.Equal(t0), "from %v", r.From)
			assert.True(t, r.To.Equal(t0.Add(10*time.Minute)), "to %v", r.To)
			assert.Equal(t, 600.0, r.Seconds)
			assert.Equal(t, 0.6, *r.CostUSD)
			final, ok := e.l.Final("fake", b.ID())
			assert.True(t, ok)
			assert.Equal(t, r.Box, final.Box)
			js, err := e.l.ReceiptJSON(context.Background(), "fake", b.ID())
			require.NoError(t, err)
			assert.Contains(t, string(js), `"seconds": 600`)
		})
	}
}

func TestRestartContinuesNumbering(t *testing.T) {
	prices := ledger.Prices{"fake": {USDPerSecond: usd(0.01), Source: "s", Priced: "2026-11-30"}}
	clk := fake.NewClock(t0)
	fk := fake.New(fake.WithClock(clk))
	dir := t.TempDir()
	open := func() *ledger.Ledger {
		l, err := ledger.Open(ledger.Config{StateDir: dir, Prices: prices, Clock: clk, Logger: quiet()})
		require.NoError(t, err)
		return l
	}

	first := open()
	b1 := created(t, first, fk, providers.Spec{})
	b2 := created(t, first, fk, providers.Spec{}) // still running when the process "dies"
	clk.Advance(time.Second)
	first.Ended("fake", b1.ID(), time.Time{})

	// A new process: labels box-1 and box-2 are taken, one of them by a
	// box that has no receipt yet.
	second := open()
	b3 := created(t, second, fk, providers.Spec{})
	clk.Advance(time.Second)
	second.Ended("fake", b3.ID(), time.Time{})
	// The box the first process made is not the second's: no receipt.
	second.Ended("fake", b2.ID(), time.Time{})

	var labels []string
	for _, r := range readAll(t, dir) {
		labels = append(labels, r.Box)
	}
	assert.Equal(t, []string{"box-1", "box-3"}, labels)

	// Numbering also continues from the receipts alone.
	require.NoError(t, os.Remove(filepath.Join(dir, ledger.LabelsFile)))
	third := open()
	b4 := created(t, third, fk, providers.Spec{})
	third.Ended("fake", b4.ID(), time.Time{})
	rs := readAll(t, dir)
	assert.Equal(t, "box-4", rs[len(rs)-1].Box, "the next box after losing the labels file")
}

// Two ledgers on one state directory (two processes) never give one label
// twice.
func TestLabelsAcrossLedgers(t *testing.T) {
	dir := t.TempDir()
	fk := fake.New()
	var ls []*ledger.Ledger
	for range 2 {
		l, err := ledger.Open(ledger.Config{StateDir: dir, Prices: ledger.Prices{"fake": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}}, Logger: quiet()})
		require.NoError(t, err)
		ls = append(ls, l)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			l := ls[i%2]
			id := providers.NewID(8)
			l.Created(fk.Name(), id, providers.Spec{}, providers.Facts{}, nil)
			l.Ended(fk.Name(), id, time.Time{})
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, r := range readAll(t, dir) {
		assert.False(t, seen[r.Box], "label %s given twice", r.Box)
		seen[r.Box] = true
	}
	assert.Len(t, seen, 20)
}

func TestHostLabelAndKind(t *testing.T) {
	dir := t.TempDir()
	fk := fake.New()
	l, err := ledger.Open(ledger.Config{
		StateDir: dir,
		Prices:   ledger.Prices{"fake/small": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}},
		Logger:   quiet(),
		Label:    func(s providers.Spec) string { return s.Labels["name"] },
		Kind: func(f providers.Facts) string {
			if f.CPUs <= 1 {
				return "small"
			}
			return ""
		},
	})
	require.NoError(t, err)
	named := created(t, l, fk, providers.Spec{Labels: map[string]string{"name": "demo"}, CPUs: 1})
	numbered := created(t, l, fk, providers.Spec{CPUs: 1})
	l.Ended("fake", named.ID(), time.Time{})
	l.Ended("fake", numbered.ID(), time.Time{})
	var got []string
	for _, r := range readAll(t, dir) {
		got = append(got, r.Box+":"+r.Kind)
	}
	assert.Equal(t, []string{"demo:small", "box-1:small"}, got)
}

// A box told of with no facts (a create that failed but left it behind)
// is metered from when the ledger was told, and receipted when it ends.
func TestCreatedWithoutFacts(t *testing.T) {
	e := newEnv(t, ledger.Prices{"fake": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}})
	e.l.Created("fake", "left-behind", providers.Spec{}, providers.Facts{}, nil)
	e.clk.Advance(7 * time.Second)
	e.l.Ended("fake", "left-behind", time.Time{})
	rs := readAll(t, e.dir)
	require.Len(t, rs, 1)
	assert.Equal(t, 7.0, rs[0].Seconds)
	assert.Equal(t, "box-1", rs[0].Box)
	assert.True(t, rs[0].From.Equal(t0))
}

// An Exec the provider answers Gone ends the box's metering at once.
func TestExecGoneEnds(t *testing.T) {
	e := newEnv(t, ledger.Prices{"fake": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}})
	b := e.create(t, providers.Spec{})
	e.clk.Advance(3 * time.Second)
	b.(*fake.Box).Vanish()
	e.exec(b)
	e.clk.Advance(time.Hour)
	rs := readAll(t, e.dir)
	require.Len(t, rs, 1)
	assert.Equal(t, 3.0, rs[0].Seconds)
}
