package hands

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
)

// grace is how long hands waits for a provider to report a command's end
// after the caller's ctx is done, before it stops waiting and answers
// Timeout or Aborted itself (the provider's kill goes on in the background).
const grace = 5 * time.Second

// activity records the last sign of life of one exec: bytes it wrote, bytes
// it took from stdin, or time spent blocked on the caller (a slow reader of a
// stream is not the box's fault).
type activity struct {
	last atomic.Int64 // unix ns
	busy atomic.Int32 // calls blocked on the caller right now
}

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// silentFor reports how long the exec has shown no sign of life.
func (a *activity) silentFor() time.Duration {
	if a.busy.Load() > 0 {
		return 0
	}
	return time.Since(time.Unix(0, a.last.Load()))
}

type actWriter struct {
	w io.Writer
	a *activity
}

func (w actWriter) Write(p []byte) (int, error) {
	w.a.touch()
	w.a.busy.Add(1)
	n, err := w.w.Write(p)
	w.a.busy.Add(-1)
	w.a.touch()
	return n, err
}

type actReader struct {
	r io.Reader
	a *activity
}

func (r actReader) Read(p []byte) (int, error) {
	r.a.touch()
	r.a.busy.Add(1)
	n, err := r.r.Read(p)
	r.a.busy.Add(-1)
	r.a.touch()
	return n, err
}

// ctxCode is the code for a ctx that is done: Timeout for a passed
// deadline, else Aborted.
func ctxCode(ctx context.Context) providers.Code {
	if ctx.Err() == context.DeadlineExceeded {
		return providers.Timeout
	}
	return providers.Aborted
}

// execFunc starts a command: a box's Exec, or the agent's.
type execFunc func(context.Context, providers.ExecRequest) (providers.Process, error)

// startLive calls exec, but returns within the liveness bound (or soon
// after ctx is done) even when the provider never answers. A process that
// arrives after hands gave up is killed, then abandoned (when set) is
// called.
func startLive(ctx context.Context, exec execFunc, req providers.ExecRequest, bound time.Duration, abandoned func()) (providers.Process, error) {
	type started struct {
		p   providers.Process
		err error
	}
	ch := make(chan started, 1)
	var gaveUp atomic.Bool
	go func() {
		var p providers.Process
		var err error
		if perr := guard.Run(func() { p, err = exec(ctx, req) }); perr != nil {
			p, err = nil, perr // the provider broke on the box's answer: this command only
		}
		if gaveUp.Load() && p != nil {
			kctx, cancel := context.WithTimeout(context.Background(), bound)
			p.Kill(kctx)
			cancel()
			if abandoned != nil {
				abandoned()
			}
		}
		ch <- started{p, err}
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case s := <-ch:
		return s.p, s.err
	case <-ctx.Done():
		select {
		case s := <-ch:
			return s.p, s.err
		case <-time.After(grace):
			gaveUp.Store(true)
			return nil, providers.E(ctxCode(ctx), "", ctx.Err())
		}
	case <-t.C:
		gaveUp.Store(true)
		return nil, providers.Errorf(providers.Liveness, "", "the provider did not start the command within %v", bound)
	}
}

// waitLive waits for p's end. It gives up with Liveness when act shows no
// sign of life for bound and probe (when set) does not vouch for the box
// within bound, and with Timeout or Aborted when ctx is done and the
// provider does not report the end within grace. cancel cancels the ctx
// the exec runs under; giving up calls it and kills p in the background.
func waitLive(ctx context.Context, cancel context.CancelFunc, p providers.Process, act *activity, bound time.Duration, probe func(context.Context) error) (int, error) {
	type ended struct {
		code int
		err  error
	}
	ch := make(chan ended, 1)
	go func() {
		var e ended
		if perr := guard.Run(func() { e.code, e.err = p.Wait() }); perr != nil {
			e = ended{-1, perr} // the provider broke on the box's answer: this command only
		}
		ch <- e
	}()
	giveUp := func() {
		cancel()
		go func() {
			kctx, kcancel := context.WithTimeout(context.Background(), bound)
			defer kcancel()
			guard.Run(func() { p.Kill(kctx) })
		}()
	}
	tick := bound / 8
	if tick < 10*time.Millisecond {
		tick = 10 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var probing chan error
	for {
		select {
		case e := <-ch:
			return e.code, e.err
		case <-ctx.Done():
			select {
			case e := <-ch:
				return e.code, e.err
			case <-time.After(grace):
				giveUp()
				return -1, providers.E(ctxCode(ctx), "", ctx.Err())
			}
		case err := <-probing:
			probing = nil
			if err != nil {
				giveUp()
				if providers.IsCode(err, providers.Gone) {
					return -1, err
				}
				return -1, providers.Errorf(providers.Liveness, "", "no sign of life for %v: %v", bound, err)
			}
			act.touch()
		case <-t.C:
			if probing != nil || act.silentFor() < bound {
				continue
			}
			if probe == nil {
				giveUp()
				return -1, providers.Errorf(providers.Liveness, "", "no output and no progress for %v", bound)
			}
			probing = make(chan error, 1)
			go func(ch chan error) { ch <- probeWithin(ctx, probe, bound) }(probing)
		}
	}
}

// probeWithin runs probe, but answers Liveness once bound passes.
func probeWithin(ctx context.Context, probe func(context.Context) error, bound time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ch := make(chan error, 1)
	go func() {
		var err error
		if perr := guard.Run(func() { err = probe(pctx) }); perr != nil {
			err = perr
		}
		ch <- err
	}()
	select {
	case err := <-ch:
		return err
	case <-pctx.Done():
		return providers.Errorf(providers.Liveness, "", "the provider did not answer a status probe within %v", bound)
	}
}

// limitedBuffer keeps the first max bytes written to it (a command's stderr,
// for error messages) and discards the rest.
type limitedBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
