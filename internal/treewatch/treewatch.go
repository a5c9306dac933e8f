// Package treewatch watches a directory tree for changes with inotify.
package treewatch

import (
	"errors"
	"time"
)

// DefaultLimit is the most directories one Watch watches unless told
// otherwise: each costs kernel memory, and the kernel's own per-user limit
// may be lower.
const DefaultLimit = 100000

// Latency is the longest a change waits in Watch before it is reported:
// a burst of changes is gathered into one batch.
const Latency = 60 * time.Millisecond

// ErrNotLinux is what Watch returns where inotify does not exist.
var ErrNotLinux = errors.New("watching a tree needs inotify, which only Linux has")

// Options configure a Watch.
type Options struct {
	// Limit bounds the directories watched (default DefaultLimit); past it
	// the rest of the tree goes unwatched and an overflow is reported.
	Limit int
	// Ready is called once the tree is watched: changes from then on are
	// reported.
	Ready func()
	// Changed is called with each batch of changed paths, relative to the
	// root ("" is the root itself), on one goroutine, in order; all is true
	// when changes were lost (the kernel's queue overflowed, or the tree
	// outgrew the watches) and anything under the root may have changed.
	Changed func(paths []string, all bool)
	// Skip, when set, leaves out the names it is true of (a writer's own
	// temporary files).
	Skip func(name string) bool
}
