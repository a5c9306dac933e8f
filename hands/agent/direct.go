package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The direct channel: the agent's requests over a connection the host
// dials, instead of the exec's stdin and stdout (a round trip over
// `docker exec -i` stdio costs several times one over a socket). The exec
// stays: it starts the agent, carries the handshake, and is the agent's
// lifeline (the agent ends when its stdin closes; the host ends the
// channel when the exec ends).
//
// Started with -direct, the agent reads lines on stdin before anything
// else, and the host leads:
//
//	host:  boxfs-direct/1 NETWORK BIND SECRET   (NETWORK tcp: BIND is the IP
//	       to listen on, a random port; unix: BIND is a directory in the box
//	       where the agent makes a private socket; SECRET 32 bytes, hex)
//	agent: listen ADDR   (tcp: the port; unix: the socket's path)
//	       or: no REASON
//	host:  dials ADDR within directDialTimeout, writes SECRET's 32 bytes on
//	       the connection; the agent answers one byte, directOK, when they
//	       match (compared in constant time), else closes it
//	host:  direct        (the agent serves the verified connection)
//	       or another boxfs-direct/1 line (the next route), or: stdio
//	       (the agent serves stdin and stdout, as without -direct)
//
// The agent takes exactly one connection per listen line and stops
// listening at once after it, whatever it presents; the secret travels
// only on the exec's stdin (never argv or env, which other processes in
// the box can read). Whatever answers on the connection is box data, read
// by the same Client with the same bounds as the exec's stdout.
const (
	directMagic = "boxfs-direct/1"
	directOK    = 'y'
	// directSecretLen is the size of the secret in bytes.
	directSecretLen = 32
	// directDialTimeout bounds one connect attempt: a route that does not
	// answer (a VM's address, a filtered network) costs at most this.
	directDialTimeout = 300 * time.Millisecond
	// directAckTimeout bounds the agent's answer to the secret, and the
	// agent's wait for it.
	directAckTimeout = 2 * time.Second
	// directMaxLine bounds a handshake line either way.
	directMaxLine = 512
	// directMaxRoutes bounds the routes tried in one start.
	directMaxRoutes = 4
)

// directDialer dials a route at the address the agent answered.
type directDialer func(ctx context.Context, route providers.DirectRoute, addr string) (net.Conn, error)

// dialDirect dials the agent's listener: a TCP port of the route's host,
// or a unix socket under the route's root (dialUnixIn: no symlink is
// followed, so the box cannot point the host at a socket of its own).
func dialDirect(ctx context.Context, route providers.DirectRoute, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, directDialTimeout)
	defer cancel()
	switch route.Network {
	case providers.DirectTCP:
		port, err := strconv.ParseUint(addr, 10, 16)
		if err != nil || port == 0 {
			return nil, fmt.Errorf("the agent answered port %q", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", net.JoinHostPort(route.Host, strconv.Itoa(int(port))))
	case providers.DirectUnix:
		if !path.IsAbs(addr) || path.Clean(addr) != addr {
			return nil, fmt.Errorf("the agent answered socket %q", addr)
		}
		return dialUnixIn(ctx, route.Root, addr)
	}
	return nil, fmt.Errorf("unknown network %q", route.Network)
}

// directHandshake runs the host's side of the handshake over the agent's
// stdin (w) and stdout (r), trying routes in order: it returns the
// verified connection and the route it took, or nil and why no route
// worked, the agent then serving its stdio. An error means the exec's
// streams failed (the agent is gone or did not answer within bound): the
// start fails as a failed SFTP handshake does.
func directHandshake(ctx context.Context, routes []providers.DirectRoute, unixDir string, w io.Writer, r io.Reader, bound time.Duration, dial directDialer) (net.Conn, providers.DirectRoute, string, error) {
	var whyNot []string
	if len(routes) > directMaxRoutes {
		routes = routes[:directMaxRoutes]
	}
	for _, rt := range routes {
		var bind string
		switch rt.Network {
		case providers.DirectTCP:
			if net.ParseIP(rt.Host) == nil {
				whyNot = append(whyNot, fmt.Sprintf("%s: not an IP", rt.Why))
				continue
			}
			bind = rt.Host
		case providers.DirectUnix:
			bind = unixDir
		default:
			whyNot = append(whyNot, fmt.Sprintf("%s: unknown network %q", rt.Why, rt.Network))
			continue
		}
		if strings.ContainsAny(bind, " \n") || bind == "" {
			whyNot = append(whyNot, fmt.Sprintf("%s: cannot ask the agent to listen at %q", rt.Why, bind))
			continue
		}
		var secret [directSecretLen]byte
		rand.Read(secret[:])
		if _, err := fmt.Fprintf(w, "%s %s %s %s\n", directMagic, rt.Network, bind, hex.EncodeToString(secret[:])); err != nil {
			return nil, rt, "", err
		}
		line, err := readLine(ctx, r, bound)
		if err != nil {
			return nil, rt, "", err
		}
		addr, ok := strings.CutPrefix(line, "listen ")
		if !ok {
			whyNot = append(whyNot, fmt.Sprintf("%s: the agent could not listen: %s", rt.Why, strings.TrimPrefix(line, "no ")))
			continue
		}
		conn, err := dial(ctx, rt, addr)
		if err != nil {
			whyNot = append(whyNot, fmt.Sprintf("%s: %v", rt.Why, err))
			continue
		}
		if err := presentSecret(conn, secret[:]); err != nil {
			conn.Close()
			whyNot = append(whyNot, fmt.Sprintf("%s: %v", rt.Why, err))
			continue
		}
		if _, err := io.WriteString(w, "direct\n"); err != nil {
			conn.Close()
			return nil, rt, "", err
		}
		return conn, rt, "", nil
	}
	if _, err := io.WriteString(w, "stdio\n"); err != nil {
		return nil, providers.DirectRoute{}, "", err
	}
	if len(whyNot) == 0 {
		whyNot = append(whyNot, "the box offers no route")
	}
	return nil, providers.DirectRoute{}, strings.Join(whyNot, "; "), nil
}

// presentSecret writes the secret on conn and waits for the agent's
// answer.
func presentSecret(conn net.Conn, secret []byte) error {
	conn.SetDeadline(time.Now().Add(directAckTimeout))
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write(secret); err != nil {
		return fmt.Errorf("sending the secret: %w", err)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return fmt.Errorf("the agent did not take the connection: %w", err)
	}
	if b[0] != directOK {
		return errors.New("the agent refused the connection")
	}
	return nil
}

// readLine reads one line of at most directMaxLine bytes from r, a byte at
// a time (what follows belongs to the protocol), within bound. On timeout
// the read is left behind: the caller ends the exec.
func readLine(ctx context.Context, r io.Reader, bound time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	done := make(chan res, 1)
	go func() {
		var b []byte
		var c [1]byte
		for len(b) < directMaxLine {
			if _, err := io.ReadFull(r, c[:]); err != nil {
				done <- res{err: fmt.Errorf("reading the agent's handshake: %w", err)}
				return
			}
			if c[0] == '\n' {
				done <- res{s: string(b)}
				return
			}
			b = append(b, c[0])
		}
		done <- res{err: fmt.Errorf("the agent's handshake line is longer than %d bytes", directMaxLine)}
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case v := <-done:
		return v.s, v.err
	case <-t.C:
		return "", providers.Errorf(providers.Liveness, "agent.direct", "the agent did not answer the handshake within %v", bound)
	case <-ctx.Done():
		return "", ctxError("agent.direct", ctx.Err())
	}
}

// negotiateDirect is the agent's side of the handshake (it runs with
// -direct): it follows the host's lines on in and returns the streams to
// serve: a verified connection, or in and out themselves. With a
// connection, the agent's stdin stays its lifeline: watchLifeline closes
// the connection when stdin ends.
func negotiateDirect(in *bufio.Reader, out io.Writer) (io.Reader, io.WriteCloser, error) {
	var l *directListener
	defer func() {
		if l != nil {
			l.close()
		}
	}()
	for tries := 0; ; tries++ {
		line, err := readAgentLine(in)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case line == "stdio":
			return nil, nil, nil
		case line == "direct":
			if l == nil {
				return nil, nil, errors.New("agent: direct without a listener")
			}
			conn := l.verified()
			if conn == nil {
				return nil, nil, errors.New("agent: direct without a verified connection")
			}
			return conn, conn, nil
		case strings.HasPrefix(line, directMagic+" ") && tries < directMaxRoutes:
			if l != nil {
				l.close()
				l = nil
			}
			f := strings.Fields(line)
			secret, err := hex.DecodeString(f[len(f)-1])
			if len(f) != 4 || err != nil || len(secret) != directSecretLen {
				fmt.Fprintf(out, "no bad request\n")
				continue
			}
			l, err = listenDirect(f[1], f[2], secret)
			if err != nil {
				fmt.Fprintf(out, "no %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			fmt.Fprintf(out, "listen %s\n", l.addr)
		default:
			return nil, nil, fmt.Errorf("agent: unexpected handshake line %q", line)
		}
	}
}

// readAgentLine reads one handshake line from the host.
func readAgentLine(in *bufio.Reader) (string, error) {
	var b []byte
	for len(b) < directMaxLine {
		c, err := in.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return string(b), nil
		}
		b = append(b, c)
	}
	return "", errors.New("agent: handshake line too long")
}

// directListener is one listen of the handshake: it accepts exactly one
// connection, stops listening, and keeps it if it presents the secret.
type directListener struct {
	ln   net.Listener
	addr string
	dir  string // the unix socket's private directory, removed at close
	done chan net.Conn
}

// listenDirect listens on network at bind (see the protocol above) and
// starts accepting the one connection.
func listenDirect(network, bind string, secret []byte) (*directListener, error) {
	l := &directListener{done: make(chan net.Conn, 1)}
	switch network {
	case providers.DirectTCP:
		if net.ParseIP(bind) == nil {
			return nil, fmt.Errorf("not an IP: %q", bind)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(bind, "0"))
		if err != nil {
			return nil, err
		}
		l.ln = ln
		l.addr = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	case providers.DirectUnix:
		if !path.IsAbs(bind) {
			return nil, fmt.Errorf("not an absolute directory: %q", bind)
		}
		dir, err := os.MkdirTemp(bind, ".boxfs-direct-")
		if err != nil {
			return nil, err
		}
		sock := path.Join(dir, "s")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			os.Remove(dir)
			return nil, err
		}
		l.ln, l.addr, l.dir = ln, sock, dir
	default:
		return nil, fmt.Errorf("unknown network %q", network)
	}
	go l.accept(secret)
	return l, nil
}

// accept takes one connection, stops listening, and keeps the connection
// when it presents the secret within directAckTimeout.
func (l *directListener) accept(secret []byte) {
	conn, err := l.ln.Accept()
	l.ln.Close()
	if l.dir != "" {
		os.Remove(l.dir) // the socket went with the listener
	}
	if err != nil {
		l.done <- nil
		return
	}
	got := make([]byte, len(secret))
	conn.SetDeadline(time.Now().Add(directAckTimeout))
	_, err = io.ReadFull(conn, got)
	if err != nil || subtle.ConstantTimeCompare(got, secret) != 1 {
		conn.Close()
		l.done <- nil
		return
	}
	conn.SetDeadline(time.Time{})
	// The connection is handed over before the host hears it was taken,
	// so the host's "direct" always finds it.
	l.done <- conn
	if _, err := conn.Write([]byte{directOK}); err != nil {
		return
	}
}

// verified returns the connection that presented the secret, or nil. The
// host says "direct" only once the agent has answered the secret, and the
// agent hands the connection over before it answers.
func (l *directListener) verified() net.Conn {
	select {
	case c := <-l.done:
		l.done <- nil // taken: close leaves it open
		return c
	default:
		return nil
	}
}

// close stops listening and drops a connection not handed over.
func (l *directListener) close() {
	l.ln.Close()
	if l.dir != "" {
		os.Remove(path.Join(l.dir, "s"))
		os.Remove(l.dir)
	}
	go func() {
		if c := <-l.done; c != nil {
			c.Close()
		}
	}()
}

// watchLifeline closes conn when the agent's stdin ends (the host's exec
// ended: the host is gone or ended the channel), so that the agent serving
// conn ends too. Nothing more is expected on stdin.
func watchLifeline(in io.Reader, conn io.Closer) {
	io.Copy(io.Discard, in)
	conn.Close()
}
