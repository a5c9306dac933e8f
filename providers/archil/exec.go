package archil

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// longerWork is what a Timeout at the platform's bound tells the user to
// do instead.
const longerWork = "Archil runs no command for longer; split the work into steps that each end within it " +
	"(only files persist between commands), or run it where processes live on, " +
	"e.g. as a launch (boxfs launch) in a box of a provider whose facts say liveProcesses"

// Bounds of a command's call.
const (
	// killBound is how long a killed command's answer is waited for.
	killBound = 30 * time.Second
	// answerSlack is how long past a command's own deadline its answer may
	// take (queue, boot, writing its output).
	answerSlack = 2 * time.Minute
)

// Exec starts a command. Commands of one box run one at a time, in the
// order Exec was called in this process, and one at a time across
// processes (the box's checkout, waited for up to queue_wait). The
// command's output arrives when it ends. A cancelled ctx or Kill asks the
// command's wrapper to kill its process group, and Wait returns once its
// call answers, that is once the group is gone.
//
// Archil runs a command as one call to the vendor's exec endpoint, so
// providers.GroupProcess, which feeds a live stream and kills the group
// by running a script of its own in the box, does not fit: no output or
// start marker arrives before the call answers, and the host reaches a
// running command only through its objects on the disk (answer.go); the
// wrapper (script.go) kills the group and confirms it gone itself.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "archil.Exec"
	if err := req.Validate(); err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	if req.Stdin != nil {
		return nil, providers.Errorf(providers.Unsupported, op, "an archil command has no stdin; move bytes through files").WithBox(b.id)
	}
	if !b.p.execEnabled() {
		return nil, providers.Errorf(providers.Unsupported, op, "region %s does not run commands", b.p.region).WithBox(b.id)
	}
	if err := b.checkLifetime(ctx, op); err != nil {
		return nil, err
	}
	start, release := b.st.take()
	pr := &process{b: b, ctx: ctx, req: req, kill: make(chan struct{}), done: make(chan struct{})}
	go pr.run(start, release)
	return pr, nil
}

// process is one command.
type process struct {
	b        *Box
	ctx      context.Context
	req      providers.ExecRequest
	kill     chan struct{}
	killOnce sync.Once
	byKill   atomic.Bool
	done     chan struct{}
	code     int
	err      error
}

func (pr *process) run(start <-chan struct{}, release func()) {
	defer close(pr.done)
	const op = "archil.Exec"
	select {
	case <-start:
	case <-pr.ctx.Done():
		go func() { <-start; release() }()
		pr.err = wrap(op, pr.b.id, pr.ctx.Err())
		return
	case <-pr.kill:
		go func() { <-start; release() }()
		pr.err = providers.Errorf(providers.Aborted, op, "killed before it started").WithBox(pr.b.id)
		return
	}
	defer release()
	pr.code, pr.err = pr.b.command(pr.ctx, pr.kill, pr.req)
	if pr.err == nil && pr.code == killedCode && !pr.byKill.Load() && pr.ctx.Err() != nil {
		pr.err = wrap(op, pr.b.id, pr.ctx.Err())
	}
}

// Wait waits for the command's end and its output.
func (pr *process) Wait() (int, error) {
	<-pr.done
	return pr.code, pr.err
}

// Kill asks the command's wrapper to kill its group and waits for its
// call to answer. A command that has ended is not an error.
func (pr *process) Kill(ctx context.Context) error {
	pr.byKill.Store(true)
	pr.killOnce.Do(func() { close(pr.kill) })
	select {
	case <-pr.done:
		return nil
	case <-ctx.Done():
		return wrap("archil.Kill", pr.b.id, ctx.Err())
	}
}

// killedCode is a command's exit when its wrapper killed it.
const killedCode = 128 + 9

// deadline is a command's own, in whole seconds: inside the platform's
// limit, and not before the box's lifetime ends (the second it ends in is
// counted whole: rounded down, a command began 2.3 s before the end
// would have ended 0.3 s early). why says which of the two it is.
func (b *Box) deadline() (int, string) {
	secs, why := int((b.p.maxExec-execMargin)/time.Second), "deadline"
	if left := int((b.rec.Ends.Sub(b.p.now()) + time.Second - 1) / time.Second); left < secs {
		secs, why = max(left, 1), "ended"
	}
	return secs, why
}

// command runs one command in this process's turn and returns its exit;
// owns are the disk-relative paths outside the box's directory it changes
// (the wrapper checks them out).
func (b *Box) command(ctx context.Context, kill <-chan struct{}, req providers.ExecRequest, owns ...string) (int, error) {
	const op = "archil.Exec"
	cid := providers.NewID(8)
	secs, why := b.deadline()
	text := b.commandText(cid, req, secs, why, owns)
	busyUntil := time.Now().Add(b.p.queueWait)
	tries := 0
	for {
		a, err := b.call(ctx, kill, cid, text, time.Duration(secs)*time.Second)
		if err != nil {
			return -1, err
		}
		switch a.state {
		case "gone":
			b.st.ended.Store(true)
			return -1, providers.Errorf(providers.Gone, op, "the box's record is gone: it was destroyed").WithBox(b.id)
		case "fail":
			return -1, providers.Errorf(providers.Unknown, op, "the command's wrapper could not set up its files on the disk").WithBox(b.id)
		case "busy":
			tries++
			if time.Now().After(busyUntil) {
				return -1, providers.Errorf(providers.Unavailable, op, "another process's command has held the box for over %v", b.p.queueWait).WithBox(b.id)
			}
			if err := b.pause(ctx, kill, min(backoff(tries), time.Second)); err != nil {
				return -1, wrap(op, b.id, err)
			}
			continue
		}
		return b.finish(ctx, cid, req, a)
	}
}

// pause waits d, or until ctx ends or a kill comes.
func (b *Box) pause(ctx context.Context, kill <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-kill:
		return context.Canceled
	case <-t.C:
		return nil
	}
}

// call makes the command's exec call and reads the wrapper's answer. When
// ctx ends or a kill comes while it runs, it asks the wrapper to kill the
// command and waits (bounded) for the answer. A call whose answer is lost
// is settled from the command's status object, waiting for it while the
// command may still run; one that never started is sent again (its id
// keeps a second start from running it twice).
func (b *Box) call(ctx context.Context, kill <-chan struct{}, cid, text string, secs time.Duration) (answer, error) {
	const op = "archil.Exec"
	for attempt := 1; ; attempt++ {
		res, err := b.postWatched(ctx, kill, cid, text, secs)
		if err == nil {
			a, ok := parseAnswer(res.Stdout)
			if !ok {
				return a, providers.Errorf(providers.Unknown, op, "the command's call answered without a status (exit %d): %s", res.ExitCode, clip(res.Stderr)).WithBox(b.id)
			}
			if a.state == "dup" {
				return b.awaitStatus(ctx, kill, cid, secs)
			}
			return a, nil
		}
		if !providers.IsCode(err, providers.Unavailable) && !providers.IsCode(err, providers.TransportLost) && !providers.IsCode(err, providers.Timeout) {
			return answer{}, err
		}
		if ctx.Err() != nil {
			return answer{}, wrap(op, b.id, ctx.Err())
		}
		// No answer, a 5xx or the platform's timeout: the command may
		// have run, or may run still.
		if a, found, serr := b.status(ctx, cid); serr == nil && found {
			return a, nil
		}
		if statusOf(err) == http.StatusGatewayTimeout {
			return answer{}, providers.Errorf(providers.Timeout, op, "the platform cut the command off at its bound (max_exec %v): %s", b.p.maxExec, longerWork).WithBox(b.id)
		}
		if started, serr := b.started(ctx, cid); serr == nil && started {
			return b.awaitStatus(ctx, kill, cid, secs)
		}
		if attempt >= maxTries {
			return answer{}, err
		}
		if err := b.pause(ctx, kill, backoff(attempt)); err != nil {
			return answer{}, wrap(op, b.id, err)
		}
	}
}

// postWatched sends the call; when ctx ends or a kill comes first, it
// writes the command's .kill object and waits up to killBound more.
func (b *Box) postWatched(ctx context.Context, kill <-chan struct{}, cid, text string, secs time.Duration) (execResult, error) {
	const op = "archil.Exec"
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), secs+answerSlack)
	defer cancel()
	type result struct {
		res execResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b.p.post(hctx, b.disk, b.st, text)
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
	case <-kill:
	}
	if err := b.askKill(ctx, cid); err != nil {
		b.p.log.Warn("archil: could not ask a command to stop", "box", b.id, "err", err)
	}
	t := time.NewTimer(killBound)
	defer t.Stop()
	select {
	case r := <-done:
		return r.res, r.err
	case <-t.C:
		return execResult{}, providers.Errorf(providers.Liveness, op, "a killed command's call did not answer within %v", killBound).WithBox(b.id)
	}
}

// awaitStatus polls a command's status object until the command's own
// deadline has surely passed, asking it to stop when ctx ends or a kill
// comes. A box whose record is gone meanwhile was destroyed: its
// directories, the status object's with them, are gone too.
func (b *Box) awaitStatus(ctx context.Context, kill <-chan struct{}, cid string, secs time.Duration) (answer, error) {
	const op = "archil.Exec"
	until := time.Now().Add(secs + answerSlack)
	asked := false
	for d := 200 * time.Millisecond; time.Now().Before(until); d = min(d*2, 2*time.Second) {
		a, found, err := b.status(ctx, cid)
		if err == nil && found {
			return a, nil
		}
		if err == nil && b.recordGone(ctx) {
			return answer{state: "gone"}, nil
		}
		if err := b.pause(ctx, kill, d); err != nil && !asked {
			asked = true
			if kerr := b.askKill(ctx, cid); kerr != nil {
				return answer{}, wrap(op, b.id, kerr)
			}
			until = time.Now().Add(killBound)
			ctx = context.WithoutCancel(ctx)
			kill = nil
		}
	}
	return answer{}, providers.Errorf(providers.OutcomeUnknown, op, "command %s started but its status never came", cid).WithBox(b.id)
}

// finish hands a command's output to its writers and turns its status
// into Wait's answer.
func (b *Box) finish(ctx context.Context, cid string, req providers.ExecRequest, a answer) (int, error) {
	const op = "archil.Exec"
	if err := b.output(ctx, cid, req, a); err != nil {
		return -1, err
	}
	switch a.why {
	case "":
		return a.rc, nil
	case "killed":
		return killedCode, nil
	case "gone":
		b.st.ended.Store(true)
		return -1, providers.Errorf(providers.Gone, op, "the box was destroyed while the command ran").WithBox(b.id)
	case "ended":
		b.endLazily(ctx, false)
		return -1, providers.Errorf(providers.Gone, op, "the box's lifetime ended while the command ran").WithBox(b.id)
	case "deadline":
		return -1, providers.Errorf(providers.Timeout, op, "the command ran into its deadline, %v inside the platform's bound of %v on one command: %s", execMargin, b.p.maxExec, longerWork).WithBox(b.id)
	}
	return -1, providers.Errorf(providers.Unknown, op, "the command ended for a reason not known: %q", a.why).WithBox(b.id)
}
