package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func usd(f float64) *float64 { return &f }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(bytes.NewBuffer(nil), nil)) }

type env struct {
	clk  *fake.Clock
	fake *fake.Provider
	l    *ledger.Ledger
	p    providers.Provider // the wrapped fake
	dir  string
}

func newEnv(t *testing.T, prices ledger.Prices, opts ...fake.Option) *env {
	t.Helper()
	clk := fake.NewClock(t0)
	fk := fake.New(append([]fake.Option{fake.WithClock(clk)}, opts...)...)
	fk.Program("true", func(ctx context.Context, pc *fake.Proc) int { return 0 })
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Config{StateDir: dir, Prices: prices, Clock: clk, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return &env{clk: clk, fake: fk, l: l, p: l.Wrap(fk), dir: dir}
}

func (e *env) create(t *testing.T, spec providers.Spec) providers.Box {
	t.Helper()
	b, err := e.p.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t *testing.T, dir string) []ledger.Receipt {
	t.Helper()
	rs, err := ledger.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
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
				if pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}}); err == nil {
					pr.Wait()
				}
			}
			if rule.Hits() != tt.refuse {
				t.Fatalf("%d calls refused, want %d", rule.Hits(), tt.refuse)
			}
			e.clk.Advance(tt.lived)
			if err := b.Destroy(ctx); err != nil {
				t.Fatal(err)
			}
			rs := readAll(t, e.dir)
			final, ok := e.l.Final(b.Labels()["boxfs.provider"], b.ID())
			if tt.want == "" {
				if len(rs) != 0 || ok {
					t.Fatalf("a box with no price got a receipt: %+v", rs)
				}
				est, ok := e.l.Estimate("fake", b.ID())
				if !ok || est.CostUSD != nil || est.USDPerSecond != nil {
					t.Errorf("Estimate of an unpriced box = %+v, %v; want a null cost", est, ok)
				}
				if js, _ := e.l.ReceiptJSON(ctx, "fake", b.ID()); !bytes.Contains(js, []byte(`"cost_usd": null`)) {
					t.Errorf("receipt.json of an unpriced box:\n%s", js)
				}
				return
			}
			if len(rs) != 1 || !ok {
				t.Fatalf("receipts %+v, Final ok %v; want one", rs, ok)
			}
			line, err := os.ReadFile(filepath.Join(e.dir, ledger.ReceiptsFile))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(string(line), "\n"); got != tt.want {
				t.Errorf("receipt:\n got %s\nwant %s", got, tt.want)
			}
			if js, _ := json.Marshal(final); string(js) != tt.want {
				t.Errorf("Final:\n got %s\nwant %s", js, tt.want)
			}
			// What ReadAll gives back writes the same line again.
			if js, _ := json.Marshal(rs[0]); string(js) != tt.want {
				t.Errorf("ReadAll round trip:\n got %s\nwant %s", js, tt.want)
			}
		})
	}
}

func TestExactlyOneReceipt(t *testing.T) {
	e := newEnv(t, ledger.Prices{"fake": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}})
	ctx := context.Background()
	b := e.create(t, providers.Spec{})
	e.clk.Advance(time.Second)
	b.Destroy(ctx)
	e.clk.Advance(time.Second)
	b.Destroy(ctx)
	b.Status(ctx)
	e.p.Attach(ctx, b.ID())
	if rs := readAll(t, e.dir); len(rs) != 1 || rs[0].Seconds != 1 {
		t.Errorf("receipts = %+v, want one of 1 s", rs)
	}
}

// A box whose lifetime ran out, with no call from the host, is receipted
// at the next Status or Attach, up to the end of its lifetime.
func TestLifetimeRanOut(t *testing.T) {
	prices := ledger.Prices{"fake": {USDPerSecond: usd(0.001), Source: "s", Priced: "2026-11-30"}}
	tests := []struct {
		name string
		find func(e *env, b providers.Box) error
	}{
		{"status", func(e *env, b providers.Box) error {
			st, err := b.Status(context.Background())
			if err == nil && st.State != providers.StateEnded {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		}},
		{"attach of the ended box", func(e *env, b providers.Box) error {
			_, err := e.p.Attach(context.Background(), b.ID())
			return err
		}},
		{"attach after a sweep removed it", func(e *env, b providers.Box) error {
			e.fake.Sweep()
			_, err := e.p.Attach(context.Background(), b.ID())
			if !providers.IsCode(err, providers.NotFound) {
				return fmt.Errorf("Attach = %v, want NotFound", err)
			}
			return nil
		}},
		{"status after a sweep", func(e *env, b providers.Box) error {
			e.fake.Sweep()
			_, err := b.Status(context.Background())
			if !providers.IsCode(err, providers.Gone) {
				return fmt.Errorf("Status = %v, want Gone", err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, prices)
			b := e.create(t, providers.Spec{Lifetime: 10 * time.Minute})
			e.clk.Advance(4 * time.Minute)
			est, ok := e.l.Estimate("fake", b.ID())
			if !ok || est.Seconds != 240 || *est.CostUSD != 0.24 {
				t.Errorf("Estimate while it lives = %+v", est)
			}
			if _, ok := e.l.Final("fake", b.ID()); ok {
				t.Error("Final while the box lives")
			}
			e.clk.Advance(time.Hour)
			if rs := readAll(t, e.dir); len(rs) != 0 {
				t.Fatalf("a receipt before anything looked: %+v", rs)
			}
			if err := tt.find(e, b); err != nil {
				t.Fatal(err)
			}
			rs := readAll(t, e.dir)
			if len(rs) != 1 {
				t.Fatalf("receipts = %+v, want one", rs)
			}
			r := rs[0]
			if !r.From.Equal(t0) || !r.To.Equal(t0.Add(10*time.Minute)) || r.Seconds != 600 || *r.CostUSD != 0.6 {
				t.Errorf("receipt %+v, want 600 s from %v", r, t0)
			}
			final, ok := e.l.Final("fake", b.ID())
			if !ok || final.Box != r.Box {
				t.Errorf("Final = %+v, %v", final, ok)
			}
			js, err := e.l.ReceiptJSON(context.Background(), "fake", b.ID())
			if err != nil || !bytes.Contains(js, []byte(`"seconds": 600`)) {
				t.Errorf("receipt.json:\n%s %v", js, err)
			}
		})
	}
}

func TestRestartContinuesNumbering(t *testing.T) {
	prices := ledger.Prices{"fake": {USDPerSecond: usd(0.01), Source: "s", Priced: "2026-11-30"}}
	clk := fake.NewClock(t0)
	fk := fake.New(fake.WithClock(clk))
	dir := t.TempDir()
	ctx := context.Background()
	open := func() providers.Provider {
		l, err := ledger.Open(ledger.Config{StateDir: dir, Prices: prices, Clock: clk, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return l.Wrap(fk)
	}

	first := open()
	b1, _ := first.Create(ctx, providers.Spec{})
	b2, _ := first.Create(ctx, providers.Spec{}) // still running when the process "dies"
	clk.Advance(time.Second)
	b1.Destroy(ctx)

	// A new process: labels box-1 and box-2 are taken, one of them by a
	// box that has no receipt yet.
	second := open()
	b3, err := second.Create(ctx, providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	b3.Destroy(ctx)
	// The box the first process made is not the second's: no receipt.
	old, err := second.Attach(ctx, b2.ID())
	if err != nil {
		t.Fatal(err)
	}
	old.Destroy(ctx)

	var labels []string
	for _, r := range readAll(t, dir) {
		labels = append(labels, r.Box)
	}
	if !slices.Equal(labels, []string{"box-1", "box-3"}) {
		t.Errorf("receipts for %v, want box-1 and box-3", labels)
	}

	// Numbering also continues from the receipts alone.
	os.Remove(filepath.Join(dir, ledger.LabelsFile))
	third := open()
	b4, _ := third.Create(ctx, providers.Spec{})
	b4.Destroy(ctx)
	rs := readAll(t, dir)
	if got := rs[len(rs)-1].Box; got != "box-4" {
		t.Errorf("after losing the labels file the next box is %s, want box-4", got)
	}
}

// Two ledgers on one state directory (two processes) never give one label
// twice.
func TestLabelsAcrossLedgers(t *testing.T) {
	dir := t.TempDir()
	fk := fake.New()
	var ps []providers.Provider
	for range 2 {
		l, err := ledger.Open(ledger.Config{StateDir: dir, Prices: ledger.Prices{"fake": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}}, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, l.Wrap(fk))
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			b, err := ps[i%2].Create(context.Background(), providers.Spec{})
			if err != nil {
				t.Error(err)
				return
			}
			b.Destroy(context.Background())
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, r := range readAll(t, dir) {
		if seen[r.Box] {
			t.Errorf("label %s given twice", r.Box)
		}
		seen[r.Box] = true
	}
	if len(seen) != 20 {
		t.Errorf("%d receipts, want 20", len(seen))
	}
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
	if err != nil {
		t.Fatal(err)
	}
	p := l.Wrap(fk)
	ctx := context.Background()
	named, _ := p.Create(ctx, providers.Spec{Labels: map[string]string{"name": "demo"}, CPUs: 1})
	numbered, _ := p.Create(ctx, providers.Spec{CPUs: 1})
	named.Destroy(ctx)
	numbered.Destroy(ctx)
	var got []string
	for _, r := range readAll(t, dir) {
		got = append(got, r.Box+":"+r.Kind)
	}
	if !slices.Equal(got, []string{"demo:small", "box-1:small"}) {
		t.Errorf("receipts %v", got)
	}
}

// A create that fails but leaves a box behind: the box is metered, and
// receipted once it is found gone.
func TestCreateFailsLeavingBox(t *testing.T) {
	e := newEnv(t, ledger.Prices{"fake": {USDPerSecond: usd(1), Source: "s", Priced: "2026-11-30"}})
	e.fake.On(fake.Match{Op: "Create"}).CreateFailsLeavingBox().Once()
	ctx := context.Background()
	_, err := e.p.Create(ctx, providers.Spec{})
	var perr *providers.Error
	if !providers.IsCode(err, providers.OutcomeUnknown) || !errors.As(err, &perr) || perr.Box == "" {
		t.Fatalf("Create = %v", err)
	}
	e.clk.Advance(7 * time.Second)
	e.fake.Boxes()[0].Vanish()
	if _, err := e.p.Attach(ctx, perr.Box); !providers.IsCode(err, providers.NotFound) {
		t.Fatalf("Attach = %v", err)
	}
	rs := readAll(t, e.dir)
	if len(rs) != 1 || rs[0].Seconds != 7 || rs[0].Box != "box-1" {
		t.Errorf("receipts %+v, want one of 7 s for the box left behind", rs)
	}
}

func TestWrappedBoxKeepsInterfaces(t *testing.T) {
	fk := fake.New()
	inner, err := fk.Create(context.Background(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	for mask := range 16 {
		has := [4]bool{mask&1 != 0, mask&2 != 0, mask&4 != 0, mask&8 != 0}
		t.Run(fmt.Sprintf("files=%v/walker=%v/archiver=%v/pathstater=%v", has[0], has[1], has[2], has[3]), func(t *testing.T) {
			l, err := ledger.Open(ledger.Config{StateDir: t.TempDir(), Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			p := l.Wrap(oneBox{fk, compose(inner, has)})
			b, err := p.Create(context.Background(), providers.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			_, f := b.(providers.Files)
			_, w := b.(providers.Walker)
			_, a := b.(providers.Archiver)
			_, s := b.(providers.PathStater)
			if got := [4]bool{f, w, a, s}; got != has {
				t.Errorf("wrapped box has %v, want %v", got, has)
			}
			if b.ID() != inner.ID() {
				t.Errorf("ID %s, want %s", b.ID(), inner.ID())
			}
			if f {
				if _, err := b.(providers.Files).Stat(context.Background(), "/work"); err != nil {
					t.Errorf("Stat through the wrapper: %v", err)
				}
			}
		})
	}
}

// oneBox is a provider whose Create returns one given box.
type oneBox struct {
	*fake.Provider
	b providers.Box
}

func (o oneBox) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	return o.b, nil
}
