package providers

import "context"

// Watcher is an optional part of a Box: it reports the changes made under
// a directory of the box, whoever made them, without boxfs's agent (the
// provider's own file-event API). Its shape is the agent channel's watch.
type Watcher interface {
	// Watch calls changed with each batch of changed paths, relative to
	// root ("" for root itself; all is true when changes were lost and
	// anything under root may have changed), on one goroutine, in order,
	// and ready once root is watched. It returns nil when ctx ends, and an
	// error when the watch stops; what changes from then on is not
	// reported.
	Watch(ctx context.Context, root string, ready func(), changed func(paths []string, all bool)) error
}
