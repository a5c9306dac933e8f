package boxes_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// metered is a manager over a fake provider whose boxes a ledger meters,
// both on one fake clock.
type metered struct {
	clk   *fake.Clock
	fake  *fake.Provider
	l     *ledger.Ledger
	m     *boxes.Manager
	state string
}

func newMetered(t *testing.T, price ledger.Price) *metered {
	t.Helper()
	clk := fake.NewClock(t0)
	fp := fake.New(fake.WithClock(clk))
	fp.Program("true", func(ctx context.Context, pc *fake.Proc) int { return 0 })
	fp.Program("sh", func(ctx context.Context, pc *fake.Proc) int { return 0 }) // hands's scripts, answered "done"
	state := t.TempDir()
	l, err := ledger.Open(ledger.Config{StateDir: state, Prices: ledger.Prices{"fake": price}, Clock: clk, Logger: quiet()})
	require.NoError(t, err)
	m, err := boxes.New(boxes.Options{
		StateDir:        state,
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		Meter:           l,
		Now:             clk.Now,
		Logger:          quiet(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return &metered{clk: clk, fake: fp, l: l, m: m, state: state}
}

func (e *metered) receipts(t *testing.T) []ledger.Receipt {
	t.Helper()
	rs, err := ledger.ReadAll(e.state)
	require.NoError(t, err)
	return rs
}

func (e *metered) execCalls() int {
	n := 0
	for _, c := range e.fake.Calls() {
		if c.Op == "Exec" {
			n++
		}
	}
	return n
}

func perCall(rate float64) ledger.Price {
	return ledger.Price{USDPerCall: &rate, Source: "s", Priced: "2026-11-30"}
}

func perSecond(rate float64) ledger.Price {
	return ledger.Price{USDPerSecond: &rate, Source: "s", Priced: "2026-11-30"}
}

// A box billed per call is billed for every exec the box was sent:
// commands and hands's own scripts alike.
func TestMeterCountsEveryExec(t *testing.T) {
	e := newMetered(t, perCall(0.01))
	ctx := context.Background()
	require.NoError(t, e.m.Create(ctx, "a", "", providers.Spec{}))
	for range 3 {
		p, err := e.m.Exec(ctx, "a", hands.Command{Argv: []string{"true"}})
		require.NoError(t, err)
		code, err := p.Wait()
		require.NoError(t, err)
		require.Equal(t, 0, code)
	}
	b := e.m.Lookup("a")
	h, err := b.Hands(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Lutimes(ctx, h.Facts().Workspace, time.Time{}, t0)) // a script: the fake's files cannot
	e.clk.Advance(time.Minute)
	require.NoError(t, e.m.Destroy(ctx, "a"))
	rs := e.receipts(t)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Calls)
	assert.EqualValues(t, e.execCalls(), *rs[0].Calls, "calls billed, of the execs the box was sent")
	assert.GreaterOrEqual(t, *rs[0].Calls, int64(4))
}

// The manager tells the meter a box ended however it finds out: destroyed,
// found ended by its provider, or gone when attached again.
func TestMeterEnds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		end     func(t *testing.T, e *metered)
		seconds float64
	}{
		{"destroyed", func(t *testing.T, e *metered) {
			e.clk.Advance(30 * time.Second)
			require.NoError(t, e.m.Destroy(ctx, "a"))
		}, 30},
		{"its lifetime ran out", func(t *testing.T, e *metered) {
			e.clk.Advance(time.Hour)
			b := e.m.Lookup("a")
			err := b.Do(ctx, false, 0, func(ctx context.Context) error {
				h, err := b.Hands(ctx)
				if err == nil {
					_, err = h.Lstat(ctx, h.Facts().Workspace)
				}
				return err
			})
			require.True(t, providers.IsCode(err, providers.Gone), "Lstat of an ended box: %v", err)
			assert.Equal(t, boxes.StateGone, b.Info().State)
		}, 600},
		{"gone when attached again", func(t *testing.T, e *metered) {
			id := e.m.Lookup("a").Info().ID
			require.NoError(t, e.m.Forget(ctx, "a"))
			e.clk.Advance(20 * time.Second)
			e.fake.Boxes()[0].Vanish()
			err := e.m.Attach(ctx, "b", "fake", id)
			require.True(t, providers.IsCode(err, providers.NotFound), "Attach of a removed box: %v", err)
		}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMetered(t, perSecond(0.01))
			require.NoError(t, e.m.Create(ctx, "a", "", providers.Spec{Lifetime: 10 * time.Minute}))
			assert.Empty(t, e.receipts(t))
			tc.end(t, e)
			rs := e.receipts(t)
			require.Len(t, rs, 1)
			assert.Equal(t, tc.seconds, rs[0].Seconds)
		})
	}
}

// A create that fails but leaves a box behind (the error names it) meters
// that box all the same.
func TestMeterCreateLeavesBox(t *testing.T) {
	e := newMetered(t, perSecond(1))
	e.fake.On(fake.Match{Op: "Create"}).CreateFailsLeavingBox().Once()
	err := e.m.Create(context.Background(), "a", "", providers.Spec{})
	var perr *providers.Error
	require.True(t, errors.As(err, &perr) && perr.Box != "", "Create = %v", err)
	assert.Nil(t, e.m.Lookup("a"), "a failed create keeps no name")
	e.clk.Advance(7 * time.Second)
	est, ok := e.l.Estimate("fake", perr.Box)
	require.True(t, ok, "the box left behind is metered")
	assert.Equal(t, 7.0, est.Seconds)
}

// A box's receipt.json comes from the meter, and says so without one.
func TestReceiptJSON(t *testing.T) {
	ctx := context.Background()
	e := newMetered(t, perSecond(0.5))
	require.NoError(t, e.m.Create(ctx, "a", "", providers.Spec{}))
	e.clk.Advance(4 * time.Second)
	js, err := e.m.Lookup("a").ReceiptJSON(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"cost_usd": 2`)

	fp := fake.New()
	m, err := boxes.New(boxes.Options{StateDir: t.TempDir(), DefaultProvider: "fake", Logger: quiet(),
		OpenProvider: func(string) (providers.Provider, error) { return fp, nil }})
	require.NoError(t, err)
	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	js, err = m.Lookup("a").ReceiptJSON(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"cost_usd": null`)
}
