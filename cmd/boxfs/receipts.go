package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/ledger"
)

func receiptsCommand() *cli.Command {
	return &cli.Command{
		Name:  "receipts",
		Usage: "list the receipts of ended boxes and their totals (with prices configured)",
		Description: `A receipt is written when a box made through the mount (or a direct-mode
command) ends, if its provider and kind have a price in the configuration. A
box without a price gets none: its cost is unknown, never 0.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print {receipts, totals} as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("receipts takes no arguments")
			}
			e, err := newEnv(c, false)
			if err != nil {
				return err
			}
			rs, err := ledger.ReadAll(e.state)
			if err != nil {
				return err
			}
			if rs == nil {
				rs = []ledger.Receipt{}
			}
			totals := ledger.Totals(rs)
			if c.Bool("json") {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Receipts []ledger.Receipt `json:"receipts"`
					Totals   []ledger.Total   `json:"totals"`
				}{rs, totals})
			}
			if len(rs) == 0 {
				note := ""
				if len(e.cfg.Prices) == 0 {
					note = " (no prices configured: see docs/config.md)"
				}
				fmt.Fprintf(e.stdout, "no receipts in %s%s\n", e.state, note)
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BOX\tPROVIDER\tKIND\tFROM\tSECONDS\tCOST_USD")
			for _, r := range rs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f\t%s\n", r.Box, r.Provider, r.Kind, r.From.Local().Format(time.DateTime), r.Seconds, cost(r.CostUSD))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout)
			tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOTAL\tPROVIDER\tKIND\tBOXES\tSECONDS\tCOST_USD")
			for _, t := range totals {
				fmt.Fprintf(tw, "\t%s\t%s\t%d\t%.1f\t%s\n", t.Provider, t.Kind, t.Boxes, t.Seconds, strconv.FormatFloat(t.CostUSD, 'f', -1, 64))
			}
			return tw.Flush()
		},
	}
}

func cost(c *float64) string {
	if c == nil {
		return "unknown"
	}
	return strconv.FormatFloat(*c, 'f', -1, 64)
}
