package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// handshakePeer is the agent's side of a handshake, run in this process
// over pipes standing in for the exec's stdin and stdout.
type handshakePeer struct {
	toAgent   *io.PipeWriter // the host writes the agent's stdin here
	fromAgent *io.PipeReader // and reads its stdout here
	agentIn   *bufio.Reader
	agentOut  *io.PipeWriter
	result    chan peerResult
}

type peerResult struct {
	r   io.Reader
	w   io.WriteCloser
	err error
}

func startPeer(t *testing.T) *handshakePeer {
	t.Helper()
	ar, hw := io.Pipe()
	hr, aw := io.Pipe()
	p := &handshakePeer{toAgent: hw, fromAgent: hr, agentIn: bufio.NewReader(ar), agentOut: aw, result: make(chan peerResult, 1)}
	go func() {
		r, w, err := negotiateDirect(p.agentIn, aw)
		p.result <- peerResult{r, w, err}
	}()
	t.Cleanup(func() {
		hw.Close()
		aw.Close()
		hr.Close()
		ar.Close()
	})
	return p
}

func (p *handshakePeer) wait(t *testing.T) peerResult {
	t.Helper()
	select {
	case res := <-p.result:
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's side of the handshake did not end")
		return peerResult{}
	}
}

// serveOn runs the agent's file server on r, w and returns a client for it
// over cr, cw, and checks that it answers a Stat.
func serveOn(t *testing.T, r io.Reader, w io.WriteCloser, cr io.ReadCloser, cw io.WriteCloser) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(r, w)
		w.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(ctx, cr, cw, ClientOptions{Box: "direct-test"})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := c.Stat(ctx, filepath.Join(dir, "f"))
	if err != nil || fi.Size != 5 {
		t.Fatalf("Stat over the channel: %+v, %v", fi, err)
	}
	c.Close()
	<-done
}

// recordingDial dials as the channel does and remembers the address the
// agent answered.
func recordingDial(addr *string) directDialer {
	return func(ctx context.Context, rt providers.DirectRoute, a string) (net.Conn, error) {
		*addr = a
		return dialDirect(ctx, rt, a)
	}
}

func TestDirectHandshake(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route providers.DirectRoute
	}{
		{"network=tcp", providers.DirectRoute{Network: providers.DirectTCP, Host: "127.0.0.1", Why: "loopback"}},
		{"network=unix", providers.DirectRoute{Network: providers.DirectUnix, Root: "/", Why: "host root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPeer(t)
			var addr string
			ctx := context.Background()
			conn, rt, why, err := directHandshake(ctx, []providers.DirectRoute{tc.route}, t.TempDir(), p.toAgent, p.fromAgent, 5*time.Second, recordingDial(&addr))
			if err != nil || conn == nil {
				t.Fatalf("handshake: conn %v, why %q, err %v", conn, why, err)
			}
			if rt.Why != tc.route.Why {
				t.Errorf("route taken %q, want %q", rt.Why, tc.route.Why)
			}
			res := p.wait(t)
			if res.err != nil || res.r == nil {
				t.Fatalf("agent side: %v, %v", res.r, res.err)
			}
			// The agent stopped listening after the one connection.
			if c2, err := dialDirect(ctx, tc.route, addr); err == nil {
				c2.Close()
				t.Errorf("a second connection to %s was accepted", addr)
			}
			serveOn(t, res.r, res.w, conn, conn)
		})
	}
}

// A connection that presents a wrong secret is closed unanswered, the
// listener takes no other, and the host falls back to stdio, over which
// the files are served.
func TestDirectWrongSecretRefused(t *testing.T) {
	p := startPeer(t)
	route := providers.DirectRoute{Network: providers.DirectTCP, Host: "127.0.0.1", Why: "loopback"}
	var refused error
	dial := func(ctx context.Context, rt providers.DirectRoute, addr string) (net.Conn, error) {
		// Another process in the box is first, with a wrong secret.
		evil, err := dialDirect(ctx, rt, addr)
		if err != nil {
			t.Fatalf("dialling as the box: %v", err)
		}
		evil.Write(make([]byte, directSecretLen))
		evil.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		_, refused = evil.Read(b[:])
		evil.Close()
		return dialDirect(ctx, rt, addr)
	}
	conn, _, why, err := directHandshake(context.Background(), []providers.DirectRoute{route}, "", p.toAgent, p.fromAgent, 5*time.Second, dial)
	if err != nil || conn != nil {
		t.Fatalf("handshake: conn %v, err %v; want no connection", conn, err)
	}
	if !errors.Is(refused, io.EOF) {
		t.Errorf("the wrong secret's connection read %v, want EOF (closed unanswered)", refused)
	}
	if !strings.Contains(why, "loopback") {
		t.Errorf("why = %q, want the route named", why)
	}
	res := p.wait(t)
	if res.err != nil || res.r != nil {
		t.Fatalf("agent side: %v, %v; want stdio", res.r, res.err)
	}
	serveOn(t, p.agentIn, p.agentOut, p.fromAgent, p.toAgent)
}

// A route that cannot be dialled, or that the agent cannot listen on,
// leaves the requests on stdio, with the reasons.
func TestDirectFallback(t *testing.T) {
	p := startPeer(t)
	routes := []providers.DirectRoute{
		{Network: providers.DirectTCP, Host: "192.0.2.1", Why: "unlistenable"}, // TEST-NET: not the agent's address
		{Network: providers.DirectTCP, Host: "127.0.0.1", Why: "undialled"},
	}
	dial := func(ctx context.Context, rt providers.DirectRoute, addr string) (net.Conn, error) {
		return nil, errors.New("no route to host")
	}
	conn, _, why, err := directHandshake(context.Background(), routes, "", p.toAgent, p.fromAgent, 5*time.Second, dial)
	if err != nil || conn != nil {
		t.Fatalf("handshake: conn %v, err %v; want no connection", conn, err)
	}
	for _, want := range []string{"unlistenable: the agent could not listen", "undialled: no route to host"} {
		if !strings.Contains(why, want) {
			t.Errorf("why = %q, want it to say %q", why, want)
		}
	}
	res := p.wait(t)
	if res.err != nil || res.r != nil {
		t.Fatalf("agent side: %v, %v; want stdio", res.r, res.err)
	}
	serveOn(t, p.agentIn, p.agentOut, p.fromAgent, p.toAgent)
}

// An agent that does not answer the handshake fails it within the bound.
func TestDirectHandshakeSilentAgent(t *testing.T) {
	hr, aw := io.Pipe()
	defer aw.Close()
	route := providers.DirectRoute{Network: providers.DirectTCP, Host: "127.0.0.1"}
	_, _, _, err := directHandshake(context.Background(), []providers.DirectRoute{route}, "", io.Discard, hr, 50*time.Millisecond, dialDirect)
	if !providers.IsCode(err, providers.Liveness) {
		t.Fatalf("err = %v, want Liveness", err)
	}
}

// The host never follows a symlink the box put where the agent's socket
// should be: it could name a socket outside the box.
func TestDialUnixInRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "real")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Symlink(sock, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if c, err := dialUnixIn(ctx, "/", filepath.Join(dir, "link")); err == nil {
		c.Close()
		t.Fatal("dialled a socket through a symlink")
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := dialUnixIn(ctx, "/", filepath.Join(dir, "file")); err == nil {
		c.Close()
		t.Fatal("dialled a regular file")
	}
	c, err := dialUnixIn(ctx, "/", sock)
	if err != nil {
		t.Fatalf("dialling the socket itself: %v", err)
	}
	c.Close()
}

// routesBox is a box whose DirectRoutes answers as the test says; nothing
// else of it is called.
type routesBox struct {
	providers.Box
	routes []providers.DirectRoute
	err    error
	asked  int
}

func (b *routesBox) ID() string { return "routes" }

func (b *routesBox) DirectRoutes(ctx context.Context) ([]providers.DirectRoute, error) {
	b.asked++
	return b.routes, b.err
}

// TestDirectRoutesOff: a box the provider says is not to be dialled, or a
// channel whose option turns the direct channel off, gets no routes (the
// agent starts without -direct) and says why for facts.json; a provider
// that cannot say gets no routes and no reason; routes pass through.
func TestDirectRoutesOff(t *testing.T) {
	ctx := context.Background()
	route := providers.DirectRoute{Network: providers.DirectUnix, Root: "/proc/1/root", Why: "/proc/1/root"}
	for _, c := range []struct {
		name     string
		box      *routesBox
		noDirect bool
		routes   int
		off      string
	}{
		{"provider off", &routesBox{err: fmt.Errorf("%w: provider option direct=off", providers.ErrDirectOff)}, false, 0, "direct channel off: provider option direct=off"},
		{"channel option", &routesBox{routes: []providers.DirectRoute{route}}, true, 0, "direct channel off: the channel's option NoDirect"},
		{"provider error", &routesBox{err: errors.New("inspect failed")}, false, 0, ""},
		{"routes", &routesBox{routes: []providers.DirectRoute{route}}, false, 1, ""},
	} {
		ch := NewChannel(c.box, ChannelOptions{NoDirect: c.noDirect})
		routes, off := ch.directRoutes(ctx)
		if len(routes) != c.routes || off != c.off {
			t.Errorf("%s: %d routes, off %q; want %d, %q", c.name, len(routes), off, c.routes, c.off)
		}
		if c.noDirect && c.box.asked != 0 {
			t.Errorf("%s: the box was asked for routes with the channel's option off", c.name)
		}
	}
}
