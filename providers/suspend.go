package providers

import "context"

// What a suspended box keeps, as Facts.Suspend says it.
const (
	// SuspendMemory: the box is frozen whole, its processes and memory
	// included, and thaws where it was.
	SuspendMemory = "memory"
	// SuspendFilesystem: the box's processes end and its memory is freed;
	// its whole filesystem is kept, and the same box starts again.
	SuspendFilesystem = "filesystem"
	// SuspendSnapshot: the box's filesystem is saved as an image and the
	// box ends; resuming makes a new box (a new ID) from that image.
	SuspendSnapshot = "snapshot"
)

// Suspender is an optional part of a Provider: its boxes can be suspended
// (they stop costing what a running box costs) and resumed later, also by
// another process. What a suspended box keeps is its Facts.Suspend.
type Suspender interface {
	// Suspend suspends b, a box of this provider, and returns the id Resume
	// takes. Every command running in b ends (its Wait returns, with an
	// error or an exit, and never hangs), the box's own processes too
	// unless it keeps its memory. A Suspend that fails leaves b running,
	// or says in its error that it may not be. Suspending a destroyed box
	// is Gone.
	Suspend(ctx context.Context, b Box) (string, error)
	// Resume brings back, running, the box Suspend returned id for, and
	// returns it: its ID is the suspended box's, or a new one (a box made
	// from a snapshot). An id never suspended is NotFound; a box whose
	// lifetime passed while it was suspended is Gone. The box's lifetime
	// still counts from when it was made.
	Resume(ctx context.Context, id string) (Box, error)
}

// Snapshotter is an optional part of a Provider: it saves a running box's
// filesystem as an image, which a new box starts from when its
// Spec.Snapshot names it.
type Snapshotter interface {
	// Snapshot saves b's filesystem as it is now and returns the
	// snapshot's id (Spec.Snapshot). name is a word the id may be made
	// from; a name the provider cannot use is Invalid. b keeps running, and
	// the snapshot outlives it.
	Snapshot(ctx context.Context, b Box, name string) (string, error)
}
