package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
)

// Record names the record a command keeps in the box while its leader runs
// (Dir/ID: "pgid pid starttime owner"), the one hands' EndLeftCommands
// reads.
type Record struct {
	Dir, ID, Owner string
}

// Exec runs a command through the agent's command stream: a second
// long-lived exec ("boxfs agent -commands") that starts each command as its
// own process group, so a command costs one round trip, not a provider
// exec. When the stream cannot open, Exec returns Unavailable at once and
// the caller runs the command another way. The stream opens on the first call (after the file channel, whose
// upload it reuses) and again after it died. req.Dir must be absolute.
//
// The Process follows providers.Process: Wait gives the exit code (128+n
// for a signal), Aborted or Timeout once ctx ended it (its group confirmed
// gone), TransportLost when the stream broke under it (the agent then ends
// the groups it started, as it does when the host goes away).
func (ch *Channel) Exec(ctx context.Context, req providers.ExecRequest, rec *Record) (providers.Process, error) {
	return ch.execCmd(ctx, req, rec, false)
}

// execCmd is Exec; an own command is the channel's (its watch): Close does
// not wait for the agent to end it.
func (ch *Channel) execCmd(ctx context.Context, req providers.ExecRequest, rec *Record, own bool) (providers.Process, error) {
	const op = "agent.Exec"
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, providers.Errorf(providers.Invalid, op, "empty argv").WithBox(ch.box.ID())
	}
	for _, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, providers.Errorf(providers.Invalid, op, "argument %q holds a NUL byte", a).WithBox(ch.box.ID())
		}
	}
	if err := (providers.Spec{Env: req.Env}).Validate(); err != nil {
		return nil, providers.E(providers.Invalid, op, err).WithBox(ch.box.ID())
	}
	if !strings.HasPrefix(req.Dir, "/") {
		return nil, providers.Errorf(providers.Invalid, op, "dir %q is not absolute", req.Dir).WithBox(ch.box.ID())
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxError(op, err).WithBox(ch.box.ID())
	}
	conn, err := ch.cmdConn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(op, ctx.Err()).WithBox(ch.box.ID())
		}
		if providers.IsCode(err, providers.Invalid) {
			return nil, providers.E(0, op, err).WithBox(ch.box.ID())
		}
		return nil, &providers.Error{Code: providers.Unavailable, Op: op, Box: ch.box.ID(), Err: err}
	}
	p, err := conn.run(ctx, req, rec, own)
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(ch.box.ID())
	}
	return p, nil
}

// cmdRetryAfter is how long a command stream that failed to open is not
// tried again (commands go through the provider meanwhile).
const cmdRetryAfter = 30 * time.Second

// cmdConn returns the running command stream, starting one when there is
// none.
func (ch *Channel) cmdConn(ctx context.Context) (*cmdConn, error) {
	ch.cmdMu.Lock()
	defer ch.cmdMu.Unlock()
	if c := ch.cmd; c != nil {
		select {
		case <-c.done:
			ch.cmd = nil
		default:
			return c, nil
		}
	}
	if time.Now().Before(ch.cmdRetry) {
		return nil, ch.cmdFail
	}
	// The file channel brings the binary into the box (and says where).
	if _, err := ch.client(ctx, "agent.Exec"); err != nil {
		return nil, err
	}
	ch.mu.Lock()
	dest, bin, closed := ch.dest, ch.bin, ch.closed
	ch.mu.Unlock()
	if closed {
		return nil, &providers.Error{Code: errClosed.Code, Op: "agent.Exec", Err: errClosed.Err}
	}
	if dest == "" || bin == nil {
		return nil, providers.Errorf(providers.Unavailable, "agent.Exec", "the agent binary is not in the box")
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	c, err := ch.startCmdConn(octx, dest, bin.sha256)
	if err != nil {
		ch.log.Warn("agent: command stream did not open", "err", err)
		if ctx.Err() == nil {
			ch.cmdRetry, ch.cmdFail = time.Now().Add(cmdRetryAfter), err
		}
		return nil, err
	}
	ch.mu.Lock()
	closed = ch.closed
	ch.mu.Unlock()
	if closed {
		c.close()
		return nil, &providers.Error{Code: errClosed.Code, Op: "agent.Exec", Err: errClosed.Err}
	}
	ch.cmd = c
	return c, nil
}

// cmdConn is one running command stream.
type cmdConn struct {
	box      string
	liveness time.Duration
	fw       *frameWriter
	proc     providers.Process
	cancel   context.CancelFunc // ends the stream's exec
	stdin    io.Closer          // the stream's stdin: closing it ends the agent
	stderr   *tailBuffer
	done     chan struct{} // closed when the stream is gone

	mu    sync.Mutex
	next  uint32
	procs map[uint32]*agentProc
	kills map[uint32][]chan error // Kill calls waiting for their answer
	err   *providers.Error        // why the stream ended

	lastRecv atomic.Int64 // unix ns of the last frame from the agent
}

func (ch *Channel) startCmdConn(ctx context.Context, dest, sum string) (*cmdConn, error) {
	const op = "agent.Exec"
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	pctx, pcancel := context.WithCancel(context.Background())
	c := &cmdConn{
		box: ch.box.ID(), liveness: ch.liveness, fw: &frameWriter{w: inW},
		cancel: pcancel, stdin: inW, stderr: &tailBuffer{max: 2048},
		done: make(chan struct{}), procs: map[uint32]*agentProc{},
		kills: map[uint32][]chan error{},
	}
	proc, err := ch.exec(pctx, providers.ExecRequest{
		Argv:   []string{dest, "agent", "-sha256", sum, "-commands"},
		Dir:    "/",
		Stdin:  inR,
		Stdout: outW,
		Stderr: c.stderr,
	})
	if err != nil {
		pcancel()
		return nil, providers.E(0, op, err)
	}
	c.proc = proc
	exited := make(chan struct{})
	var exitCode int
	var exitErr error
	go func() {
		exitCode, exitErr = proc.Wait()
		close(exited)
		outW.CloseWithError(io.EOF)
		inR.Close()
	}()
	hello := make(chan error, 1)
	go func() {
		typ, _, payload, err := readFrame(outR)
		if err == nil && typ != frameHello {
			err = fmt.Errorf("the agent's first command frame is %q, not a hello", typ)
		}
		var h cmdHello
		if err == nil {
			err = json.Unmarshal(payload, &h)
		}
		if err == nil && h.Protocol != cmdProtocol {
			err = fmt.Errorf("the agent speaks command protocol %d, not %d", h.Protocol, cmdProtocol)
		}
		hello <- err
	}()
	fail := func(err error) (*cmdConn, error) {
		pcancel()
		inW.Close()
		kctx, kcancel := context.WithTimeout(context.Background(), killTimeout)
		proc.Kill(kctx)
		kcancel()
		return nil, err
	}
	t := time.NewTimer(ch.liveness)
	defer t.Stop()
	select {
	case err := <-hello:
		if err != nil {
			select {
			case <-exited:
				err = fmt.Errorf("%w; the agent exited %d (%v): %s", err, exitCode, exitErr, c.stderr.String())
			case <-time.After(500 * time.Millisecond):
			}
			return fail(providers.E(providers.TransportLost, op, err))
		}
	case <-t.C:
		return fail(providers.Errorf(providers.Liveness, op, "the command agent did not say hello within %v", ch.liveness))
	case <-ctx.Done():
		return fail(ctxError(op, ctx.Err()))
	}
	c.lastRecv.Store(time.Now().UnixNano())
	go c.pingLoop()
	go c.readLoop(outR, exited, func() string {
		if exitErr != nil {
			return fmt.Sprintf("the command agent's exec failed: %v (stderr: %s)", exitErr, c.stderr.String())
		}
		return fmt.Sprintf("the command agent exited %d (stderr: %s)", exitCode, c.stderr.String())
	})
	return c, nil
}

// readLoop hands each frame to its command until the stream ends, then
// fails every command still running. What the agent sends is the box's:
// a panic while reading it ends this stream, not the process.
func (c *cmdConn) readLoop(r io.Reader, exited <-chan struct{}, why func() string) {
	var ferr error
	if perr := guard.Run(func() { ferr = c.readFrames(r) }); perr != nil {
		ferr = perr
	}
	// Say why: the exit status and stderr, when the exec has ended.
	select {
	case <-exited:
		ferr = errors.New(why())
	case <-time.After(200 * time.Millisecond):
		if ferr == io.EOF {
			ferr = errors.New("the command stream ended")
		}
	}
	c.die(&providers.Error{Code: providers.TransportLost, Op: "agent.Exec", Box: c.box, Err: ferr})
}

// readFrames hands each frame to its command until the stream ends or
// breaks the protocol, and returns why it stopped.
func (c *cmdConn) readFrames(r io.Reader) error {
	for {
		typ, id, payload, err := readFrame(r)
		if err != nil {
			return err
		}
		c.lastRecv.Store(time.Now().UnixNano())
		if typ == framePong {
			continue
		}
		c.mu.Lock()
		p := c.procs[id]
		var ks []chan error
		if typ == frameKilled {
			ks = c.kills[id]
			delete(c.kills, id)
		}
		c.mu.Unlock()
		if typ == frameKilled {
			var k cmdKilled
			json.Unmarshal(payload, &k)
			var err error
			if k.Error != "" {
				err = errors.New(k.Error)
			}
			for _, ans := range ks {
				ans <- err
			}
			continue
		}
		if p == nil {
			continue
		}
		switch typ {
		case frameStarted, frameFailed:
			p.startedFrame(typ, payload)
		case frameStdout, frameStderr, frameExit:
			if !p.out.push(outItem{typ: typ, data: payload}) {
				return fmt.Errorf("the agent sent command %d more output than its window (%d bytes) allows", id, cmdWindow)
			}
		case frameInAck:
			if n, err := ackSize(payload); err == nil && p.inCredit != nil {
				p.inCredit.give(n)
			}
		}
	}
}

// die ends the stream for why: every command on it fails with why, and
// the agent is told to go (or its exec killed).
func (c *cmdConn) die(why *providers.Error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = why
	procs, kills := c.procs, c.kills
	c.procs, c.kills = map[uint32]*agentProc{}, map[uint32][]chan error{}
	c.mu.Unlock()
	close(c.done)
	for _, p := range procs {
		p.lost(why)
	}
	for _, ks := range kills {
		for _, ans := range ks {
			ans <- why
		}
	}
	c.close()
	if why.Code == providers.Liveness {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
			defer cancel()
			c.proc.Kill(ctx)
			c.cancel()
		}()
	}
}

// pingLoop keeps the stream honest while commands run on it: a ping every
// tick, and the stream declared dead (Liveness) when nothing at all has
// come back for the liveness bound since a ping went out. The ping also
// makes a stream whose agent died without its exec noticing fail on the
// write.
func (c *cmdConn) pingLoop() {
	tick := c.liveness / 4
	tick = min(max(tick, 100*time.Millisecond), 2*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	var sending atomic.Bool
	var pingAt time.Time // the oldest ping not yet followed by a frame
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.mu.Lock()
		busy := len(c.procs) > 0 || len(c.kills) > 0
		c.mu.Unlock()
		last := time.Unix(0, c.lastRecv.Load())
		if !pingAt.IsZero() && last.After(pingAt) {
			pingAt = time.Time{}
		}
		if !pingAt.IsZero() && time.Since(pingAt) > c.liveness {
			c.die(&providers.Error{Code: providers.Liveness, Op: "agent.Exec", Box: c.box,
				Err: fmt.Errorf("the command agent did not answer for %v", c.liveness)})
			return
		}
		if !busy || !sending.CompareAndSwap(false, true) {
			continue
		}
		if pingAt.IsZero() {
			pingAt = time.Now()
		}
		go func() {
			defer sending.Store(false)
			if err := c.fw.write(framePing, 0, nil); err != nil {
				c.die(&providers.Error{Code: providers.TransportLost, Op: "agent.Exec", Box: c.box, Err: err})
			}
		}()
	}
}

// close ends the stream: the agent sees EOF and ends the groups it
// started.
func (c *cmdConn) close() {
	c.stdin.Close()
	go func() {
		select {
		case <-c.done:
		case <-time.After(closeGrace):
		}
		c.cancel()
	}()
}

// endsToConfirm reports whether the stream has commands still running or
// kills still unanswered whose end a caller waits on: the channel's own
// commands (its watch) are not. Once the stream's stdin is closed no
// command starts on it, so after close the answer can only turn false.
func (c *cmdConn) endsToConfirm() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if !p.own {
			return true
		}
	}
	for id := range c.kills {
		if p := c.procs[id]; p == nil || !p.own {
			return true
		}
	}
	return false
}

func (c *cmdConn) forget(id uint32) {
	c.mu.Lock()
	delete(c.procs, id)
	c.mu.Unlock()
}

// run starts one command and waits for the agent to say it started.
func (c *cmdConn) run(ctx context.Context, req providers.ExecRequest, rec *Record, own bool) (*agentProc, error) {
	const op = "agent.Exec"
	st := cmdStart{Argv: toBytes(req.Argv), Dir: []byte(req.Dir), Stdin: req.Stdin != nil, Stdout: req.Stdout != nil, Stderr: req.Stderr != nil}
	if req.Stdout != nil && req.Stdout == req.Stderr {
		st.Merge, st.Stdout, st.Stderr = true, false, false
	}
	for k, v := range req.Env {
		st.Env = append(st.Env, []byte(k+"="+v))
	}
	if rec != nil {
		st.Record = &cmdRecord{Dir: []byte(rec.Dir), ID: rec.ID, Owner: rec.Owner}
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, providers.E(providers.Invalid, op, err)
	}
	p := &agentProc{
		c: c, own: own, stdout: req.Stdout, stderr: req.Stderr,
		started: make(chan struct{}), done: make(chan struct{}),
		out: newFrameQueue(),
	}
	if req.Stdin != nil {
		p.inCredit = newCredit(cmdWindow)
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	p.id = c.next
	c.procs[p.id] = p
	c.mu.Unlock()

	if err := c.fw.write(frameStart, p.id, payload); err != nil {
		c.forget(p.id)
		<-c.done
		return nil, c.err
	}
	t := time.NewTimer(c.liveness)
	defer t.Stop()
	select {
	case <-p.started:
	case <-t.C:
		p.abandon()
		return nil, providers.Errorf(providers.Liveness, op, "the command agent did not start the command within %v", c.liveness)
	case <-ctx.Done():
		p.abandon()
		return nil, ctxError(op, ctx.Err())
	}
	if p.startErr != nil {
		c.forget(p.id)
		return nil, p.startErr
	}
	go p.deliver()
	if req.Stdin != nil {
		go p.feed(req.Stdin)
	}
	p.ctxKilled = make(chan struct{})
	p.stopCtx = context.AfterFunc(ctx, func() {
		defer close(p.ctxKilled)
		p.mu.Lock()
		p.ctxErr = ctx.Err()
		p.mu.Unlock()
		kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		defer cancel()
		if err := p.Kill(kctx); err != nil {
			p.mu.Lock()
			p.killErr = err
			p.mu.Unlock()
		}
	})
	return p, nil
}

// abandon gives up on a command whose start was not confirmed in time: it
// is killed if it started, and its output, if any, drained.
func (p *agentProc) abandon() {
	p.stdout, p.stderr = nil, nil
	go p.deliver()
	go func() {
		kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		defer cancel()
		p.Kill(kctx)
	}()
}

// agentProc is one command run through the stream.
type agentProc struct {
	c              *cmdConn
	id             uint32
	own            bool // the channel's own command (its watch), see execCmd
	stdout, stderr io.Writer
	inCredit       *credit
	out            *frameQueue
	stopCtx        func() bool   // stops the kill at ctx's end
	ctxKilled      chan struct{} // closed when that kill has been answered

	started  chan struct{}
	startErr error
	once     sync.Once

	mu      sync.Mutex
	ctxErr  error
	killErr error
	done    chan struct{}
	code    int
	err     error
}

var _ providers.Process = (*agentProc)(nil)

func (p *agentProc) startedFrame(typ byte, payload []byte) {
	p.once.Do(func() {
		if typ == frameFailed {
			var f cmdFailed
			json.Unmarshal(payload, &f)
			p.startErr = providers.Errorf(providers.Unknown, "agent.Exec", "the command did not start: %s", f.Message)
		}
		close(p.started)
	})
}

// lost ends the command with the stream's death.
func (p *agentProc) lost(err *providers.Error) {
	p.once.Do(func() {
		p.startErr = err
		close(p.started)
	})
	p.out.push(outItem{lost: err})
	if p.inCredit != nil {
		p.inCredit.close()
	}
}

// deliver writes the command's output to the caller's writers in order,
// acknowledging each chunk, until its exit (or the stream's death). A
// writer that fails is replaced by a discard, so the command never stalls
// on it.
func (p *agentProc) deliver() {
	defer close(p.done)
	defer p.c.forget(p.id)
	for {
		it := p.out.pop()
		switch {
		case it.lost != nil:
			p.code, p.err = -1, it.lost
			return
		case it.typ == frameExit:
			var x cmdExit
			json.Unmarshal(it.data, &x)
			p.code = x.Code
			if p.inCredit != nil {
				p.inCredit.close()
			}
			if p.stopCtx != nil && !p.stopCtx() {
				// ctx ended it: the kill runs (or ran); wait for it so
				// that Wait returns only once the group is confirmed gone.
				<-p.ctxKilled
			}
			p.mu.Lock()
			ctxErr, killErr := p.ctxErr, p.killErr
			p.mu.Unlock()
			if ctxErr != nil {
				p.code, p.err = -1, ctxError("agent.Wait", ctxErr).WithBox(p.c.box)
				if killErr != nil {
					p.err = providers.E(providers.Unknown, "agent.Wait", killErr).WithBox(p.c.box)
				}
			}
			return
		}
		w := p.stdout
		if it.typ == frameStderr {
			w = p.stderr
		}
		if w != nil {
			if _, err := w.Write(it.data); err != nil {
				if it.typ == frameStderr {
					p.stderr = io.Discard
				} else {
					p.stdout = io.Discard
				}
			}
		}
		p.c.fw.writeAck(frameOutAck, p.id, len(it.data))
	}
}

// feed sends stdin to the command within its window; EOF is sent at the
// reader's end. It stops when the command has ended.
func (p *agentProc) feed(r io.Reader) {
	buf := make([]byte, cmdChunk)
	for {
		n, err := r.Read(buf)
		for sent := 0; sent < n; {
			k := p.inCredit.take(n - sent)
			if k == 0 {
				return
			}
			if p.c.fw.write(frameStdin, p.id, buf[sent:sent+k]) != nil {
				return
			}
			sent += k
		}
		if err != nil {
			select {
			case <-p.done:
			default:
				p.c.fw.write(frameStdinEOF, p.id, nil)
			}
			return
		}
	}
}

// Wait waits for the command's end and its output.
func (p *agentProc) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

// Kill kills the command's whole group and returns once the agent confirms
// none of it runs.
func (p *agentProc) Kill(ctx context.Context) error {
	const op = "agent.Kill"
	ans := make(chan error, 1)
	c := p.c
	c.mu.Lock()
	dead := c.err
	if dead == nil {
		c.kills[p.id] = append(c.kills[p.id], ans)
	}
	c.mu.Unlock()
	if dead != nil {
		select {
		case <-p.done:
			return nil // ended; the agent ended its group at the stream's end
		default:
			return dead
		}
	}
	if err := c.fw.write(frameKill, p.id, nil); err != nil {
		<-c.done
		return c.err
	}
	select {
	case err := <-ans:
		if err != nil {
			return providers.E(0, op, err).WithBox(c.box)
		}
		return nil
	case <-ctx.Done():
		return ctxError(op, ctx.Err()).WithBox(c.box)
	}
}

// outItem is one chunk of output, the exit, or the stream's death.
type outItem struct {
	typ  byte
	data []byte
	lost *providers.Error
}

// frameQueue holds what the stream brought for one command (its output,
// its exit, the stream's death) between the stream's reader and the
// command's writer. Unlike providers.OutQueue it never blocks the pusher:
// the stream's one reader serves every command, so one slow writer must
// not stall the others. The command's window bounds it: an agent that
// sends past the window breaks the protocol, and push refuses.
type frameQueue struct {
	mu    sync.Mutex
	cond  *sync.Cond
	q     []outItem
	bytes int // output bytes queued
}

// maxQueued is the most output a command's queue holds: its window, and
// one frame the agent may have sent as the window opened.
const maxQueued = cmdWindow + maxCmdFrame

func newFrameQueue() *frameQueue {
	q := &frameQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues it; false (and nothing queued) when that would take the
// queue past maxQueued.
func (q *frameQueue) push(it outItem) bool {
	q.mu.Lock()
	if q.bytes+len(it.data) > maxQueued {
		q.mu.Unlock()
		return false
	}
	q.q = append(q.q, it)
	q.bytes += len(it.data)
	q.mu.Unlock()
	q.cond.Signal()
	return true
}

func (q *frameQueue) pop() outItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.q) == 0 {
		q.cond.Wait()
	}
	it := q.q[0]
	q.q = q.q[1:]
	q.bytes -= len(it.data)
	return it
}
