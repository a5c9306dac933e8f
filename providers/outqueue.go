package providers

import "io"

// OutQueue hands one output stream of a command to its writer from a
// goroutine of its own, so that a slow stdout writer does not stall stderr
// until the queue is full (ExecRequest: "each from its own goroutine").
// After a write error the rest is dropped and the error is kept.
type OutQueue struct {
	ch   chan []byte
	done chan struct{}
	err  error // read after done
}

// NewOutQueue starts a queue of depth chunks in front of w; a nil w
// discards.
func NewOutQueue(w io.Writer, depth int) *OutQueue {
	q := &OutQueue{ch: make(chan []byte, depth), done: make(chan struct{})}
	go func() {
		defer close(q.done)
		for b := range q.ch {
			if w == nil || q.err != nil {
				continue
			}
			if _, err := w.Write(b); err != nil {
				q.err = err
			}
		}
	}()
	return q
}

// Put queues b, blocking while the queue is full. The queue keeps b: the
// caller must not reuse it.
func (q *OutQueue) Put(b []byte) { q.ch <- b }

// Close ends the stream; the writer goroutine drains what is queued.
func (q *OutQueue) Close() { close(q.ch) }

// Wait waits until everything queued before Close was written or dropped,
// and returns the writer's first error.
func (q *OutQueue) Wait() error {
	<-q.done
	return q.err
}
