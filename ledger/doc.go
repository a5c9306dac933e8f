// Package ledger records what each box costs: a hook the box manager calls
// when a box is made, runs an exec and ends, which writes one receipt per
// box when it ends.
//
// # Receipts
//
// Open a Ledger on a state directory with the prices from the
// configuration and give it to the box manager as its meter (boxes.Meter).
// Every box made is labelled (box-1, box-2 ... in creation order across
// restarts, or a label the host gives), given a kind (gpu:<model>, else its
// isolation) and priced by provider and kind. When the box ends (destroyed,
// found ended or found gone, as the manager says) a priced box gets one
// receipt: appended as a JSON line to receipts.jsonl in the state
// directory (fsync'd) and logged. A box without a price gets none: its
// cost is unknown, never 0.
//
// A box billed per second costs seconds × usd_per_second; one billed per
// call (Archil exec) costs calls × usd_per_call. Its calls are the box's
// own count where it keeps one (providers.CallCounter: an Archil box's
// file operations, create and removal make billed calls no Exec shows),
// else every Exec sent to the box except one refused before it was made.
// Costs are rounded to 9 decimals. A box's start is the time it reports
// (Facts.StartedAt), else when create answered; its end is capped at the
// end of its lifetime.
//
// Estimate and Final serve a box's receipt.json while it lives and after
// it ends (ReceiptJSON renders it); ReadAll and Totals serve `boxfs
// receipts`.
package ledger
