package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// ReceiptsFile is the name of the receipts file in the state directory:
// one JSON receipt per line, appended and fsync'd as each box ends.
const ReceiptsFile = "receipts.jsonl"

// Receipt is what one box cost. Exactly one of USDPerSecond and
// USDPerCall is set: a box billed per call (Archil exec) carries Calls and
// USDPerCall, and no USDPerSecond at all. CostUSD is nil (null) when the
// box has no price: its cost is unknown, never 0. Costs are rounded to 9
// decimals.
type Receipt struct {
	Box          string    `json:"box"`      // box-1, box-2 ... or the host's label; never the provider's id
	Provider     string    `json:"provider"` // the provider's name
	Kind         string    `json:"kind"`     // gpu:<model>, else the isolation, or the host's kind
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	Seconds      float64   `json:"seconds"`
	USDPerSecond *float64  `json:"usd_per_second,omitempty"`
	USDPerCall   *float64  `json:"usd_per_call,omitempty"`
	Calls        *int64    `json:"calls,omitempty"`
	CostUSD      *float64  `json:"cost_usd"`
	Source       string    `json:"source"` // where the price was read
	Priced       string    `json:"priced"` // the date it was read
}

// MarshalJSON writes the receipt with its fields in the order above, times
// in UTC to the nanosecond and amounts as plain decimals (0.000001, never
// 1e-06).
func (r Receipt) MarshalJSON() ([]byte, error) {
	num := func(f *float64) *json.Number {
		if f == nil {
			return nil
		}
		n := json.Number(strconv.FormatFloat(*f, 'f', -1, 64))
		return &n
	}
	return json.Marshal(struct {
		Box          string       `json:"box"`
		Provider     string       `json:"provider"`
		Kind         string       `json:"kind"`
		From         string       `json:"from"`
		To           string       `json:"to"`
		Seconds      json.Number  `json:"seconds"`
		USDPerSecond *json.Number `json:"usd_per_second,omitempty"`
		USDPerCall   *json.Number `json:"usd_per_call,omitempty"`
		Calls        *int64       `json:"calls,omitempty"`
		CostUSD      *json.Number `json:"cost_usd"`
		Source       string       `json:"source"`
		Priced       string       `json:"priced"`
	}{
		r.Box, r.Provider, r.Kind,
		r.From.UTC().Format(time.RFC3339Nano), r.To.UTC().Format(time.RFC3339Nano),
		*num(&r.Seconds), num(r.USDPerSecond), num(r.USDPerCall), r.Calls, num(r.CostUSD),
		r.Source, r.Priced,
	})
}

// round9 rounds x to 9 decimals, halves away from zero, in decimal: the
// float's shortest decimal form is what is rounded, so 0.0000000005 is
// 0.000000001 whatever its binary form.
func round9(x *big.Rat) float64 {
	scaled := new(big.Rat).Mul(x, big.NewRat(1e9, 1))
	num, den := scaled.Num(), scaled.Denom()
	q, m := new(big.Int).QuoRem(num, den, new(big.Int))
	// |m|*2 >= den: round away from zero.
	if new(big.Int).Mul(new(big.Int).Abs(m), big.NewInt(2)).Cmp(den) >= 0 {
		if num.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	f, _ := new(big.Rat).SetFrac(q, big.NewInt(1e9)).Float64()
	return f
}

// decimal is f as the decimal it was written as.
func decimal(f float64) *big.Rat {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	if !ok {
		return new(big.Rat)
	}
	return r
}

// price fills in r's rate and cost for a box that lived d and made calls
// calls, at price p.
func (r *Receipt) price(p Price, d time.Duration, calls int64) {
	r.Source, r.Priced = p.Source, p.Priced
	var cost *big.Rat
	if p.USDPerCall != nil {
		rate := *p.USDPerCall
		r.USDPerCall = &rate
		r.Calls = &calls
		cost = new(big.Rat).Mul(decimal(rate), new(big.Rat).SetInt64(calls))
	} else {
		rate := *p.USDPerSecond
		r.USDPerSecond = &rate
		cost = new(big.Rat).Mul(decimal(rate), big.NewRat(d.Nanoseconds(), 1e9))
	}
	c := round9(cost)
	r.CostUSD = &c
}

// ReadAll reads every receipt in stateDir, in the order they were written.
// A missing file holds none. A last line cut short (a crash while writing)
// is left out; any other line that is not a receipt is Invalid.
func ReadAll(stateDir string) ([]Receipt, error) {
	const op = "ledger.ReadAll"
	name := filepath.Join(stateDir, ReceiptsFile)
	data, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, providers.E(providers.Unknown, op, err).WithPath(name)
	}
	lines := bytes.Split(data, []byte("\n"))
	torn := len(data) > 0 && data[len(data)-1] != '\n' // the last line never got its newline
	var out []Receipt
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r Receipt
		if err := json.Unmarshal(line, &r); err != nil {
			if torn && i == len(lines)-1 {
				break
			}
			return out, providers.Errorf(providers.Invalid, op, "line %d: %v", i+1, err).WithPath(name)
		}
		out = append(out, r)
	}
	return out, nil
}

// Total sums the receipts of one provider and kind.
type Total struct {
	Provider string  `json:"provider"`
	Kind     string  `json:"kind"`
	Boxes    int     `json:"boxes"`
	Seconds  float64 `json:"seconds"`
	Calls    int64   `json:"calls"`
	CostUSD  float64 `json:"cost_usd"`
}

// Totals sums receipts by provider and kind, sorted by provider, then
// kind; sums are rounded to 9 decimals. A receipt without a cost adds its
// box and time, but nothing to the cost.
func Totals(rs []Receipt) []Total {
	type key struct{ provider, kind string }
	type sum struct {
		boxes   int
		secs    *big.Rat
		calls   int64
		costUSD *big.Rat
	}
	sums := map[key]*sum{}
	for _, r := range rs {
		k := key{r.Provider, r.Kind}
		s := sums[k]
		if s == nil {
			s = &sum{secs: new(big.Rat), costUSD: new(big.Rat)}
			sums[k] = s
		}
		s.boxes++
		s.secs.Add(s.secs, decimal(r.Seconds))
		if r.Calls != nil {
			s.calls += *r.Calls
		}
		if r.CostUSD != nil {
			s.costUSD.Add(s.costUSD, decimal(*r.CostUSD))
		}
	}
	out := make([]Total, 0, len(sums))
	for k, s := range sums {
		out = append(out, Total{
			Provider: k.provider, Kind: k.kind, Boxes: s.boxes,
			Seconds: round9(s.secs), Calls: s.calls, CostUSD: round9(s.costUSD),
		})
	}
	slices.SortFunc(out, func(a, b Total) int {
		if c := strings.Compare(a.Provider, b.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out
}

// appendReceipt writes r as one line at the end of the receipts file and
// fsyncs it (and the directory, when the file is new).
func appendReceipt(stateDir string, r Receipt) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return appendLine(filepath.Join(stateDir, ReceiptsFile), append(line, '\n'))
}

func appendLine(name string, line []byte) error {
	_, statErr := os.Stat(name)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(line); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if errors.Is(statErr, os.ErrNotExist) {
		return syncDir(filepath.Dir(name))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkFinite refuses NaN and infinities, which JSON cannot carry.
func checkFinite(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%v is not a number", f)
	}
	return nil
}

// bigSeconds is d in seconds, exactly.
func bigSeconds(d time.Duration) *big.Rat { return big.NewRat(d.Nanoseconds(), 1e9) }
