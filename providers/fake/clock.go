package fake

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Clock is the fake's time: box lifetimes, scripted delays and file times
// all read it. A manual clock (NewClock) stands still until Advance moves it;
// a running clock (RealClock) follows the wall clock and Advance jumps it
// ahead. Timers fire when the clock reaches their time, from Advance (in the
// caller's goroutine, before Advance returns) or, on a running clock, from
// the wall clock.
//
// A ctx deadline is the caller's and stays in real time: a scripted Hang or
// Delay ends at the deadline whatever the fake clock says.
type Clock struct {
	mu      sync.Mutex
	running bool          // follows the wall clock
	now     time.Time     // manual: the time
	offset  time.Duration // running: how far Advance moved it past the wall clock
	timers  []*Timer      // pending, by deadline
	wake    *time.Timer   // running: fires at the earliest pending deadline
	changed chan struct{} // closed and replaced when the set of timers changes
}

// NewClock returns a manual clock set to start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// RealClock returns a clock that follows the wall clock; Advance still jumps
// it ahead. New uses one unless WithClock gives another.
func RealClock() *Clock {
	return &Clock{running: true, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *Clock) nowLocked() time.Time {
	if c.running {
		return time.Now().Add(c.offset)
	}
	return c.now
}

// Since returns the time passed since t on the clock.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Timer is a one-shot timer on a Clock.
type Timer struct {
	// C receives the clock's time once the timer fires (timers made by
	// AfterFunc have no C).
	C <-chan time.Time

	c    chan time.Time
	f    func()
	when time.Time
	clk  *Clock
}

// NewTimer returns a timer that fires when the clock has moved d past now.
// A d of zero or less fires at once.
func (c *Clock) NewTimer(d time.Duration) *Timer {
	ch := make(chan time.Time, 1)
	t := &Timer{C: ch, c: ch}
	c.add(t, d)
	return t
}

// After is NewTimer(d).C.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C }

// AfterFunc calls f in its own goroutine once the clock has moved d past now.
func (c *Clock) AfterFunc(d time.Duration, f func()) *Timer {
	t := &Timer{f: f}
	c.add(t, d)
	return t
}

// Stop prevents the timer from firing. It reports whether it stopped it
// (false: it had fired or was stopped already).
func (t *Timer) Stop() bool {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	c.changedLocked()
	return true
}

func (c *Clock) add(t *Timer, d time.Duration) {
	t.clk = c
	c.mu.Lock()
	now := c.nowLocked()
	t.when = now.Add(d)
	if d <= 0 {
		c.mu.Unlock()
		t.fire(now)
		return
	}
	i, _ := slices.BinarySearchFunc(c.timers, t, func(a, b *Timer) int {
		if a.when.After(b.when) {
			return 1
		}
		return -1 // equal deadlines keep the order they were made in
	})
	c.timers = slices.Insert(c.timers, i, t)
	c.changedLocked()
	c.mu.Unlock()
}

func (t *Timer) fire(now time.Time) {
	if t.f != nil {
		go t.f()
		return
	}
	t.c <- now // buffered, fires once
}

// changedLocked wakes BlockUntil waiters and, on a running clock, re-arms
// the wall-clock wake-up for the earliest deadline.
func (c *Clock) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
	if !c.running {
		return
	}
	if c.wake != nil {
		c.wake.Stop()
		c.wake = nil
	}
	if len(c.timers) > 0 {
		d := c.timers[0].when.Sub(c.nowLocked())
		c.wake = time.AfterFunc(max(d, 0), c.fireDue)
	}
}

// fireDue fires every timer whose deadline the clock has reached.
func (c *Clock) fireDue() {
	c.mu.Lock()
	now := c.nowLocked()
	var due []*Timer
	for len(c.timers) > 0 && !c.timers[0].when.After(now) {
		due = append(due, c.timers[0])
		c.timers = c.timers[1:]
	}
	if len(due) > 0 || c.running {
		c.changedLocked()
	}
	c.mu.Unlock()
	for _, t := range due {
		t.fire(now)
	}
}

// Advance moves the clock d ahead and fires, before it returns, every timer
// whose time has come (AfterFunc functions are started, not waited for).
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("fake: Clock.Advance with a negative duration")
	}
	c.mu.Lock()
	if c.running {
		c.offset += d
	} else {
		c.now = c.now.Add(d)
	}
	c.mu.Unlock()
	c.fireDue()
}

// Pending returns how many timers wait to fire.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are pending, e.g. until a call
// scripted with Delay is waiting, so that a test can Advance past it. It
// returns ctx's error if ctx ends first.
func (c *Clock) BlockUntil(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		pending, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if pending >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Sleep waits until the clock has moved d ahead, or ctx ends; then it
// returns Aborted or Timeout as ctx says, with op as the error's Op.
func (c *Clock) Sleep(ctx context.Context, op string, d time.Duration) error {
	t := c.NewTimer(d)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctxError(ctx, op)
	}
}

// ctxError is the typed error for a call that ctx ended: Timeout when its
// deadline passed, else Aborted.
func ctxError(ctx context.Context, op string) *providers.Error {
	code := providers.Aborted
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = providers.Timeout
	}
	return providers.E(code, op, ctx.Err())
}

// WithTimeout returns a copy of parent that ends when the clock has moved d
// ahead (its Err is then context.DeadlineExceeded, so calls under it
// return Timeout), when parent ends, or when cancel is called. It lets a
// test drive a timeout with Advance instead of waiting. The deadline is on
// the fake clock, so Deadline reports parent's, not it.
func (c *Clock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx := &clockCtx{Context: parent, done: make(chan struct{})}
	t := c.NewTimer(d)
	stop := make(chan struct{})
	var once sync.Once
	cancel := func() { once.Do(func() { close(stop) }) }
	go func() {
		var err error
		select {
		case <-parent.Done():
			err = parent.Err()
		case <-t.C:
			err = context.DeadlineExceeded
		case <-stop:
			err = context.Canceled
		}
		t.Stop()
		ctx.mu.Lock()
		ctx.err = err
		ctx.mu.Unlock()
		close(ctx.done)
	}()
	return ctx, cancel
}

// clockCtx is a context ended by a Clock timer.
type clockCtx struct {
	context.Context // parent: values and deadline
	done            chan struct{}
	mu              sync.Mutex
	err             error
}

func (c *clockCtx) Done() <-chan struct{} { return c.done }

func (c *clockCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
