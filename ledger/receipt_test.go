package ledger_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
)

func TestReadAll(t *testing.T) {
	const r1 = `{"box":"box-1","provider":"docker","kind":"container","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:01:00Z","seconds":60,"usd_per_second":0.0001,"cost_usd":0.006,"source":"s","priced":"2026-11-30"}`
	const r2 = `{"box":"box-2","provider":"archil","kind":"none","from":"2026-12-01T09:00:00Z","to":"2026-12-01T09:01:00Z","seconds":60,"usd_per_call":0.0002,"calls":3,"cost_usd":0.0006,"source":"s","priced":"2026-11-30"}`
	tests := []struct {
		name  string
		file  *string // nil: no file
		boxes []string
		want  providers.Code
	}{
		{"no file", nil, nil, 0},
		{"two receipts", ptr(r1 + "\n" + r2 + "\n"), []string{"box-1", "box-2"}, 0},
		{"blank lines", ptr("\n" + r1 + "\n\n"), []string{"box-1"}, 0},
		{"last line cut short by a crash", ptr(r1 + "\n" + r2[:40]), []string{"box-1"}, 0},
		{"a bad line in the middle", ptr(r1 + "\nnot json\n" + r2 + "\n"), nil, providers.Invalid},
		{"a bad last line with its newline", ptr(r1 + "\n" + r2[:40] + "\n"), nil, providers.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.file != nil {
				os.WriteFile(filepath.Join(dir, ledger.ReceiptsFile), []byte(*tt.file), 0o600)
			}
			rs, err := ledger.ReadAll(dir)
			if providers.CodeOf(err) != tt.want {
				t.Fatalf("ReadAll = %v, want code %v", err, tt.want)
			}
			if err != nil {
				return
			}
			var boxes []string
			for _, r := range rs {
				boxes = append(boxes, r.Box)
			}
			if len(boxes) != len(tt.boxes) || len(boxes) > 0 && boxes[len(boxes)-1] != tt.boxes[len(tt.boxes)-1] {
				t.Errorf("boxes %v, want %v", boxes, tt.boxes)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestTotals(t *testing.T) {
	calls := func(n int64) *int64 { return &n }
	rs := []ledger.Receipt{
		{Box: "box-1", Provider: "docker", Kind: "container", Seconds: 0.1, CostUSD: usd(0.1)},
		{Box: "box-2", Provider: "docker", Kind: "container", Seconds: 0.2, CostUSD: usd(0.2)},
		{Box: "box-3", Provider: "archil", Kind: "none", Seconds: 5, Calls: calls(3), CostUSD: usd(0.0006)},
		{Box: "box-4", Provider: "archil", Kind: "none", Seconds: 1, Calls: calls(2), CostUSD: usd(0.0004)},
		{Box: "box-5", Provider: "docker", Kind: "gpu:H100", Seconds: 1, CostUSD: nil},
	}
	got := ledger.Totals(rs)
	want := []ledger.Total{
		{Provider: "archil", Kind: "none", Boxes: 2, Seconds: 6, Calls: 5, CostUSD: 0.001},
		{Provider: "docker", Kind: "container", Boxes: 2, Seconds: 0.3, CostUSD: 0.3}, // decimal sums: 0.1+0.2 is 0.3
		{Provider: "docker", Kind: "gpu:H100", Boxes: 1, Seconds: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Totals = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if ledger.Totals(nil) == nil || len(ledger.Totals(nil)) != 0 {
		t.Errorf("Totals(nil) = %#v, want an empty list", ledger.Totals(nil))
	}
}

func TestPricesCheck(t *testing.T) {
	tests := []struct {
		name string
		p    ledger.Price
		ok   bool
	}{
		{"per second", ledger.Price{USDPerSecond: usd(0.1), Source: "s", Priced: "2026-11-30"}, true},
		{"per call", ledger.Price{USDPerCall: usd(0.1), Source: "s", Priced: "2026-11-30"}, true},
		{"free", ledger.Price{USDPerSecond: usd(0), Source: "s", Priced: "2026-11-30"}, true},
		{"both rates", ledger.Price{USDPerSecond: usd(0.1), USDPerCall: usd(0.1), Source: "s", Priced: "2026-11-30"}, false},
		{"no rate", ledger.Price{Source: "s", Priced: "2026-11-30"}, false},
		{"negative", ledger.Price{USDPerSecond: usd(-1), Source: "s", Priced: "2026-11-30"}, false},
		{"no source", ledger.Price{USDPerSecond: usd(1), Priced: "2026-11-30"}, false},
		{"not a date", ledger.Price{USDPerSecond: usd(1), Source: "s", Priced: "last week"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ledger.Prices{"docker": tt.p}.Check()
			if (err == nil) != tt.ok || err != nil && !providers.IsCode(err, providers.Invalid) {
				t.Errorf("Check = %v, want ok %v", err, tt.ok)
			}
			_, err = ledger.Open(ledger.Config{StateDir: t.TempDir(), Prices: ledger.Prices{"docker": tt.p}})
			if (err == nil) != tt.ok {
				t.Errorf("Open = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
