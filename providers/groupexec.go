package providers

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"
)

// The start markers of a command wrapper: the first byte a provider's
// wrapper script writes on the command's stdout, once it recorded the
// command's process group and tried its directory. A provider may define
// more (4 and up) and say what they mean in GroupHooks.Marker.
const (
	MarkerStarted   = 0 // the command runs
	MarkerNoDir     = 1 // the directory does not exist
	MarkerNotDir    = 2 // it is not a directory
	MarkerDirDenied = 3 // it cannot be entered
)

// How long a GroupProcess waits on the box's side.
const (
	groupStartGrace = 10 * time.Second // for a just-started wrapper to record its group
	groupDrainGrace = 5 * time.Second  // for the stream to end once the group is dead
	groupBound      = 30 * time.Second // for the kill, the outcome and the box's state
)

// GroupHooks are the parts of running one command that differ between
// providers; GroupProcess does the rest.
type GroupHooks struct {
	// Op and Box name the errors; Dir is the command's directory.
	Op, Box, Dir string
	// KillGroup kills the command's process group in the box and returns
	// once the box confirms none of it runs (the provider's kill script).
	KillGroup func(ctx context.Context) error
	// CloseStream ends the command's stream at once. It is called when the
	// group is dead and the stream has not ended within a grace (a process
	// outside the group holds the output open), and once at the end.
	CloseStream func()
	// Outcome is the command's exit code once its stream ended, or the
	// error that says why there is none (a lost stream, a box gone).
	// killed: the group was killed by Kill or by ctx.
	Outcome func(ctx context.Context, killed bool) (int, error)
	// Ending reports whether the box has ended or is ending.
	Ending func(ctx context.Context) bool
	// NoStart is the error of a command whose stream ended before the
	// wrapper wrote its marker (exit code: code), in a box that has not
	// ended: the box lacks what the wrapper needs.
	NoStart func(code int) error
	// Marker, if set, is the error of a marker the provider defines (4 and
	// up); nil leaves it an unknown marker.
	Marker func(marker byte) error
}

// GroupProcess is the host's side of a command that a provider runs in a
// box as its own process group behind a wrapper script: the wrapper
// records the group and writes a start marker; a cancelled ctx or Kill
// kills the group with the provider's KillGroup, waits (bounded) for the
// stream to end, and the outcome says what happened. It implements
// Process. The provider feeds it the stream: Marker, Stdout and Stderr,
// then StreamEnded.
type GroupProcess struct {
	h              GroupHooks
	stdout, stderr *OutQueue

	marker     byte          // the wrapper's marker, once markerSeen is closed
	markerOnce sync.Once     // guards markerSeen
	markerSeen chan struct{} // closed at the first stdout byte
	streamDone chan struct{} // closed by StreamEnded

	killOnce  sync.Once
	killedCh  chan struct{} // closed when a kill (Kill or ctx) was done
	watchDone chan struct{} // closed when watch returns

	mu      sync.Mutex
	cause   error // ctx's error when ctx ended the command
	killErr error // the ctx kill's failure

	done chan struct{} // closed when code and err are final
	code int
	err  error
}

var _ Process = (*GroupProcess)(nil)

// NewGroupProcess makes the host's side of one command whose output goes
// to stdout and stderr (nil discards), each through an OutQueue.
func NewGroupProcess(h GroupHooks, stdout, stderr io.Writer) *GroupProcess {
	return &GroupProcess{
		h:          h,
		stdout:     NewOutQueue(stdout, 64),
		stderr:     NewOutQueue(stderr, 64),
		markerSeen: make(chan struct{}),
		streamDone: make(chan struct{}),
		killedCh:   make(chan struct{}),
		watchDone:  make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// Stdout is the queue the command's stdout goes to, after the marker.
func (g *GroupProcess) Stdout() *OutQueue { return g.stdout }

// Stderr is the queue the command's stderr goes to.
func (g *GroupProcess) Stderr() *OutQueue { return g.stderr }

// SetMarker records the wrapper's marker, the first byte of stdout. Only
// the first call counts.
func (g *GroupProcess) SetMarker(b byte) {
	g.markerOnce.Do(func() {
		g.marker = b
		close(g.markerSeen)
	})
}

// StreamEnded says the command's stream has ended: its output queues are
// closed. The provider calls it once.
func (g *GroupProcess) StreamEnded() {
	g.stdout.Close()
	g.stderr.Close()
	close(g.streamDone)
}

// Start watches ctx (when it ends first, the group is killed) and waits
// for the command to start. It returns nil once the wrapper says the
// command runs; otherwise the command has ended and the error says why:
// ctx's (Aborted, Timeout) once the group is confirmed dead, the
// directory's errno (ENOENT, ENOTDIR, EACCES), Gone when the box ended,
// or the outcome's.
func (g *GroupProcess) Start(ctx context.Context) error {
	go g.watch(ctx)
	go g.finish(context.WithoutCancel(ctx))
	select {
	case <-g.markerSeen:
	case <-g.done:
	case <-ctx.Done():
		<-g.done // watch kills what started and confirms it
		return g.err
	}
	select {
	case <-g.markerSeen:
		if g.marker == MarkerStarted {
			return nil
		}
		<-g.done
		return g.startError()
	default:
		// The stream ended before the wrapper started the command.
		if g.err != nil {
			return g.err
		}
		return g.startError()
	}
}

// watch kills the command's group when ctx ends before the command does.
func (g *GroupProcess) watch(ctx context.Context) {
	defer close(g.watchDone)
	select {
	case <-g.streamDone:
		return
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.cause = ctx.Err()
	g.mu.Unlock()
	// The group is recorded before the marker is written.
	select {
	case <-g.markerSeen:
	case <-g.streamDone:
		return
	case <-time.After(groupStartGrace):
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupBound)
	err := g.h.KillGroup(kctx)
	cancel()
	g.mu.Lock()
	g.killErr = err
	g.mu.Unlock()
	g.killOnce.Do(func() { close(g.killedCh) })
}

// finish waits for the stream to end (bounded once the group is killed: a
// process outside the group may still hold the output open), then for the
// outputs to be written, then settles the outcome.
func (g *GroupProcess) finish(ctx context.Context) {
	defer close(g.done)
	select {
	case <-g.streamDone:
	case <-g.killedCh:
		select {
		case <-g.streamDone:
		case <-time.After(groupDrainGrace):
			g.h.CloseStream()
			<-g.streamDone
		}
	}
	<-g.watchDone
	g.h.CloseStream()
	g.stdout.Wait()
	g.stderr.Wait()
	g.code, g.err = g.result(ctx)
}

func (g *GroupProcess) result(ctx context.Context) (int, error) {
	g.mu.Lock()
	cause, killErr := g.cause, g.killErr
	g.mu.Unlock()
	if cause != nil {
		e := E(CodeOf(cause), g.h.Op, cause).WithBox(g.h.Box)
		if killErr != nil {
			e.Err = fmt.Errorf("%w; and the kill: %v", cause, killErr)
		}
		return -1, e
	}
	killed := false
	select {
	case <-g.killedCh:
		killed = true
	default:
	}
	ictx, cancel := context.WithTimeout(ctx, groupBound)
	defer cancel()
	code, err := g.h.Outcome(ictx, killed)
	if err != nil {
		return -1, err
	}
	if code >= 128 && !killed && g.h.Ending(ictx) {
		// A signal: the box ended under the command.
		return -1, Errorf(Gone, g.h.Op, "box ended while the command ran (exit %d)", code).WithBox(g.h.Box)
	}
	for _, q := range []*OutQueue{g.stdout, g.stderr} {
		if err := q.Wait(); err != nil {
			return code, E(0, g.h.Op, err).WithBox(g.h.Box)
		}
	}
	return code, nil
}

// startError is Start's error when the wrapper did not start the command.
func (g *GroupProcess) startError() error {
	select {
	case <-g.markerSeen:
		switch g.marker {
		case MarkerNoDir:
			return PathError(g.h.Op, g.h.Box, g.h.Dir, syscall.ENOENT)
		case MarkerNotDir:
			return PathError(g.h.Op, g.h.Box, g.h.Dir, syscall.ENOTDIR)
		case MarkerDirDenied:
			return PathError(g.h.Op, g.h.Box, g.h.Dir, syscall.EACCES)
		}
		if g.h.Marker != nil {
			if err := g.h.Marker(g.marker); err != nil {
				return err
			}
		}
		return Errorf(Unknown, g.h.Op, "wrapper marker %d", g.marker).WithBox(g.h.Box)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupBound)
	defer cancel()
	if g.h.Ending(ctx) {
		return Errorf(Gone, g.h.Op, "box has ended").WithBox(g.h.Box)
	}
	return g.h.NoStart(g.code)
}

// Wait waits for the command to end and its output to be written.
func (g *GroupProcess) Wait() (int, error) {
	<-g.done
	return g.code, g.err
}

// Kill kills the command's process group and confirms it gone.
func (g *GroupProcess) Kill(ctx context.Context) error {
	select {
	case <-g.streamDone:
		return nil
	default:
	}
	err := g.h.KillGroup(ctx)
	g.killOnce.Do(func() { close(g.killedCh) })
	return err
}
