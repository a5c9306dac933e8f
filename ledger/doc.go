// Package ledger records what each box costs: a provider wrapper that
// writes one receipt per box when it ends.
//
// # Receipts
//
// Open a Ledger on a state directory with the prices from the
// configuration, and Wrap each provider with it. Every box made through a
// wrapped provider is labelled (box-1, box-2 ... in creation order across
// restarts, or a label the host gives), given a kind (gpu:<model>, else its
// isolation) and priced by provider and kind. When the box ends — destroyed
// through the wrapper, found ended by Status, or found gone by Attach — a
// priced box gets one receipt: appended as a JSON line to receipts.jsonl
// in the state directory (fsync'd) and logged. A box without a price gets
// none: its cost is unknown, never 0.
//
// A box billed per second costs seconds × usd_per_second; one billed per
// call (Archil exec) costs calls × usd_per_call, where a call refused
// before it was made does not count. Costs are rounded to 9 decimals. A
// box's start is the time it reports (Facts.StartedAt), else when create
// answered; its end is capped at the end of its lifetime.
//
// Estimate and Final serve a box's receipt.json while it lives and after
// it ends (ReceiptJSON renders it); ReadAll and Totals serve `boxfs
// receipts`.
package ledger
