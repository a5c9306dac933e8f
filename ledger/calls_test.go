package ledger_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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
// own count of calls when it keeps one: calls no Exec told the ledger of
// (its file operations, its removal) count, an Exec told of but never
// sent does not, and calls after its end are not on the receipt.
func TestCallsFromTheBox(t *testing.T) {
	e := newEnv(t, ledger.Prices{"archil": {USDPerCall: usd(0.0002), Source: "https://archil.example/pricing", Priced: "2026-11-29"}},
		fake.WithName("archil"))
	inner, err := e.fake.Create(context.Background(), providers.Spec{})
	require.NoError(t, err)
	cb := &countingBox{Box: inner}
	cb.n.Store(1) // the create's own call
	e.l.Created("archil", cb.ID(), providers.Spec{}, providers.Facts{}, cb)

	e.exec(cb)
	cb.n.Add(1)                      // the Exec's call
	e.l.Exec("archil", cb.ID(), nil) // an Exec whose call was never sent (cancelled in the queue)
	cb.n.Add(2)                      // two calls of the box's own file operations
	est, ok := e.l.Estimate("archil", cb.ID())
	require.True(t, ok)
	require.NotNil(t, est.Calls)
	assert.Equal(t, int64(4), *est.Calls, "the box's count, not the Execs the ledger was told of")

	require.NoError(t, cb.Destroy(context.Background()))
	cb.n.Add(1) // the removal's call
	e.l.Ended("archil", cb.ID(), time.Time{})
	cb.n.Add(1) // a call after the end is not on the receipt
	rs := readAll(t, e.dir)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Calls)
	assert.Equal(t, int64(5), *rs[0].Calls)
	assert.InDelta(t, 0.001, *rs[0].CostUSD, 1e-12)
	est, ok = e.l.Estimate("archil", cb.ID())
	require.True(t, ok)
	assert.Equal(t, int64(5), *est.Calls, "an ended box keeps the count its receipt priced")
}
