package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pkg/sftp"

	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// DefaultLiveness is the liveness bound when options leave it zero: how
// long the agent may leave a request unanswered, with nothing at all
// arriving from it, before the channel counts as hung.
const DefaultLiveness = 10 * time.Second

// closeGrace bounds how long Close waits for the agent to end by itself
// once its stdin is closed.
const closeGrace = 3 * time.Second

// ClientOptions configure NewClient.
type ClientOptions struct {
	// Box names the box in errors.
	Box string
	// Liveness bounds how long a request may go unanswered while nothing
	// arrives from the agent; then the client tears the stream down and
	// every call in flight returns Liveness. Zero is DefaultLiveness.
	Liveness time.Duration
	// MaxListing bounds the bytes of one listing (a walk of a tree) the
	// client takes from the agent; a larger one is TooLarge. Zero is
	// DefaultMaxListing.
	MaxListing int
}

// DefaultMaxListing is the largest listing taken from an agent: a walk of
// about a million entries. The agent is the box's: what it announces is
// never trusted to size an allocation.
const DefaultMaxListing = 256 << 20

// Client speaks to one agent over a stream pair. It implements
// providers.Files and providers.Walker with the box-side paths as given
// (absolute), times to the nanosecond and the box's errnos. It is safe for
// concurrent use; concurrent calls are pipelined on the one stream.
//
// A Client does not reconnect: once its stream breaks, every call returns
// TransportLost (Liveness when the client gave up on a hung agent). Done is
// closed then. Channel is the reconnecting form.
type Client struct {
	sc       *sftp.Client
	box      string
	liveness time.Duration
	r        io.ReadCloser
	w        io.WriteCloser

	mu           sync.Mutex
	sendFrames   frames
	recvFrames   frames
	sent         int64 // requests started on the stream
	answered     int64 // answers received whole
	lastProgress time.Time

	dead      chan struct{}
	deathOnce sync.Once
	deathErr  *providers.Error // set before dead is closed
	reported  atomic.Bool      // a call has returned the death
	closing   atomic.Bool

	maxListing int
}

var (
	_ providers.Files  = (*Client)(nil)
	_ providers.Walker = (*Client)(nil)

	_ providers.LinkAttrSetter = (*Client)(nil)
	_ providers.RemoveStater   = (*Client)(nil)
	_ providers.SetattrStater  = (*Client)(nil)
	_ providers.BatchRemover   = (*Client)(nil)
)

// NewClient starts the SFTP session over r (the agent's stdout) and w (its
// stdin) and returns once the agent has answered, or fails within the
// liveness bound or when ctx ends. The Client owns r and w and closes them
// when it ends.
func NewClient(ctx context.Context, r io.ReadCloser, w io.WriteCloser, opts ClientOptions) (*Client, error) {
	const op = "agent.NewClient"
	c := &Client{
		box:        opts.Box,
		liveness:   opts.Liveness,
		maxListing: opts.MaxListing,
		r:          r,
		w:          w,
		dead:       make(chan struct{}),
	}
	if c.liveness <= 0 {
		c.liveness = DefaultLiveness
	}
	if c.maxListing <= 0 {
		c.maxListing = DefaultMaxListing
	}
	type result struct {
		sc  *sftp.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		sc, err := sftp.NewClientPipe(countingReader{c}, countingWriter{c},
			sftp.MaxPacketUnchecked(maxPacket),
			sftp.UseConcurrentWrites(true),
			sftp.UseFstat(true))
		done <- result{sc, err}
	}()
	timer := time.NewTimer(c.liveness)
	defer timer.Stop()
	var fail *providers.Error
	select {
	case res := <-done:
		if res.err == nil {
			c.sc = res.sc
			go c.watch()
			go func() {
				err := c.sc.Wait()
				if c.closing.Load() {
					c.die(errClosed)
					return
				}
				c.die(&providers.Error{Code: providers.TransportLost, Err: fmt.Errorf("the agent's stream ended: %v", err)})
			}()
			return c, nil
		}
		fail = providers.E(providers.TransportLost, op, res.err)
	case <-ctx.Done():
		fail = ctxError(op, ctx.Err())
	case <-timer.C:
		fail = providers.Errorf(providers.Liveness, op, "the agent did not answer within %v", c.liveness)
	}
	r.Close()
	w.Close()
	select {
	case res := <-done:
		if res.sc != nil {
			res.sc.Close()
		}
	case <-time.After(time.Second):
	}
	return nil, fail.WithBox(c.box)
}

var errClosed = &providers.Error{Code: providers.Invalid, Err: errors.New("use of a closed agent channel")}

// Done is closed when the client has ended: Close, a broken stream, or a
// hung agent.
func (c *Client) Done() <-chan struct{} { return c.dead }

// Err returns why the client ended, or nil while it runs.
func (c *Client) Err() error {
	select {
	case <-c.dead:
		return c.deathErr
	default:
		return nil
	}
}

// RoundTrips returns how many requests the client has sent.
func (c *Client) RoundTrips() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// Close ends the session: it closes the agent's stdin, so the agent exits,
// and waits a bounded time for its stdout to end. Calls after Close are
// Invalid.
func (c *Client) Close() error {
	c.closing.Store(true)
	c.w.Close()
	select {
	case <-c.dead:
	case <-time.After(closeGrace):
		c.die(errClosed)
	}
	return nil
}

// die ends the client once: it records why, and closes both streams, which
// makes every request in flight fail at once.
func (c *Client) die(why *providers.Error) {
	c.deathOnce.Do(func() {
		c.deathErr = why
		close(c.dead)
		c.r.Close()
		c.w.Close()
	})
}

// watch is the liveness watchdog: it ends the client when a request has
// been outstanding with nothing arriving for longer than the bound.
func (c *Client) watch() {
	tick := c.liveness / 8
	tick = max(tick, 5*time.Millisecond)
	tick = min(tick, time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.dead:
			return
		case now := <-t.C:
			c.mu.Lock()
			stalled := c.sent > c.answered && now.Sub(c.lastProgress) > c.liveness
			c.mu.Unlock()
			if stalled {
				c.die(&providers.Error{Code: providers.Liveness,
					Err: fmt.Errorf("no answer from the agent for %v", c.liveness)})
				return
			}
		}
	}
}

// frames counts SFTP packets in a byte stream (uint32 length, then that
// many bytes).
type frames struct {
	hdr  [4]byte
	n    int    // header bytes seen
	left uint32 // payload bytes still to come
}

// feed consumes p and returns how many packets began and ended in it.
func (f *frames) feed(p []byte) (began, ended int64) {
	for len(p) > 0 {
		if f.n < 4 {
			if f.n == 0 {
				began++
			}
			k := copy(f.hdr[f.n:], p)
			f.n += k
			p = p[k:]
			if f.n == 4 {
				f.left = binary.BigEndian.Uint32(f.hdr[:])
				if f.left == 0 {
					f.n = 0
					ended++
				}
			}
			continue
		}
		k := min(uint32(len(p)), f.left)
		f.left -= k
		p = p[k:]
		if f.left == 0 {
			f.n = 0
			ended++
		}
	}
	return began, ended
}

type countingReader struct{ c *Client }

func (cr countingReader) Read(p []byte) (int, error) {
	n, err := cr.c.r.Read(p)
	if n > 0 {
		c := cr.c
		c.mu.Lock()
		_, ended := c.recvFrames.feed(p[:n])
		c.answered += ended
		c.lastProgress = time.Now()
		c.mu.Unlock()
	}
	return n, err
}

type countingWriter struct{ c *Client }

func (cw countingWriter) Write(p []byte) (int, error) {
	c := cw.c
	c.mu.Lock()
	began, _ := c.sendFrames.feed(p)
	if began > 0 && c.sent == c.answered {
		c.lastProgress = time.Now() // the clock starts with the first request outstanding
	}
	c.sent += began
	c.mu.Unlock()
	return c.w.Write(p)
}

func (cw countingWriter) Close() error { return cw.c.w.Close() }

// call runs fn, one request or a few, as operation op on name. It returns
// when fn does, or when ctx ends (Timeout or Aborted; fn's requests then
// finish in the background, still under the liveness bound). mutation says
// whether fn changes the box, so that a call cut off by a broken stream is
// OutcomeUnknown instead of TransportLost.
func call[T any](ctx context.Context, c *Client, op, name string, mutation bool, fn func() (T, error)) (T, error) {
	var zero T
	select {
	case <-c.dead:
		return zero, c.lost(op, name, false)
	default:
	}
	if err := ctx.Err(); err != nil {
		return zero, ctxError(op, err).WithBox(c.box).WithPath(name)
	}
	// fn decodes what the agent answered: a panic there (a hostile or
	// broken agent) is this call's error, never the daemon's end.
	caught := func(err error) error { return providers.E(0, op, err).WithBox(c.box).WithPath(name) }
	if ctx.Done() == nil {
		var v T
		var err error
		if perr := guard.Run(func() { v, err = fn() }); perr != nil {
			return zero, caught(perr)
		}
		return v, c.mapErr(op, name, mutation, err)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	guard.Go(func() {
		v, err := fn()
		done <- result{v, err}
	}, func(err error) { done <- result{zero, caught(err)} })
	select {
	case res := <-done:
		return res.v, c.mapErr(op, name, mutation, res.err)
	case <-ctx.Done():
		return zero, ctxError(op, ctx.Err()).WithBox(c.box).WithPath(name)
	}
}

// do is call for operations that answer with a status only.
func do(ctx context.Context, c *Client, op, name string, mutation bool, fn func() error) error {
	_, err := call(ctx, c, op, name, mutation, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

func ctxError(op string, err error) *providers.Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return providers.E(providers.Timeout, op, err)
	}
	return providers.E(providers.Aborted, op, err)
}

// mapErr turns what pkg/sftp returned into boxfs's error: the box's errno
// from the status code, or the death of the stream.
func (c *Client) mapErr(op, name string, mutation bool, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if errors.Is(err, errBadAnswer) {
		c.die(&providers.Error{Code: providers.TransportLost, Err: err})
		return c.lost(op, name, mutation)
	}
	var be *providers.Error
	if errors.As(err, &be) {
		return err
	}
	var se *sftp.StatusError
	if errors.As(err, &se) {
		if n, ok := errnoFromStatus(se.Code); ok {
			return providers.PathError(op, c.box, name, hostErrno(n))
		}
		switch se.FxCode() {
		case sftp.ErrSSHFxEOF:
			return io.EOF
		case sftp.ErrSSHFxNoSuchFile:
			return providers.PathError(op, c.box, name, syscall.ENOENT)
		case sftp.ErrSSHFxPermissionDenied:
			return providers.PathError(op, c.box, name, syscall.EACCES)
		case sftp.ErrSSHFxOpUnsupported:
			return &providers.Error{Code: providers.Unsupported, Op: op, Box: c.box, Path: name, Err: err}
		case sftp.ErrSSHFxBadMessage:
			return &providers.Error{Code: providers.Invalid, Op: op, Box: c.box, Path: name, Err: err}
		case sftp.ErrSSHFxFailure:
			return &providers.Error{Code: providers.Unknown, Op: op, Box: c.box, Path: name, Err: err}
		}
	}
	switch {
	case errors.Is(err, os.ErrClosed):
		return &providers.Error{Code: providers.Invalid, Op: op, Box: c.box, Path: name, Err: err}
	case errors.Is(err, os.ErrNotExist):
		return providers.PathError(op, c.box, name, syscall.ENOENT)
	case errors.Is(err, os.ErrPermission):
		return providers.PathError(op, c.box, name, syscall.EACCES)
	}
	// Anything else is the stream failing: connection lost, a broken
	// pipe, a malformed packet.
	c.die(&providers.Error{Code: providers.TransportLost, Err: err})
	return c.lost(op, name, mutation)
}

// lost is the error of a call the dead stream ended. A mutation that was
// sent may or may not have happened: OutcomeUnknown, wrapping the death.
func (c *Client) lost(op, name string, mutation bool) error {
	<-c.dead
	c.reported.Store(true)
	d := c.deathErr
	if mutation && d.Code != providers.Invalid {
		return &providers.Error{Code: providers.OutcomeUnknown, Op: op, Box: c.box, Path: name,
			Err: &providers.Error{Code: d.Code, Err: d.Err}}
	}
	return &providers.Error{Code: d.Code, Op: op, Box: c.box, Path: name, Err: d.Err}
}

// clean checks a box path: absolute, and not under ReservedDir.
func clean(op, name string) (string, error) {
	if !path.IsAbs(name) {
		return "", providers.Errorf(providers.Invalid, op, "box path %q is not absolute", name)
	}
	p := path.Clean(name)
	if p == ReservedDir || strings.HasPrefix(p, ReservedDir+"/") {
		return "", providers.Errorf(providers.Unsupported, op, "%s is reserved by the agent channel", ReservedDir).WithPath(p)
	}
	return p, nil
}

// withBox adds the box to an error clean made.
func (c *Client) withBox(op, name string, err error) error {
	var be *providers.Error
	if errors.As(err, &be) {
		be.Box = c.box
		return be
	}
	return err
}

// infoOf converts an attribute block; the agent always sends extStatNS.
func infoOf(name string, fi os.FileInfo) (providers.FileInfo, error) {
	st, _ := fi.Sys().(*sftp.FileStat)
	if st != nil {
		if d, ok := extOf(st, extStatNS); ok {
			s, err := unmarshalStatNS(d)
			if err != nil {
				return providers.FileInfo{}, fmt.Errorf("%w: %v", errBadAnswer, err)
			}
			fi := s.info(name)
			fi.Target, _ = extOf(st, extTarget)
			return fi, nil
		}
	}
	// Not our agent: what SFTP v3 carries (whole seconds).
	out := providers.FileInfo{Name: name, Mode: fi.Mode(), Size: fi.Size(), Mtime: fi.ModTime()}
	if st != nil {
		out.UID, out.GID = st.UID, st.GID
		out.Atime = st.AccessTime()
	}
	return out, nil
}

func extOf(st *sftp.FileStat, name string) (string, bool) {
	for _, e := range st.Extended {
		if e.ExtType == name {
			return e.ExtData, true
		}
	}
	return "", false
}

// statExt performs a STAT-borne operation and returns its attribute block.
func (c *Client) statExt(op string, q url.Values) (*sftp.FileStat, error) {
	fi, err := c.sc.Stat(syntheticPath(op, q))
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*sftp.FileStat)
	if !ok {
		return nil, errBadAnswer
	}
	return st, nil
}

// setExt performs a SETSTAT-borne operation.
func (c *Client) setExt(op string, q url.Values, ext ...sftp.StatExtended) error {
	return c.sc.SetExtendedData(syntheticPath(op, q), ext)
}

// errBadAnswer marks an answer the agent should never give: the stream is
// out of step, and the client ends it.
var errBadAnswer = errors.New("malformed answer from the agent")

// Stat returns name's attributes, following symlinks.
func (c *Client) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "agent.Stat"
	p, err := clean(op, name)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, name, err)
	}
	return call(ctx, c, op, p, false, func() (providers.FileInfo, error) {
		fi, err := c.sc.Stat(p)
		if err != nil {
			return providers.FileInfo{}, err
		}
		return infoOf(path.Base(p), fi)
	})
}

// Lstat returns name's attributes, not following a symlink; a symlink's
// Target is set.
func (c *Client) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "agent.Lstat"
	p, err := clean(op, name)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, name, err)
	}
	return call(ctx, c, op, p, false, func() (providers.FileInfo, error) {
		fi, err := c.sc.Lstat(p)
		if err != nil {
			return providers.FileInfo{}, err
		}
		return infoOf(path.Base(p), fi)
	})
}

// ReadDir lists the directory name (following it if a symlink), sorted by
// name, each entry with full attributes and symlink targets: one round
// trip for a directory whose listing fits inlineMax.
func (c *Client) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	const op = "agent.ReadDir"
	p, err := clean(op, name)
	if err != nil {
		return nil, c.withBox(op, name, err)
	}
	return call(ctx, c, op, p, false, func() ([]providers.FileInfo, error) {
		return c.listing(opList, url.Values{"dir": {p}})
	})
}

// ReadDirMax is ReadDir for a directory of at most max entries: a larger
// one is TooLarge (EFBIG), and the agent sends none of it.
func (c *Client) ReadDirMax(ctx context.Context, name string, max int) ([]providers.FileInfo, error) {
	const op = "agent.ReadDir"
	p, err := clean(op, name)
	if err != nil {
		return nil, c.withBox(op, name, err)
	}
	if max <= 0 {
		return nil, providers.Errorf(providers.Invalid, op, "a listing's cap must be positive, not %d", max)
	}
	return call(ctx, c, op, p, false, func() ([]providers.FileInfo, error) {
		return c.listing(opList, url.Values{"dir": {p}, "max": {strconv.Itoa(max)}})
	})
}

// Walk lists the whole tree under root in one round trip where the
// listing fits inlineMax (about 1,500 entries), else in a few; see
// providers.Walker for the order.
func (c *Client) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	const op = "agent.Walk"
	p, err := clean(op, root)
	if err != nil {
		return nil, c.withBox(op, root, err)
	}
	return call(ctx, c, op, p, false, func() ([]providers.FileInfo, error) {
		return c.listing(opWalk, url.Values{"root": {p}})
	})
}

// WalkMax is Walk for a tree of at most max entries: a larger one is
// TooLarge (EFBIG), and is not listed whole.
func (c *Client) WalkMax(ctx context.Context, root string, max int) ([]providers.FileInfo, error) {
	const op = "agent.Walk"
	p, err := clean(op, root)
	if err != nil {
		return nil, c.withBox(op, root, err)
	}
	if max <= 0 {
		return nil, providers.Errorf(providers.Invalid, op, "a walk's cap must be positive, not %d", max)
	}
	return call(ctx, c, op, p, false, func() ([]providers.FileInfo, error) {
		return c.listing(opWalk, url.Values{"root": {p}, "max": {strconv.Itoa(max)}})
	})
}

func (c *Client) listing(op string, q url.Values) ([]providers.FileInfo, error) {
	st, err := c.statExt(op, q)
	if err != nil {
		return nil, err
	}
	var b []byte
	if d, ok := extOf(st, extData); ok {
		b = []byte(d)
	} else if d, ok := extOf(st, extSize); ok {
		size, err := strconv.Atoi(d)
		if err != nil {
			return nil, errBadAnswer
		}
		if b, err = c.readAll(syntheticPath(op, q), size); err != nil {
			return nil, err
		}
	} else {
		return nil, errBadAnswer
	}
	fis, err := parseWalk(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	return fis, nil
}

// readAll reads the file p through OPEN and concurrent READs, up to the
// client's listing cap (more is TooLarge). sizeHint, the agent's word,
// sizes the first read within that cap.
func (c *Client) readAll(p string, sizeHint int) ([]byte, error) {
	f, err := c.sc.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	limit := c.maxListing
	buf := make([]byte, 0, min(max(sizeHint+1, 1<<20), limit+1))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, providers.Errorf(providers.TooLarge, "agent.readAll", "the agent's answer is over %d bytes", limit)
			}
			grow := min(cap(buf), limit+1-len(buf))
			buf = append(buf, make([]byte, grow)...)[:len(buf)]
		}
		n, err := f.ReadAt(buf[len(buf):cap(buf)], int64(len(buf)))
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if len(buf) > limit {
				return nil, providers.Errorf(providers.TooLarge, "agent.readAll", "the agent's answer is over %d bytes", limit)
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ReadFile streams the whole file. A file up to inlineMax comes in one
// round trip; a larger one streams through concurrent READs, and ends
// with the context's error if ctx ends first.
func (c *Client) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	const op = "agent.ReadFile"
	p, err := clean(op, name)
	if err != nil {
		return nil, c.withBox(op, name, err)
	}
	type result struct {
		first []byte
		f     *sftp.File
	}
	res, err := call(ctx, c, op, p, false, func() (result, error) {
		first, st, err := c.pread(p, 0, inlineMax)
		if err != nil || len(first) < inlineMax {
			return result{first: first}, err
		}
		// Larger: the rest comes through a handle. If the file the
		// handle is on is not the one read (it was replaced meanwhile),
		// the stream starts again at 0 on the handle.
		f, err := c.sc.Open(p)
		if err != nil {
			return result{}, err
		}
		if ctx.Err() != nil { // the caller is gone: do not leave the handle open
			go f.Close()
			return result{}, ctx.Err()
		}
		fi, err := f.Stat()
		if err == nil {
			var now providers.FileInfo
			now, err = infoOf(p, fi)
			if err == nil && (now.Ino != st.Ino || now.Dev != st.Dev || now.Mtime.UnixNano() != st.Mtime || now.Ctime.UnixNano() != st.Ctime) {
				first = nil
			}
		}
		if err != nil {
			go f.Close()
			return result{}, err
		}
		return result{first, f}, nil
	})
	if err != nil {
		return nil, err
	}
	if res.f == nil {
		return io.NopCloser(bytes.NewReader(res.first)), nil
	}
	s := &readStream{c: c, op: op, name: p, pending: res.first, off: int64(len(res.first)), f: res.f}
	s.stop = context.AfterFunc(ctx, func() {
		err := ctxError(op, ctx.Err()).WithBox(c.box).WithPath(p)
		s.abort.Store(&err)
	})
	return s, nil
}

// pread reads up to n <= inlineMax bytes of p at off in one round trip; it
// also returns the attributes of the file read.
func (c *Client) pread(p string, off int64, n int) ([]byte, statNS, error) {
	st, err := c.statExt(opRead, url.Values{"path": {p}, "off": {strconv.FormatInt(off, 10)}, "len": {strconv.Itoa(n)}})
	if err != nil {
		return nil, statNS{}, err
	}
	d, ok := extOf(st, extData)
	sd, ok2 := extOf(st, extStatNS)
	if !ok || !ok2 || len(d) > n {
		return nil, statNS{}, errBadAnswer
	}
	sn, err := unmarshalStatNS(sd)
	if err != nil {
		return nil, statNS{}, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	return []byte(d), sn, nil
}

// ReadSmall reads the small regular files names of dir whole, in one round
// trip (at most smallMax bytes of data, whatever max says).
func (c *Client) ReadSmall(ctx context.Context, dir string, names []string, max int) ([]providers.SmallFile, error) {
	const op = "agent.ReadSmall"
	p, err := clean(op, dir)
	if err != nil {
		return nil, c.withBox(op, dir, err)
	}
	q := url.Values{"dir": {p}, "max": {strconv.Itoa(max)}, "n": names}
	return call(ctx, c, op, p, false, func() ([]providers.SmallFile, error) {
		st, err := c.statExt(opReadSmall, q)
		if err != nil {
			return nil, err
		}
		d, ok := extOf(st, extData)
		if !ok {
			return nil, errBadAnswer
		}
		recs, err := parseSmall([]byte(d))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errBadAnswer, err)
		}
		out := make([]providers.SmallFile, len(recs))
		for i, r := range recs {
			out[i] = providers.SmallFile{Info: r.st.info(r.name), Data: r.data}
		}
		return out, nil
	})
}

// readStream is the rest of a file larger than inlineMax.
type readStream struct {
	c       *Client
	op      string
	name    string
	pending []byte
	off     int64 // where the next read starts
	f       *sftp.File
	err     error
	stop    func() bool
	abort   atomic.Pointer[*providers.Error]
	bufs    [2][]byte      // the chunk being read out, and the one being fetched
	next    chan chunkRead // the fetch under way, if any
	turn    int            // which of bufs the next fetch fills
}

// chunkRead is one fetch's answer.
type chunkRead struct {
	b   []byte
	err error
}

// Stream reads fetch streamChunk at a time (streamChunk/maxPacket
// concurrent READs), the next chunk while the last is read out: a round
// trip of latency costs no pause in the stream, and 2*streamChunk is the
// most in memory.
const streamChunk = 32 * maxPacket

// writeConcurrency is how many WRITEs of maxPacket a stream keeps in
// flight: 8 MiB, which a round trip of latency does not idle.
const writeConcurrency = 64

func (s *readStream) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		// A cancelled read ends with its error, even where the rest of
		// the file was fetched already.
		if e := s.abort.Load(); e != nil && (s.err == nil || s.err == io.EOF) {
			s.err = *e
			return 0, s.err
		}
		if s.err != nil {
			return 0, s.err
		}
		s.fill()
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// fill takes the chunk under way (starting it if none is) as what Read
// hands out, and starts the next one unless the file ended.
func (s *readStream) fill() {
	if s.next == nil {
		s.fetch()
	}
	res := <-s.next
	s.next = nil
	s.pending = res.b
	if res.err == nil {
		s.fetch() // a full chunk: there may be more
		return
	}
	s.err = res.err
	go s.f.Close()
	s.f = nil
}

// fetch starts reading the chunk at s.off into the free buffer.
func (s *readStream) fetch() {
	if s.bufs[s.turn] == nil {
		s.bufs[s.turn] = make([]byte, streamChunk)
	}
	buf, off, f := s.bufs[s.turn], s.off, s.f
	s.turn ^= 1
	s.off += int64(len(buf))
	ch := make(chan chunkRead, 1)
	s.next = ch
	go func() {
		n, err := call(context.Background(), s.c, s.op, s.name, false, func() (int, error) {
			return f.ReadAt(buf, off)
		})
		ch <- chunkRead{buf[:n], err}
	}()
}

func (s *readStream) Close() error {
	s.stop()
	if s.f != nil {
		go s.f.Close()
		s.f = nil
	}
	if s.err == nil {
		s.err = os.ErrClosed
	}
	return nil
}

// ReadAt reads up to len(p) bytes at off; io.EOF when fewer remain.
func (c *Client) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "agent.ReadAt"
	pp, err := clean(op, name)
	if err != nil {
		return 0, c.withBox(op, name, err)
	}
	if off < 0 {
		return 0, providers.PathError(op, c.box, pp, syscall.EINVAL)
	}
	if len(p) <= inlineMax {
		d, err := call(ctx, c, op, pp, false, func() ([]byte, error) {
			d, _, err := c.pread(pp, off, len(p))
			return d, err
		})
		if err != nil {
			return 0, err
		}
		n := copy(p, d)
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	// The answer lands in p, so a call cut off by ctx must not keep
	// writing into it: read into a buffer of our own.
	type result struct {
		b []byte
		n int
	}
	res, err := call(ctx, c, op, pp, false, func() (result, error) {
		f, err := c.sc.Open(pp)
		if err != nil {
			return result{}, err
		}
		defer func() { go f.Close() }()
		b := make([]byte, len(p))
		n, err := f.ReadAt(b, off)
		return result{b, n}, err
	})
	n := copy(p, res.b[:res.n])
	if err != nil {
		return n, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

var inlinePool = sync.Pool{New: func() any { b := make([]byte, inlineMax+1); return &b }}

// WriteFile replaces name with r's bytes atomically: the agent writes a
// temporary file in name's directory and renames it over name, keeping an
// existing file's mode (and owner, where it may); perm (under the box's
// umask) applies to a new file. Up to inlineMax bytes go in one round
// trip. If r fails or ctx ends before the data is all sent, name is left
// as it was.
func (c *Client) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	const op = "agent.WriteFile"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	_, err = c.writeFile(ctx, op, p, r, url.Values{"perm": {shell.Octal(perm)}})
	return err
}

// WriteFileStat is WriteFile with o's attributes set on the new content
// before the rename, answered with the file's attributes: one round trip
// for a file up to inlineMax.
func (c *Client) WriteFileStat(ctx context.Context, name string, r io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	const op = "agent.WriteFile"
	p, err := clean(op, name)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, name, err)
	}
	st, err := c.writeFile(ctx, op, p, r, writeQuery(p, o))
	if err != nil {
		return providers.FileInfo{}, err
	}
	return c.statted(ctx, p, st)
}

// Commit replaces name with tmp, a ".boxfs-tmp-" file beside it that the
// box's bulk path wrote, giving it o's attributes as WriteFileStat does,
// and answers its attributes: one round trip. tmp is removed on failure.
func (c *Client) Commit(ctx context.Context, name, tmp string, o providers.WriteOptions) (providers.FileInfo, error) {
	const op = "agent.Commit"
	p, err := clean(op, name)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, name, err)
	}
	t, err := clean(op, tmp)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, tmp, err)
	}
	q := writeQuery(p, o)
	q.Set("tmp", t)
	st, err := call(ctx, c, op, p, true, func() (*statNS, error) { return answered(c.setExt(opCommit, q)) })
	if err != nil {
		return providers.FileInfo{}, err
	}
	return c.statted(ctx, p, st)
}

// writeFile replaces p with r's bytes, atomically in the box; q holds the
// write's options (perm at least). It returns the attributes the agent
// answered with, if q asked for them and it had them.
func (c *Client) writeFile(ctx context.Context, op, p string, r io.Reader, q url.Values) (*statNS, error) {
	bp := inlinePool.Get().(*[]byte)
	defer inlinePool.Put(bp)
	buf := *bp
	n, rerr := io.ReadFull(r, buf)
	q.Set("path", p)
	q.Set("id", providers.NewID(8))
	switch rerr {
	case io.EOF, io.ErrUnexpectedEOF:
		data := string(buf[:n])
		return call(ctx, c, op, p, true, func() (*statNS, error) {
			return answered(c.setExt(opWrite, q, sftp.StatExtended{ExtType: extData, ExtData: data}))
		})
	case nil:
	default:
		return nil, providers.E(0, op, rerr).WithBox(c.box).WithPath(p)
	}
	// Larger than inlineMax: stream it.
	head := bytes.Clone(buf[:n])
	src := &srcReader{r: io.MultiReader(bytes.NewReader(head), r), ctxErr: ctx.Err}
	return call(ctx, c, op, p, true, func() (*statNS, error) {
		f, err := c.sc.OpenFile(syntheticPath(opAtomic, q), os.O_WRONLY|os.O_CREATE)
		if err != nil {
			return nil, err
		}
		_, err = f.ReadFromWithConcurrency(src, writeConcurrency)
		if err == nil && src.err != nil {
			err = src.err
		}
		if err != nil {
			// Drop the temporary file: it is not the whole data.
			c.sc.SetExtendedData(syntheticPath(opAtomic, url.Values{"id": q["id"]}),
				[]sftp.StatExtended{{ExtType: extAbort}})
			f.Close()
			if src.err != nil {
				if ce := ctx.Err(); ce != nil {
					return nil, ctxError(op, ce).WithBox(c.box).WithPath(p)
				}
				return nil, providers.E(0, op, src.err).WithBox(c.box).WithPath(p)
			}
			return nil, err
		}
		return answered(f.Close())
	})
}

// answered reads a mutation's answer: a statStatusCode answer is its
// success with the attributes it left; anything else stays as it is.
func answered(err error) (*statNS, error) {
	s, ok, berr := statFromStatus(err)
	if !ok {
		return nil, err
	}
	if berr != nil {
		return nil, berr
	}
	return &s, nil
}

// answeredAll is answered for the answers that carry the attributes of
// several paths: none when the success came without them.
func answeredAll(err error) ([]statNS, error) {
	ss, ok, berr := statsFromStatus(err)
	if !ok {
		return nil, err
	}
	if berr != nil {
		return nil, berr
	}
	return ss, nil
}

// statted is the attributes of p a mutation answered with, or, when the
// agent had none to give (the file changed again at once), an Lstat.
func (c *Client) statted(ctx context.Context, p string, st *statNS) (providers.FileInfo, error) {
	if st == nil {
		return c.Lstat(ctx, p)
	}
	return st.info(path.Base(p)), nil
}

// srcReader is the caller's reader: it remembers the reader's own error,
// and stops when the call's context ends, so that a WriteFile cut off
// never commits.
type srcReader struct {
	r      io.Reader
	ctxErr func() error
	err    error
}

func (s *srcReader) Read(p []byte) (int, error) {
	if err := s.ctxErr(); err != nil {
		s.err = err
		return 0, err
	}
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// WriteAt writes p at off into the existing file name.
func (c *Client) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "agent.WriteAt"
	pp, err := clean(op, name)
	if err != nil {
		return 0, c.withBox(op, name, err)
	}
	if off < 0 {
		return 0, providers.PathError(op, c.box, pp, syscall.EINVAL)
	}
	if len(p) <= inlineMax {
		data := string(p)
		err := do(ctx, c, op, pp, true, func() error {
			return c.setExt(opPwrite, url.Values{"path": {pp}, "off": {strconv.FormatInt(off, 10)}},
				sftp.StatExtended{ExtType: extData, ExtData: data})
		})
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	data := bytes.Clone(p)
	return call(ctx, c, op, pp, true, func() (int, error) {
		f, err := c.sc.OpenFile(pp, os.O_WRONLY)
		if err != nil {
			return 0, err
		}
		n, err := f.WriteAt(data, off)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return n, err
	})
}

// Create makes an empty regular file of mode perm (under the box's umask);
// with exclusive an existing name is EEXIST, else an existing file is
// truncated.
func (c *Client) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	const op = "agent.Create"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	q := url.Values{"path": {p}, "perm": {shell.Octal(perm)}}
	if exclusive {
		q.Set("excl", "1")
	}
	return do(ctx, c, op, p, true, func() error { return c.setExt(opCreate, q) })
}

// CreateStat is Create answered with the new file's attributes: one round
// trip.
func (c *Client) CreateStat(ctx context.Context, name string, perm providers.FileMode, exclusive bool) (providers.FileInfo, error) {
	const op = "agent.Create"
	p, err := clean(op, name)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, name, err)
	}
	q := url.Values{"path": {p}, "perm": {shell.Octal(perm)}, "stat": {"1"}}
	if exclusive {
		q.Set("excl", "1")
	}
	st, err := call(ctx, c, op, p, true, func() (*statNS, error) { return answered(c.setExt(opCreate, q)) })
	if err != nil {
		return providers.FileInfo{}, err
	}
	return c.statted(ctx, p, st)
}

// MkdirStat is Mkdir answered with the new directory's attributes: one
// round trip.
func (c *Client) MkdirStat(ctx context.Context, name string, perm providers.FileMode) (providers.FileInfo, error) {
	const op = "agent.Mkdir"
	p, err := clean(op, name)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, name, err)
	}
	q := url.Values{"path": {p}, "perm": {shell.Octal(perm)}, "stat": {"1"}}
	st, err := call(ctx, c, op, p, true, func() (*statNS, error) { return answered(c.setExt(opMkdir, q)) })
	if err != nil {
		return providers.FileInfo{}, err
	}
	return c.statted(ctx, p, st)
}

// Mkdir makes a directory of mode perm (under the box's umask).
func (c *Client) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	const op = "agent.Mkdir"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	return do(ctx, c, op, p, true, func() error {
		return c.setExt(opMkdir, url.Values{"path": {p}, "perm": {shell.Octal(perm)}})
	})
}

// Remove unlinks name; a directory is EISDIR.
func (c *Client) Remove(ctx context.Context, name string) error {
	const op = "agent.Remove"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	return do(ctx, c, op, p, true, func() error { return c.setExt(opUnlink, url.Values{"path": {p}}) })
}

// RemoveStat is Remove answered, in one round trip, with the attributes
// of the file name named as they are after the unlink: the link count
// and change time its other names show (Nlink 0 when none is left). When
// the agent removed it but could not say (the fstat after the unlink
// failed), fi is empty but for its name: no inode matches it. An agent
// without the operation answers Unsupported, having removed nothing.
func (c *Client) RemoveStat(ctx context.Context, name string) (fi providers.FileInfo, err error) {
	const op = "agent.Remove"
	p, err := clean(op, name)
	if err != nil {
		return fi, c.withBox(op, name, err)
	}
	q := url.Values{"path": {p}}
	ss, err := call(ctx, c, op, p, true, func() ([]statNS, error) {
		return answeredAll(c.laterOp(op, p, c.setExt(opUnlinkStat, q)))
	})
	if err != nil {
		return fi, err
	}
	if len(ss) == 0 {
		return providers.FileInfo{Name: path.Base(p)}, nil
	}
	return ss[0].info(path.Base(p)), nil
}

// laterOp is err, the answer to an operation agents before it lack: such
// an agent answers a plain failure (no errno, which every failure of the
// operation itself carries), taken as Unsupported: it changed nothing.
func (c *Client) laterOp(op, p string, err error) error {
	var se *sftp.StatusError
	if errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxFailure {
		return &providers.Error{Code: providers.Unsupported, Op: op, Box: c.box, Path: p, Err: err}
	}
	return err
}

// Rmdir removes the empty directory name.
func (c *Client) Rmdir(ctx context.Context, name string) error {
	const op = "agent.Rmdir"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	return do(ctx, c, op, p, true, func() error { return c.sc.RemoveDirectory(p) })
}

// Rename moves oldname to newname, replacing newname (rename(2)).
func (c *Client) Rename(ctx context.Context, oldname, newname string) error {
	const op = "agent.Rename"
	o, err := clean(op, oldname)
	if err != nil {
		return c.withBox(op, oldname, err)
	}
	n, err := clean(op, newname)
	if err != nil {
		return c.withBox(op, newname, err)
	}
	return do(ctx, c, op, o, true, func() error { return c.sc.PosixRename(o, n) })
}

// RenameStat is Rename answered with the attributes it left, in one
// round trip: newname's, and those of the directories holding newname
// (dirs[0]) and oldname (dirs[1], when another). When the agent had none to give
// (the new name changed again at once), fi is an Lstat's and dirs is
// empty.
func (c *Client) RenameStat(ctx context.Context, oldname, newname string) (fi providers.FileInfo, dirs []providers.FileInfo, err error) {
	const op = "agent.Rename"
	o, err := clean(op, oldname)
	if err != nil {
		return fi, nil, c.withBox(op, oldname, err)
	}
	n, err := clean(op, newname)
	if err != nil {
		return fi, nil, c.withBox(op, newname, err)
	}
	q := url.Values{"path": {o}, "to": {n}, "stat": {"1"}}
	ss, err := call(ctx, c, op, o, true, func() ([]statNS, error) { return answeredAll(c.setExt(opRename, q)) })
	if err != nil {
		return fi, nil, err
	}
	if len(ss) == 0 {
		fi, err = c.Lstat(ctx, n)
		return fi, nil, err
	}
	fi = ss[0].info(path.Base(n))
	dirPaths := []string{path.Dir(n)}
	if d := path.Dir(o); d != dirPaths[0] {
		dirPaths = append(dirPaths, d)
	}
	for i, s := range ss[1:] {
		if i == len(dirPaths) {
			break
		}
		dirs = append(dirs, s.info(path.Base(dirPaths[i])))
	}
	return fi, dirs, nil
}

// Chmod sets name's permission bits, setuid, setgid and sticky included.
func (c *Client) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	const op = "agent.Chmod"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	return do(ctx, c, op, p, true, func() error { return c.sc.Chmod(p, mode) })
}

// ChmodStat is Chmod answered, in one round trip, with the attributes it
// left (its change time among them). An agent without the operation
// answers Unsupported, having changed nothing.
func (c *Client) ChmodStat(ctx context.Context, name string, mode providers.FileMode) (providers.FileInfo, error) {
	return c.setattrStat(ctx, "agent.Chmod", name, url.Values{"mode": {shell.Octal(mode)}})
}

// ChownStat is Chown answered with the attributes it left, as ChmodStat.
func (c *Client) ChownStat(ctx context.Context, name string, uid, gid int) (providers.FileInfo, error) {
	const op = "agent.Chown"
	if uid < -1 || gid < -1 {
		return providers.FileInfo{}, providers.PathError(op, c.box, name, syscall.EINVAL)
	}
	return c.setattrStat(ctx, op, name, url.Values{"uid": {strconv.Itoa(uid)}, "gid": {strconv.Itoa(gid)}})
}

// UtimesStat is Utimes answered with the attributes it left, as
// ChmodStat.
func (c *Client) UtimesStat(ctx context.Context, name string, atime, mtime time.Time) (providers.FileInfo, error) {
	q := url.Values{}
	if !atime.IsZero() {
		q.Set("atime", strconv.FormatInt(atime.UnixNano(), 10))
	}
	if !mtime.IsZero() {
		q.Set("mtime", strconv.FormatInt(mtime.UnixNano(), 10))
	}
	return c.setattrStat(ctx, "agent.Utimes", name, q)
}

// setattrStat sends opSetattr of name with q's attributes and returns
// those it left; when the agent had none to give (the name changed again
// at once), or name is a symlink, an Lstat's.
func (c *Client) setattrStat(ctx context.Context, op, name string, q url.Values) (providers.FileInfo, error) {
	p, err := clean(op, name)
	if err != nil {
		return providers.FileInfo{}, c.withBox(op, name, err)
	}
	q.Set("path", p)
	q.Set("stat", "1")
	st, err := call(ctx, c, op, p, true, func() (*statNS, error) {
		return answered(c.laterOp(op, p, c.setExt(opSetattr, q)))
	})
	if err != nil {
		return providers.FileInfo{}, err
	}
	if st != nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		st = nil // a symlink's answer lacks its target, which Lstat carries
	}
	return c.statted(ctx, p, st)
}

// Chown sets name's owner and group; -1 leaves one unchanged.
func (c *Client) Chown(ctx context.Context, name string, uid, gid int) error {
	const op = "agent.Chown"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	return do(ctx, c, op, p, true, func() error { return c.sc.Chown(p, uid, gid) })
}

// Utimes sets name's access and modification times to the nanosecond; a
// zero time leaves that one unchanged.
func (c *Client) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	const op = "agent.Utimes"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	ext := []sftp.StatExtended{{ExtType: extUtimesNS, ExtData: marshalUtimes(atime, mtime)}}
	return do(ctx, c, op, p, true, func() error { return c.sc.SetExtendedData(p, ext) })
}

// Lchown sets the owner of name itself, never following a symlink (a
// dangling link works); -1 leaves one unchanged. One round trip.
func (c *Client) Lchown(ctx context.Context, name string, uid, gid int) error {
	const op = "agent.Lchown"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	if uid < -1 || gid < -1 {
		return providers.PathError(op, c.box, p, syscall.EINVAL)
	}
	q := url.Values{"path": {p}, "uid": {strconv.Itoa(uid)}, "gid": {strconv.Itoa(gid)}}
	return do(ctx, c, op, p, true, func() error { return c.setExt(opLchown, q) })
}

// Lutimes sets the access and modification times of name itself to the
// nanosecond, never following a symlink (a dangling link works); a zero
// time leaves that one unchanged. One round trip.
func (c *Client) Lutimes(ctx context.Context, name string, atime, mtime time.Time) error {
	const op = "agent.Lutimes"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	q := url.Values{"path": {p}}
	if !atime.IsZero() {
		q.Set("atime", strconv.FormatInt(atime.UnixNano(), 10))
	}
	if !mtime.IsZero() {
		q.Set("mtime", strconv.FormatInt(mtime.UnixNano(), 10))
	}
	return do(ctx, c, op, p, true, func() error { return c.setExt(opLutimes, q) })
}

// Truncate sets name's size.
func (c *Client) Truncate(ctx context.Context, name string, size int64) error {
	const op = "agent.Truncate"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	if size < 0 {
		return providers.PathError(op, c.box, p, syscall.EINVAL)
	}
	return do(ctx, c, op, p, true, func() error { return c.sc.Truncate(p, size) })
}

// Symlink makes name a symlink to target, which is stored byte for byte.
func (c *Client) Symlink(ctx context.Context, target, name string) error {
	const op = "agent.Symlink"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	return do(ctx, c, op, p, true, func() error { return c.sc.Symlink(target, p) })
}

// Readlink returns the target of the symlink name.
func (c *Client) Readlink(ctx context.Context, name string) (string, error) {
	const op = "agent.Readlink"
	p, err := clean(op, name)
	if err != nil {
		return "", c.withBox(op, name, err)
	}
	return call(ctx, c, op, p, false, func() (string, error) { return c.sc.ReadLink(p) })
}

// Link makes newname a hard link to oldname (a symlink itself, not its
// target).
func (c *Client) Link(ctx context.Context, oldname, newname string) error {
	const op = "agent.Link"
	o, err := clean(op, oldname)
	if err != nil {
		return c.withBox(op, oldname, err)
	}
	n, err := clean(op, newname)
	if err != nil {
		return c.withBox(op, newname, err)
	}
	return do(ctx, c, op, o, true, func() error { return c.sc.Link(o, n) })
}

// Statfs returns the capacity of the file system holding name.
func (c *Client) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	const op = "agent.Statfs"
	p, err := clean(op, name)
	if err != nil {
		return providers.StatFS{}, c.withBox(op, name, err)
	}
	return call(ctx, c, op, p, false, func() (providers.StatFS, error) {
		v, err := c.sc.StatVFS(p)
		if err != nil {
			return providers.StatFS{}, err
		}
		return providers.StatFS{
			Bsize: uint32(v.Bsize), Blocks: v.Blocks, Bfree: v.Bfree, Bavail: v.Bavail,
			Files: v.Files, Ffree: v.Ffree, NameLen: uint32(v.Namemax),
		}, nil
	})
}

// Fsync flushes name (a file or a directory) to stable storage in the box.
func (c *Client) Fsync(ctx context.Context, name string) error {
	const op = "agent.Fsync"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	return do(ctx, c, op, p, false, func() error { return c.setExt(opFsync, url.Values{"path": {p}}) })
}

// SHA256 returns the SHA-256 of name's content, computed in the box, in
// one round trip.
func (c *Client) SHA256(ctx context.Context, name string) ([32]byte, error) {
	const op = "agent.SHA256"
	p, err := clean(op, name)
	if err != nil {
		return [32]byte{}, c.withBox(op, name, err)
	}
	return call(ctx, c, op, p, false, func() ([32]byte, error) {
		var sum [32]byte
		st, err := c.statExt(opSHA256, url.Values{"path": {p}})
		if err != nil {
			return sum, err
		}
		d, ok := extOf(st, extSHA256)
		if !ok || len(d) != len(sum) {
			return sum, errBadAnswer
		}
		copy(sum[:], d)
		return sum, nil
	})
}
