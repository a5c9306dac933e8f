package ledger_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// countingBox is a box that keeps its own count of billed calls, as an
// Archil box does for the calls its file operations make.
type countingBox struct {
	providers.Box
	n atomic.Int64
}

func (c *countingBox) BilledCalls() int64 { return c.n.Load() }

// TestCallsFromTheBox checks that a box billed per call is priced by its
// own count of calls when it keeps one, including calls made after the
// ledger last saw an Exec (its removal), and not by the Execs alone.
func TestCallsFromTheBox(t *testing.T) {
	ctx := context.Background()
	clk := fake.NewClock(t0)
	fk := fake.New(fake.WithClock(clk), fake.WithName("archil"))
	fk.Program("true", func(ctx context.Context, pc *fake.Proc) int { return 0 })
	inner, err := fk.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	cb := &countingBox{Box: inner}
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Config{StateDir: dir, Clock: clk, Logger: quiet(),
		Prices: ledger.Prices{"archil": {USDPerCall: usd(0.0002), Source: "https://archil.example/pricing", Priced: "2026-11-29"}}})
	require.NoError(t, err)
	b, err := l.Wrap(oneBox{fk, cb}).Create(ctx, providers.Spec{})
	require.NoError(t, err)
	p, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
	require.NoError(t, err)
	p.Wait()
	cb.n.Store(3) // the Exec, and two calls of the box's own file operations
	est, ok := l.Estimate("archil", b.ID())
	require.True(t, ok)
	assert.Equal(t, int64(3), *est.Calls)
	cb.n.Add(1) // the removal's call
	require.NoError(t, b.Destroy(ctx))
	cb.n.Add(1) // a call after the end is not on the receipt
	rs := readAll(t, dir)
	require.Len(t, rs, 1)
	assert.Equal(t, int64(4), *rs[0].Calls)
	assert.InDelta(t, 0.0008, *rs[0].CostUSD, 1e-12)
}
