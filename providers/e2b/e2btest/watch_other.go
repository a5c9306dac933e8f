//go:build !linux

package e2btest

import (
	"errors"

	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem"
)

// watchEvent is one change a watcher saw, with envd's operations for it.
type watchEvent struct {
	path  string
	types []filesystem.EventType
}

// watcher is not built outside Linux: the fake's watch needs inotify.
type watcher struct {
	events chan watchEvent
	errs   chan error
	done   chan struct{}
}

func newWatcher(string, bool) (*watcher, error) {
	return nil, errors.New("the fake watches directories with inotify, which only Linux has")
}

func (w *watcher) close() {}
