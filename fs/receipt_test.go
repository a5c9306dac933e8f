package fs_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/providers/local"
)

// receipt.json of a live box is a running estimate that grows as time
// passes, and becomes the final receipt once the box is destroyed.
func TestReceiptThroughTheMount(t *testing.T) {
	state := t.TempDir()
	rate := 0.001
	// The box reports its own start (the wall clock's): the ledger's clock
	// runs ahead of it, so every estimate is a whole number of clock steps
	// past a fixed start.
	clk := fake.NewClock(time.Now().Add(time.Minute))
	l, err := ledger.Open(ledger.Config{
		StateDir: state,
		Prices:   ledger.Prices{"local": {USDPerSecond: &rate, Source: "test price list", Priced: "2026-12-01"}},
		Clock:    clk,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	lp := local.New(t.TempDir())
	mnt, _ := serve(t, boxes.Options{
		StateDir:        state,
		DefaultProvider: "local",
		OpenProvider:    func(string) (providers.Provider, error) { return lp, nil },
		Meter:           l,
	})
	box := newBox(t, mnt, "a")

	type receipt struct {
		Box     string   `json:"box"`
		To      string   `json:"to"`
		Seconds float64  `json:"seconds"`
		CostUSD *float64 `json:"cost_usd"`
		Source  string   `json:"source"`
	}
	readReceipt := func() receipt {
		t.Helper()
		var r receipt
		b := readFile(t, filepath.Join(box, "receipt.json"))
		require.NoError(t, json.Unmarshal([]byte(b), &r), "receipt.json %q", b)
		return r
	}
	first := readReceipt()
	require.Equal(t, "box-1", first.Box)
	require.NotNil(t, first.CostUSD)
	assert.Equal(t, "test price list", first.Source)
	clk.Advance(90 * time.Second)
	second := readReceipt()
	require.NotNil(t, second.CostUSD)
	assert.InDelta(t, first.Seconds+90, second.Seconds, 1e-9, "the estimate grows with the clock")
	assert.InDelta(t, *first.CostUSD+0.09, *second.CostUSD, 2e-9)

	require.NoError(t, writeFile(t, filepath.Join(box, "ctl"), "destroy\n"))
	final := readReceipt()
	clk.Advance(time.Hour)
	again := readReceipt()
	assert.NotEmpty(t, final.To)
	require.NotNil(t, final.CostUSD)
	require.NotNil(t, again.CostUSD)
	assert.Equal(t, *final.CostUSD, *again.CostUSD, "the final receipt stays fixed")
	assert.Equal(t, final.Seconds, second.Seconds, "the box ended when it was destroyed")
	all, err := ledger.ReadAll(state)
	require.NoError(t, err)
	assert.Len(t, all, 1)
}
