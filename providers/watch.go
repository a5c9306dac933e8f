package providers

import "context"

// Watcher is an optional part of a Box: it reports the changes made under
// a directory of the box, whoever made them, without boxfs's agent (the
// provider's own file-event API). Its shape is the agent channel's watch.
type Watcher interface {
	// Watch calls changed with each batch of changes under root, on one
	// goroutine, in order (all is true when changes were lost and
	// anything under root may have changed), and ready once root is
	// watched. It returns nil when ctx ends, and an error when the watch
	// stops; what changes from then on is not reported.
	Watch(ctx context.Context, root string, ready func(), changed func(changes []Change, all bool)) error
}

// Change is one path a watch reports changed.
type Change struct {
	// Path is relative to the watched root ("" is the root itself).
	Path string
	// Info is the path's attributes as the watch read them after the
	// change (nil when the watch does not say them). The host compares
	// them with what its own change of the path left: equal, the report
	// is the echo of that change and is dropped without a round trip.
	Info *FileInfo
	// Gone: the watch found the path missing after the change.
	Gone bool
}

// Paths returns changes' paths.
func Paths(changes []Change) []string {
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = c.Path
	}
	return out
}

// PathChanges returns a Change without attributes for each path.
func PathChanges(paths []string) []Change {
	out := make([]Change, len(paths))
	for i, p := range paths {
		out[i] = Change{Path: p}
	}
	return out
}
