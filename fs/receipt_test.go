package fs_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// receipt.json of a live box is a running estimate that grows as time
// passes, and becomes the final receipt once the box is destroyed.
func TestReceiptThroughTheMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	state := t.TempDir()
	rate := 0.001
	l, err := ledger.Open(ledger.Config{
		StateDir: state,
		Prices:   ledger.Prices{"local": {USDPerSecond: &rate, Source: "test price list", Priced: "2026-12-01"}},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	lp := l.Wrap(local.New(t.TempDir()))
	f, err := boxfs.New(boxfs.Options{
		StateDir:        state,
		DefaultProvider: "local",
		OpenProvider:    func(string) (providers.Provider, error) { return lp, nil },
		Receipt:         l.ReceiptJSON,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	server, err := f.Mount(mnt, boxfs.MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Unmount() })
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
		if err := json.Unmarshal([]byte(b), &r); err != nil {
			t.Fatalf("receipt.json %q: %v", b, err)
		}
		return r
	}
	first := readReceipt()
	if first.Box != "box-1" || first.CostUSD == nil || first.Source != "test price list" {
		t.Fatalf("first estimate %+v", first)
	}
	time.Sleep(1500 * time.Millisecond)
	second := readReceipt()
	if second.CostUSD == nil || *second.CostUSD <= *first.CostUSD || second.Seconds <= first.Seconds {
		t.Errorf("estimate did not grow: %+v then %+v", first, second)
	}
	if err := writeFile(t, filepath.Join(box, "ctl"), "destroy\n"); err != nil {
		t.Fatal(err)
	}
	final := readReceipt()
	time.Sleep(1100 * time.Millisecond)
	again := readReceipt()
	if final.To == "" || final.CostUSD == nil || again.CostUSD == nil || *again.CostUSD != *final.CostUSD {
		t.Errorf("after destroy: %+v then %+v; want a fixed final receipt", final, again)
	}
	all, err := ledger.ReadAll(state)
	if err != nil || len(all) != 1 {
		t.Errorf("receipts file holds %d receipts, %v", len(all), err)
	}
}
