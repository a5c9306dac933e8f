package boxes

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// A Meter prices boxes (the ledger is one). The manager tells it when a box
// is made, of every exec sent to a box (hands's scripts, commands and agent
// included), and when a box ends; it never wraps the box, so what hands
// finds in a box is the same metered or not. Calls come from any goroutine
// and must not block.
type Meter interface {
	// Created says provider made the box id from spec; facts are what the
	// box reported just after (zero when it did not, or when the create
	// failed but left the box behind). calls is the box's own count of its
	// billed calls, where it keeps one (providers.CallCounter), else nil:
	// the calls its file operations make reach no Exec to be told of.
	Created(provider, id string, spec providers.Spec, facts providers.Facts, calls providers.CallCounter)
	// Exec says an Exec call to the box id returned err.
	Exec(provider, id string, err error)
	// Ended says the box id ended at at (zero: now): destroyed, or found
	// ended or gone.
	Ended(provider, id string, at time.Time)
	// ReceiptJSON renders the box's receipt.json.
	ReceiptJSON(ctx context.Context, provider, id string) ([]byte, error)
}

// A View presents boxes (the FUSE layer does) and keeps what it has shown
// of their workspaces. The manager tells it what changed in a workspace
// that the host did not change through it, so that it can drop what it
// keeps of those paths. No lock of the manager's is held during a call.
type View interface {
	// Changed says a refresh of b's listing found ch.
	Changed(b *Box, ch cache.Changes)
	// PathsChanged says a watch of b's workspace saw rels change (relative
	// to the workspace; "" is the workspace itself).
	PathsChanged(b *Box, rels []string)
	// AllChanged says anything in b's workspace may have changed.
	AllChanged(b *Box)
}
