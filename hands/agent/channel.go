package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Bounds of bringing a channel up and down.
const (
	// openTimeout bounds one open: facts, upload, exec, handshake.
	openTimeout = 2 * time.Minute
	// killTimeout bounds the kill of an agent that did not end by itself.
	killTimeout = 30 * time.Second
)

// ChannelOptions configure NewChannel.
type ChannelOptions struct {
	// Binary is the host path of a static Linux boxfs binary for the box's
	// architecture (SelfBinary, or internal/boxfsbin in tests).
	Binary string
	// Liveness bounds how long a request may go unanswered while nothing
	// arrives from the agent (and how long the agent may take to answer
	// its first request); zero is DefaultLiveness.
	Liveness time.Duration
	// Logger receives the channel's log lines; nil is slog.Default().
	Logger *slog.Logger
	// OnExec, when set, is told of every Exec the channel makes on the box
	// (the upload, the agent, its command stream), with the error it
	// returned. It must not block.
	OnExec func(err error)
	// Facts, when set, are the box's facts as the caller knows them; the
	// channel then does not ask the box (nil: it asks at its first open).
	Facts *providers.Facts
	// InstalledAt is where an earlier open put the binary in the box (its
	// BinaryPath then). When the binary's path is still that, the first
	// open starts it without looking for it first (one round trip less),
	// and uploads it only when it does not start.
	InstalledAt string
	// NoDirect keeps the requests on the exec's stdio even when the box
	// can be dialled (providers.DirectDialer).
	NoDirect bool
	// dial replaces dialDirect in tests.
	dial directDialer
}

// Stats describes a channel, for facts.json.
type Stats struct {
	Up          bool           `json:"up"`
	Opens       int            `json:"opens"`    // agents started
	Restarts    int            `json:"restarts"` // opens after the first
	Uploads     int            `json:"uploads"`  // binaries copied into the box
	RoundTrips  int64          `json:"roundTrips"`
	LastOpenMs  float64        `json:"lastOpenMs,omitempty"` // how long the last open took
	LastError   string         `json:"lastError,omitempty"`  // why the channel last died or failed to open
	LastCode    providers.Code `json:"lastErrorCode,omitempty"`
	LastErrorAt time.Time      `json:"lastErrorAt,omitzero"`
	// Direct names the direct connection the requests take ("unix
	// /proc/4242/root", "tcp bridge 172.17.0.2"), "" when they go over the
	// exec's stdio; DirectOff says why a box that offered routes is not
	// reached by any, or why the box is not dialled at all (the channel
	// is off by choice: ChannelOptions.NoDirect, or the provider's
	// providers.ErrDirectOff).
	Direct    string `json:"direct,omitempty"`
	DirectOff string `json:"directOff,omitempty"`
}

// Channel is the agent channel to one box: boxfs's own static binary,
// uploaded into the box once (as .boxfs-agent-<sha256 prefix> in the box's
// TmpDir, or in /dev/shm when TmpDir will not run it; reused when present
// and trusted, see checkScript, else put in a private directory; run with
// -sha256 so that a damaged copy is replaced), runs as one
// long-lived exec ("boxfs agent"), and a Client speaks SFTP to it over the
// exec's stdin and stdout.
//
// Channel implements providers.Files and providers.Walker. It opens lazily,
// on the first call. When the agent dies (killed, its exec ended, its
// stream broke) or hangs (no answer within the liveness bound: the channel
// kills it), the calls in flight return TransportLost or Liveness (a
// mutation in flight: OutcomeUnknown wrapping it); if no call was in
// flight, the next call returns it; the call after that starts a new agent.
// Channel is safe for concurrent use.
type Channel struct {
	box      providers.Box
	opts     ChannelOptions
	liveness time.Duration
	log      *slog.Logger

	mu       sync.Mutex
	cur      *session
	opening  chan struct{} // closed when the open in progress ends
	closed   bool
	bin      *binaryInfo
	facts    *providers.Facts
	uploaded bool   // the binary is known to be in the box
	dest     string // where the binary is in the box
	rtEnded  int64  // round trips of ended sessions
	stats    Stats

	cmdMu sync.Mutex // held while the command stream opens
	cmd   *cmdConn   // the command stream, or nil
	// After a failed open, the stream is not tried again before cmdRetry.
	cmdRetry time.Time
	cmdFail  error
}

var (
	_ providers.Files  = (*Channel)(nil)
	_ providers.Walker = (*Channel)(nil)

	_ providers.LinkAttrSetter = (*Channel)(nil)
	_ providers.RemoveStater   = (*Channel)(nil)
	_ providers.SetattrStater  = (*Channel)(nil)
	_ providers.BatchWriter    = (*Channel)(nil)
	_ providers.BatchRemover   = (*Channel)(nil)
)

// NewChannel returns the channel to box; nothing happens until the first
// call (or Open).
func NewChannel(box providers.Box, opts ChannelOptions) *Channel {
	ch := &Channel{box: box, opts: opts, liveness: opts.Liveness, log: opts.Logger}
	if opts.Facts != nil {
		f := *opts.Facts
		ch.facts = &f
	}
	if ch.liveness <= 0 {
		ch.liveness = DefaultLiveness
	}
	if ch.log == nil {
		ch.log = slog.Default()
	}
	ch.log = ch.log.With("box", box.ID())
	return ch
}

// session is one running agent.
type session struct {
	cl       *Client
	proc     providers.Process
	cancel   context.CancelFunc // ends the exec's context
	stderr   *tailBuffer
	exited   chan struct{} // closed when proc.Wait returned
	exitCode int
	exitErr  error
	finished chan struct{} // closed when the agent is known gone (or could not be killed)

	direct    string // the direct route the requests take, "" over the exec
	directOff string // why the requests go over the exec though the box offers routes, or is not to be dialled
}

// exitReason describes how the agent ended, with its last stderr.
func (s *session) exitReason() string {
	var b strings.Builder
	if s.exitErr != nil {
		fmt.Fprintf(&b, "the agent's exec failed: %v", s.exitErr)
	} else {
		fmt.Fprintf(&b, "the agent exited with code %d", s.exitCode)
	}
	if t := s.stderr.String(); t != "" {
		fmt.Fprintf(&b, " (stderr: %s)", t)
	}
	return b.String()
}

// Open brings the channel up now, if it is not up, and checks that the
// agent answers.
func (ch *Channel) Open(ctx context.Context) error {
	_, err := ch.client(ctx, "agent.Open")
	return err
}

// Close ends the agent cleanly (its stdin closes and it exits), or kills
// it; later calls are Invalid. It returns once the file agent has exited
// and the command agent has ended the commands callers started on it; a
// command agent with none is left to exit by itself.
func (ch *Channel) Close() error {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return nil
	}
	ch.closed = true
	s := ch.cur
	ch.cur = nil
	ch.mu.Unlock()
	ch.cmdMu.Lock()
	c := ch.cmd
	ch.cmd = nil
	ch.cmdMu.Unlock()
	// Both sessions are closed first and waited for after, so that
	// closing costs the box's round trip once, not once per session.
	// The command agent is waited for only while it has commands to end
	// that a caller started: it kills their groups and confirms them gone
	// before it exits. An idle one, or one running only the channel's
	// watch, ends that and exits at its stdin's EOF unasked (and were this
	// process to end first, its exec's end would close that stdin);
	// waiting for it would confirm nothing and cost the stream's end and
	// the exec's exit status, the better part of an unmount.
	confirm := false
	if c != nil {
		c.close()
		confirm = c.endsToConfirm()
	}
	if s != nil {
		s.cl.Close()
	}
	if confirm {
		select {
		case <-c.done:
		case <-time.After(closeGrace + killTimeout):
		}
	}
	if s != nil {
		<-s.finished
		ch.mu.Lock()
		ch.rtEnded += s.cl.RoundTrips()
		ch.mu.Unlock()
	}
	return nil
}

// Stats reports the channel's counters and last error.
func (ch *Channel) Stats() Stats {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	st := ch.stats
	st.RoundTrips = ch.rtEnded
	if ch.cur != nil {
		st.RoundTrips += ch.cur.cl.RoundTrips()
		select {
		case <-ch.cur.cl.Done():
		default:
			st.Up = true
		}
	}
	return st
}

// exec runs req in the box, telling OnExec.
func (ch *Channel) exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	p, err := ch.box.Exec(ctx, req)
	if ch.opts.OnExec != nil {
		ch.opts.OnExec(err)
	}
	return p, err
}

func (ch *Channel) recordError(err error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.stats.LastError = err.Error()
	ch.stats.LastCode = providers.CodeOf(err)
	ch.stats.LastErrorAt = time.Now()
}

// client returns a live client, opening one if there is none: the call
// that finds the agent dead returns its death, unless a call in flight
// already did.
func (ch *Channel) client(ctx context.Context, op string) (*Client, error) {
	for {
		ch.mu.Lock()
		if ch.closed {
			ch.mu.Unlock()
			return nil, &providers.Error{Code: errClosed.Code, Op: op, Box: ch.box.ID(), Err: errClosed.Err}
		}
		if s := ch.cur; s != nil {
			select {
			case <-s.cl.Done():
				ch.cur = nil
				ch.rtEnded += s.cl.RoundTrips()
				if !s.cl.reported.Load() {
					ch.mu.Unlock()
					return nil, s.cl.lost(op, "", false)
				}
			default:
				ch.mu.Unlock()
				return s.cl, nil
			}
		}
		if w := ch.opening; w != nil {
			ch.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, ctxError(op, ctx.Err()).WithBox(ch.box.ID())
			}
		}
		w := make(chan struct{})
		ch.opening = w
		ch.mu.Unlock()

		start := time.Now()
		s, err := ch.open(ctx)

		ch.mu.Lock()
		ch.opening = nil
		close(w)
		if err != nil {
			ch.mu.Unlock()
			err = providers.E(0, op, err).WithBox(ch.box.ID())
			ch.recordError(err)
			ch.log.Warn("agent: channel did not open", "err", err)
			return nil, err
		}
		if ch.closed {
			ch.mu.Unlock()
			s.cl.Close()
			<-s.finished
			continue
		}
		ch.cur = s
		ch.stats.Direct, ch.stats.DirectOff = s.direct, s.directOff
		ch.stats.Opens++
		if ch.stats.Opens > 1 {
			ch.stats.Restarts++
		}
		ch.stats.LastOpenMs = float64(time.Since(start).Microseconds()) / 1000
		ch.mu.Unlock()
		ch.log.Debug("agent: channel up", "took", time.Since(start))
		return s.cl, nil
	}
}

// open starts an agent in the box's TmpDir, or in /dev/shm when that
// fails (a TmpDir mounted noexec or read-only).
func (ch *Channel) open(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	bin, facts, err := ch.prepare(ctx)
	if err != nil {
		return nil, err
	}
	dirs := []string{facts.TmpDir, fallbackDir}
	if facts.TmpDir == "" {
		dirs[0] = "/tmp"
	}
	name := ".boxfs-agent-" + bin.sha256[:16]
	ch.mu.Lock()
	if ch.dest != "" {
		dirs = []string{path.Dir(ch.dest)} // where it worked before
	} else if at := ch.opts.InstalledAt; path.Base(at) == name && path.IsAbs(at) {
		dirs = append([]string{path.Dir(at)}, dirs...) // a private directory of an earlier open
	}
	ch.mu.Unlock()
	var first error
	for i, dir := range dirs {
		if slices.Contains(dirs[:i], dir) {
			continue
		}
		s, err := ch.openAt(ctx, bin, facts, path.Join(dir, name))
		if err == nil {
			return s, nil
		}
		if first == nil {
			first = err
		}
		switch providers.CodeOf(err) {
		case providers.Gone, providers.Timeout, providers.Aborted, providers.Auth, providers.Unavailable:
			return nil, first
		}
		ch.log.Debug("agent: could not start the agent here", "dir", dir, "err", err)
	}
	return nil, first
}

// fallbackDir is where the agent goes when the box's TmpDir will not run
// it.
const fallbackDir = "/dev/shm"

// openAt starts the agent at dest: the binary is run if it may be there
// (and checkScript trusts it); if that fails (or it is not there), it is
// uploaded and run again. A file at dest that checkScript does not trust
// (another user's, or writable by others) is left alone, and the binary
// goes in a private directory made next to it. A box without a shell
// cannot check what it holds: there only a copy uploaded by this open is
// run.
func (ch *Channel) openAt(ctx context.Context, bin binaryInfo, facts providers.Facts, dest string) (*session, error) {
	ch.mu.Lock()
	present := ch.uploaded && ch.dest == dest || ch.opts.InstalledAt == dest && ch.stats.Opens == 0
	ch.mu.Unlock()
	if !present {
		if ps, ok := ch.box.(providers.PathStater); ok {
			fi, err := ps.StatPath(ctx, dest)
			present = err == nil && fi.IsRegular() && fi.Size == bin.size
		} else {
			present = true // try it: a failed start costs what a check would
		}
	}
	if !facts.HasShell() {
		present = false
	}
	if present {
		s, err := ch.start(ctx, bin, facts, dest)
		if err == nil {
			ch.setUploaded(dest)
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		switch refusedAs(err) {
		case checkUnsafeDir:
			return nil, err
		case checkUnsafeFile:
			ch.log.Warn("agent: the binary in the box is not trusted; installing one in a private directory", "path", dest, "err", err)
			priv, perr := ch.privateDir(ctx, facts, path.Dir(dest))
			if perr != nil {
				return nil, perr
			}
			dest = path.Join(priv, path.Base(dest))
		default:
			ch.log.Debug("agent: the binary in the box did not start; uploading it", "path", dest, "err", err)
		}
	}
	if err := ch.upload(ctx, bin, facts, dest); err != nil {
		return nil, err
	}
	ch.mu.Lock()
	ch.stats.Uploads++
	ch.mu.Unlock()
	s, err := ch.start(ctx, bin, facts, dest)
	if err != nil {
		return nil, err
	}
	ch.setUploaded(dest)
	return s, nil
}

func (ch *Channel) setUploaded(dest string) {
	ch.mu.Lock()
	ch.uploaded, ch.dest = true, dest
	ch.mu.Unlock()
}

// prepare reads the binary and the box's facts once, and checks that the
// agent can run in the box.
func (ch *Channel) prepare(ctx context.Context) (binaryInfo, providers.Facts, error) {
	const op = "agent.Channel"
	ch.mu.Lock()
	bin, facts := ch.bin, ch.facts
	ch.mu.Unlock()
	if bin == nil {
		if ch.opts.Binary == "" {
			return binaryInfo{}, providers.Facts{}, providers.Errorf(providers.Invalid, op, "no agent binary given")
		}
		b, err := readBinaryInfo(ch.opts.Binary)
		if err != nil {
			return binaryInfo{}, providers.Facts{}, providers.E(providers.Invalid, op, err)
		}
		bin = &b
	}
	if facts == nil {
		f, err := ch.box.Facts(ctx)
		if err != nil {
			return binaryInfo{}, providers.Facts{}, err
		}
		facts = &f
	}
	if !facts.Runs("linux", bin.arch) {
		return *bin, *facts, providers.Errorf(providers.Unsupported, op,
			"the agent is a linux/%s binary and the box is %q/%q", bin.arch, facts.OS, facts.Arch)
	}
	if !facts.HasLiveProcesses() || !facts.HasStdin() {
		return *bin, *facts, providers.Errorf(providers.Unsupported, op,
			"the agent needs a box whose processes live between commands and whose exec streams stdin")
	}
	ch.mu.Lock()
	ch.bin, ch.facts = bin, facts
	ch.mu.Unlock()
	return *bin, *facts, nil
}

// uploadScript installs the binary from stdin under a temporary name and
// renames it into place; the paths are its arguments.
const uploadScript = `umask 022
cat >"$1" && chmod 755 "$1" && mv -f "$1" "$2" || { rm -f "$1"; exit 1; }`

// upload copies the binary to dest: through the box's archive API when it
// has one, else through an exec's stdin.
func (ch *Channel) upload(ctx context.Context, bin binaryInfo, facts providers.Facts, dest string) error {
	const op = "agent.upload"
	f, err := os.Open(bin.path)
	if err != nil {
		return providers.E(providers.Invalid, op, err)
	}
	defer f.Close()
	if ar, ok := ch.box.(providers.Archiver); ok {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			err := tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeReg, Name: path.Base(dest), Mode: 0o755, Size: bin.size,
				ModTime: time.Now(), Format: tar.FormatPAX,
			})
			if err == nil {
				_, err = io.Copy(tw, f)
			}
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		err := ar.PutArchive(ctx, path.Dir(dest), pr)
		pr.CloseWithError(io.ErrClosedPipe)
		if err != nil {
			return providers.E(0, op, err)
		}
		return nil
	}
	shell := facts.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	var stderr bytes.Buffer
	tmp := dest + ".tmp-" + providers.NewID(8)
	proc, err := ch.exec(ctx, providers.ExecRequest{
		Argv:   []string{shell, "-c", uploadScript, "boxfs-upload", tmp, dest},
		Dir:    "/",
		Stdin:  f,
		Stderr: &stderr,
	})
	if err != nil {
		return providers.E(0, op, err)
	}
	code, err := proc.Wait()
	if err != nil {
		return providers.E(0, op, err)
	}
	if code != 0 {
		return providers.Errorf(providers.Unknown, op, "installing the agent at %s exited %d: %s", dest, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// start runs the agent at dest (through checkScript, see agentArgv) and
// completes the SFTP handshake. A start checkScript refused is a
// checkError: NotFound when dest is not there, else Unsafe.
func (ch *Channel) start(ctx context.Context, bin binaryInfo, facts providers.Facts, dest string) (*session, error) {
	const op = "agent.start"
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	// The exec lives as long as the channel, not as long as this call's
	// ctx, which only bounds the start.
	pctx, pcancel := context.WithCancel(context.Background())
	stopBound := context.AfterFunc(ctx, pcancel)
	s := &session{
		cancel:   pcancel,
		stderr:   &tailBuffer{max: 2048},
		exited:   make(chan struct{}),
		finished: make(chan struct{}),
	}
	var routes []providers.DirectRoute
	routes, s.directOff = ch.directRoutes(ctx)
	args := []string{"agent", "-sha256", bin.sha256}
	if len(routes) > 0 {
		args = append(args, "-direct")
	}
	proc, err := ch.exec(pctx, providers.ExecRequest{
		Argv:   agentArgv(facts, dest, args...),
		Dir:    "/",
		Stdin:  inR,
		Stdout: outW,
		Stderr: s.stderr,
	})
	if err != nil {
		stopBound()
		pcancel()
		if ctx.Err() != nil {
			return nil, ctxError(op, ctx.Err())
		}
		return nil, providers.E(0, op, err)
	}
	s.proc = proc
	clReady := make(chan *Client, 1)
	go func() {
		s.exitCode, s.exitErr = proc.Wait()
		close(s.exited)
		var cl *Client
		select {
		case cl = <-clReady:
		default:
		}
		if cl != nil {
			cl.die(&providers.Error{Code: providers.TransportLost, Err: errors.New(s.exitReason())})
		}
		outW.CloseWithError(io.EOF)
		inR.Close()
	}()

	var r io.ReadCloser = outR
	var w io.WriteCloser = inW
	if len(routes) > 0 {
		var conn net.Conn
		var rt providers.DirectRoute
		conn, rt, s.directOff, err = directHandshake(ctx, routes, path.Dir(dest), inW, outR, ch.liveness, ch.dial)
		if conn != nil {
			// The requests go over conn; the exec's stdout carries
			// nothing more, and its stdin stays open as the agent's
			// lifeline until the exec ends.
			r, w = conn, conn
			s.direct = rt.Network + " " + rt.Why
			go io.Copy(io.Discard, outR)
			ch.log.Debug("agent: direct channel", "route", s.direct)
		} else if err == nil {
			ch.log.Info("agent: no direct channel; requests go over the exec", "why", s.directOff)
		}
	}
	var cl *Client
	if err == nil {
		cl, err = NewClient(ctx, r, w, ClientOptions{Box: ch.box.ID(), Liveness: ch.liveness})
	}
	stopBound()
	if err != nil {
		// Say why: wait a moment for the exit status and stderr.
		select {
		case <-s.exited:
			if ce := checkFailure(s.exitCode, s.stderr.String()); s.exitErr == nil && ce != nil {
				code := providers.Unsafe
				if ce.Code == checkMissing {
					code = providers.NotFound
				}
				err = providers.E(code, op, ce).WithPath(dest)
			} else {
				err = providers.E(0, op, fmt.Errorf("%w; %s", err, s.exitReason()))
			}
		case <-time.After(500 * time.Millisecond):
		}
		ch.kill(s)
		close(s.finished)
		return nil, err
	}
	s.cl = cl
	clReady <- cl
	go ch.watch(s)
	return s, nil
}

// watch waits for the session's client to end, then makes sure the agent
// is gone: at once when it died or hung, after closeGrace when the client
// closed it.
func (ch *Channel) watch(s *session) {
	defer close(s.finished)
	defer s.cancel()
	<-s.cl.Done()
	why := s.cl.Err()
	closing := s.cl.closing.Load()
	if !closing {
		ch.recordError(why)
		ch.log.Warn("agent: channel lost", "err", why)
		select {
		case <-s.exited:
		default:
			ch.kill(s)
		}
		return
	}
	select {
	case <-s.exited:
	case <-time.After(closeGrace):
		ch.kill(s)
	}
}

// directRoutes returns the box's direct routes: none when it has none,
// when the option turns them off or the provider says the box is not to
// be dialled (off then says why, for facts.json), or when the provider
// cannot say (logged).
func (ch *Channel) directRoutes(ctx context.Context) (routes []providers.DirectRoute, off string) {
	dd, ok := ch.box.(providers.DirectDialer)
	if !ok {
		return nil, ""
	}
	if ch.opts.NoDirect {
		return nil, providers.ErrDirectOff.Error() + ": the channel's option NoDirect"
	}
	ctx, cancel := context.WithTimeout(ctx, directAckTimeout)
	defer cancel()
	routes, err := dd.DirectRoutes(ctx)
	if errors.Is(err, providers.ErrDirectOff) {
		return nil, err.Error()
	}
	if err != nil {
		ch.log.Info("agent: the box's direct routes are unknown; requests go over the exec", "err", err)
		return nil, ""
	}
	return routes, ""
}

// dial dials a direct route.
func (ch *Channel) dial(ctx context.Context, route providers.DirectRoute, addr string) (net.Conn, error) {
	if ch.opts.dial != nil {
		return ch.opts.dial(ctx, route, addr)
	}
	return dialDirect(ctx, route, addr)
}

// kill ends the agent's exec and waits, boundedly, for it to be gone.
func (ch *Channel) kill(s *session) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	if err := s.proc.Kill(ctx); err != nil {
		ch.log.Warn("agent: killing the agent failed", "err", err)
	}
	s.cancel()
	select {
	case <-s.exited:
	case <-ctx.Done():
		ch.log.Warn("agent: the agent's exec did not end after kill")
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// The Files and Walker methods: each finds a live client (opening one if
// needed) and makes the call on it, through with or do.

// with finds a live client, opening one if needed, and makes call on it.
func with[T any](ctx context.Context, ch *Channel, op string, call func(*Client) (T, error)) (T, error) {
	c, err := ch.client(ctx, op)
	if err != nil {
		var zero T
		return zero, err
	}
	return call(c)
}

// do is with for a call that returns only an error.
func (ch *Channel) do(ctx context.Context, op string, call func(*Client) error) error {
	c, err := ch.client(ctx, op)
	if err != nil {
		return err
	}
	return call(c)
}

// Stat returns name's attributes, following symlinks.
func (ch *Channel) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Stat", func(c *Client) (providers.FileInfo, error) { return c.Stat(ctx, name) })
}

// Lstat returns name's attributes, not following a symlink.
func (ch *Channel) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Lstat", func(c *Client) (providers.FileInfo, error) { return c.Lstat(ctx, name) })
}

// ReadDir lists a directory, sorted by name, with full attributes.
func (ch *Channel) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	return with(ctx, ch, "agent.ReadDir", func(c *Client) ([]providers.FileInfo, error) { return c.ReadDir(ctx, name) })
}

// Walk lists the whole tree under root; see providers.Walker.
func (ch *Channel) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	return with(ctx, ch, "agent.Walk", func(c *Client) ([]providers.FileInfo, error) { return c.Walk(ctx, root) })
}

// ReadFile streams the whole file.
func (ch *Channel) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	return with(ctx, ch, "agent.ReadFile", func(c *Client) (io.ReadCloser, error) { return c.ReadFile(ctx, name) })
}

// ReadAt reads up to len(p) bytes at off.
func (ch *Channel) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	return with(ctx, ch, "agent.ReadAt", func(c *Client) (int, error) { return c.ReadAt(ctx, name, p, off) })
}

// ReadDirMax lists a directory when it has at most max entries.
func (ch *Channel) ReadDirMax(ctx context.Context, name string, max int) ([]providers.FileInfo, error) {
	return with(ctx, ch, "agent.ReadDir", func(c *Client) ([]providers.FileInfo, error) { return c.ReadDirMax(ctx, name, max) })
}

// WalkMax lists the tree under root when it has at most max entries.
func (ch *Channel) WalkMax(ctx context.Context, root string, max int) ([]providers.FileInfo, error) {
	return with(ctx, ch, "agent.Walk", func(c *Client) ([]providers.FileInfo, error) { return c.WalkMax(ctx, root, max) })
}

// ReadSmall reads many small files of dir in one round trip.
func (ch *Channel) ReadSmall(ctx context.Context, dir string, names []string, max int) ([]providers.SmallFile, error) {
	return with(ctx, ch, "agent.ReadSmall", func(c *Client) ([]providers.SmallFile, error) { return c.ReadSmall(ctx, dir, names, max) })
}

// WriteFile replaces name with r's bytes atomically.
func (ch *Channel) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	return ch.do(ctx, "agent.WriteFile", func(c *Client) error { return c.WriteFile(ctx, name, r, perm) })
}

// WriteAt writes p at off into an existing file.
func (ch *Channel) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	return with(ctx, ch, "agent.WriteAt", func(c *Client) (int, error) { return c.WriteAt(ctx, name, p, off) })
}

// Create makes an empty regular file.
func (ch *Channel) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	return ch.do(ctx, "agent.Create", func(c *Client) error { return c.Create(ctx, name, perm, exclusive) })
}

// CreateStat makes an empty regular file and returns its attributes.
func (ch *Channel) CreateStat(ctx context.Context, name string, perm providers.FileMode, exclusive bool) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Create", func(c *Client) (providers.FileInfo, error) { return c.CreateStat(ctx, name, perm, exclusive) })
}

// MkdirStat makes a directory and returns its attributes.
func (ch *Channel) MkdirStat(ctx context.Context, name string, perm providers.FileMode) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Mkdir", func(c *Client) (providers.FileInfo, error) { return c.MkdirStat(ctx, name, perm) })
}

// WriteFileStat replaces name atomically with r's bytes and o's attributes
// and returns its attributes.
// Commit replaces name with tmp, written beside it by the box's bulk path
// (see Client.Commit).
func (ch *Channel) Commit(ctx context.Context, name, tmp string, o providers.WriteOptions) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Commit", func(c *Client) (providers.FileInfo, error) { return c.Commit(ctx, name, tmp, o) })
}

// WriteFiles writes many files in one round trip (see Client.WriteFiles).
func (ch *Channel) WriteFiles(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	return with(ctx, ch, "agent.WriteFiles", func(c *Client) ([]providers.FileWritten, error) { return c.WriteFiles(ctx, files) })
}

// RemoveFiles removes many names in one round trip (see
// Client.RemoveFiles).
func (ch *Channel) RemoveFiles(ctx context.Context, rms []providers.FileRemove) ([]error, error) {
	return with(ctx, ch, "agent.RemoveFiles", func(c *Client) ([]error, error) { return c.RemoveFiles(ctx, rms) })
}

func (ch *Channel) WriteFileStat(ctx context.Context, name string, r io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.WriteFile", func(c *Client) (providers.FileInfo, error) { return c.WriteFileStat(ctx, name, r, o) })
}

// Mknod makes a named pipe, socket or device.
func (ch *Channel) Mknod(ctx context.Context, name string, mode providers.FileMode, dev uint64) error {
	return ch.do(ctx, "agent.Mknod", func(c *Client) error { return c.Mknod(ctx, name, mode, dev) })
}

// Mkdir makes a directory.
func (ch *Channel) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return ch.do(ctx, "agent.Mkdir", func(c *Client) error { return c.Mkdir(ctx, name, perm) })
}

// Remove unlinks name; a directory is EISDIR.
func (ch *Channel) Remove(ctx context.Context, name string) error {
	return ch.do(ctx, "agent.Remove", func(c *Client) error { return c.Remove(ctx, name) })
}

// RemoveStat is Remove answered with the attributes the file keeps (see
// Client.RemoveStat).
func (ch *Channel) RemoveStat(ctx context.Context, name string) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Remove", func(c *Client) (providers.FileInfo, error) { return c.RemoveStat(ctx, name) })
}

// Rmdir removes an empty directory.
func (ch *Channel) Rmdir(ctx context.Context, name string) error {
	return ch.do(ctx, "agent.Rmdir", func(c *Client) error { return c.Rmdir(ctx, name) })
}

// Rename moves oldname to newname, replacing newname.
func (ch *Channel) Rename(ctx context.Context, oldname, newname string) error {
	return ch.do(ctx, "agent.Rename", func(c *Client) error { return c.Rename(ctx, oldname, newname) })
}

// RenameStat is Rename answered with the attributes it left (see
// Client.RenameStat).
func (ch *Channel) RenameStat(ctx context.Context, oldname, newname string) (fi providers.FileInfo, dirs []providers.FileInfo, err error) {
	err = ch.do(ctx, "agent.Rename", func(c *Client) (err error) {
		fi, dirs, err = c.RenameStat(ctx, oldname, newname)
		return err
	})
	return fi, dirs, err
}

// Chmod sets name's mode bits.
func (ch *Channel) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return ch.do(ctx, "agent.Chmod", func(c *Client) error { return c.Chmod(ctx, name, mode) })
}

// ChmodStat is Chmod answered with the attributes it left (see
// Client.ChmodStat).
func (ch *Channel) ChmodStat(ctx context.Context, name string, mode providers.FileMode) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Chmod", func(c *Client) (providers.FileInfo, error) { return c.ChmodStat(ctx, name, mode) })
}

// ChownStat is Chown answered with the attributes it left.
func (ch *Channel) ChownStat(ctx context.Context, name string, uid, gid int) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Chown", func(c *Client) (providers.FileInfo, error) { return c.ChownStat(ctx, name, uid, gid) })
}

// UtimesStat is Utimes answered with the attributes it left.
func (ch *Channel) UtimesStat(ctx context.Context, name string, atime, mtime time.Time) (providers.FileInfo, error) {
	return with(ctx, ch, "agent.Utimes", func(c *Client) (providers.FileInfo, error) { return c.UtimesStat(ctx, name, atime, mtime) })
}

// Chown sets name's owner and group; -1 leaves one unchanged.
func (ch *Channel) Chown(ctx context.Context, name string, uid, gid int) error {
	return ch.do(ctx, "agent.Chown", func(c *Client) error { return c.Chown(ctx, name, uid, gid) })
}

// Utimes sets times to the nanosecond; a zero time leaves it unchanged.
func (ch *Channel) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return ch.do(ctx, "agent.Utimes", func(c *Client) error { return c.Utimes(ctx, name, atime, mtime) })
}

// Lchown sets the owner of name itself, never following a symlink.
func (ch *Channel) Lchown(ctx context.Context, name string, uid, gid int) error {
	return ch.do(ctx, "agent.Lchown", func(c *Client) error { return c.Lchown(ctx, name, uid, gid) })
}

// Lutimes sets the times of name itself, never following a symlink.
func (ch *Channel) Lutimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return ch.do(ctx, "agent.Lutimes", func(c *Client) error { return c.Lutimes(ctx, name, atime, mtime) })
}

// Truncate sets name's size.
func (ch *Channel) Truncate(ctx context.Context, name string, size int64) error {
	return ch.do(ctx, "agent.Truncate", func(c *Client) error { return c.Truncate(ctx, name, size) })
}

// Symlink makes name a symlink to target.
func (ch *Channel) Symlink(ctx context.Context, target, name string) error {
	return ch.do(ctx, "agent.Symlink", func(c *Client) error { return c.Symlink(ctx, target, name) })
}

// Readlink returns a symlink's target.
func (ch *Channel) Readlink(ctx context.Context, name string) (string, error) {
	return with(ctx, ch, "agent.Readlink", func(c *Client) (string, error) { return c.Readlink(ctx, name) })
}

// Link makes newname a hard link to oldname.
func (ch *Channel) Link(ctx context.Context, oldname, newname string) error {
	return ch.do(ctx, "agent.Link", func(c *Client) error { return c.Link(ctx, oldname, newname) })
}

// Statfs returns the capacity of the file system holding name.
func (ch *Channel) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	return with(ctx, ch, "agent.Statfs", func(c *Client) (providers.StatFS, error) { return c.Statfs(ctx, name) })
}

// Fsync flushes name to stable storage in the box.
func (ch *Channel) Fsync(ctx context.Context, name string) error {
	return ch.do(ctx, "agent.Fsync", func(c *Client) error { return c.Fsync(ctx, name) })
}

// SHA256 returns the SHA-256 of name's content, computed in the box.
func (ch *Channel) SHA256(ctx context.Context, name string) ([32]byte, error) {
	return with(ctx, ch, "agent.SHA256", func(c *Client) ([32]byte, error) { return c.SHA256(ctx, name) })
}
