package cache

import (
	"os"
	"sync"
)

// The cache's copy of a removed file is deleted in the background: an
// rm -rf of a tree the host wrote would otherwise pay a second unlink per
// file, beside the box's own, while the request waits. A deletion lost
// when the daemon stops first is made by the next Open, which removes
// every data file its journal does not name.
type reaper struct {
	mu     sync.Mutex
	closed bool
	queue  chan string
	done   chan struct{}
}

// reapQueue is how many deletions may wait; past it they are made at once.
const reapQueue = 4096

func newReaper() *reaper {
	r := &reaper{queue: make(chan string, reapQueue), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for p := range r.queue {
			os.Remove(p)
		}
	}()
	return r
}

// remove deletes the file at p, soon.
func (r *reaper) remove(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		select {
		case r.queue <- p:
			return
		default:
		}
	}
	os.Remove(p)
}

// stop makes the waiting deletions and ends the reaper.
func (r *reaper) stop() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	<-r.done
}
