package daytonatest

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// frameMax is the most log bytes one WebSocket frame carries: the daemon
// reads the log a KiB at a time and sends each read as a binary frame.
const frameMax = 1024

// splitOutput reports whether a request asks for the log with its stream
// markers: X-Daytona-Split-Output: true, or an X-Daytona-SDK-Version of
// 0.27 or later (a version that does not parse counts as later). Other
// requests get the streams combined, the markers stripped.
func splitOutput(h http.Header) bool {
	v := h.Get("X-Daytona-SDK-Version")
	if v == "" {
		return h.Get("X-Daytona-Split-Output") == "true"
	}
	if strings.Contains(v, "dev") {
		return true
	}
	return !olderThan(v, [3]int{0, 27, 0})
}

// olderThan compares a semantic version (a pre-release suffix ignored)
// with want; one that does not parse is not older.
func olderThan(v string, want [3]int) bool {
	v, _, _ = strings.Cut(strings.TrimPrefix(v, "v"), "-")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		if n != want[i] {
			return n < want[i]
		}
	}
	return false
}

// stripMarkers removes the stream markers from a log.
func stripMarkers(log []byte) []byte {
	return bytes.ReplaceAll(bytes.ReplaceAll(log, stdoutMarker, nil), stderrMarker, nil)
}

// demux splits a labelled log into its streams.
func demux(log []byte) (stdout, stderr []byte) {
	cur := &stdout
	for len(log) > 0 {
		switch {
		case bytes.HasPrefix(log, stdoutMarker):
			cur, log = &stdout, log[3:]
			continue
		case bytes.HasPrefix(log, stderrMarker):
			cur, log = &stderr, log[3:]
			continue
		}
		*cur = append(*cur, log[0])
		log = log[1:]
	}
	return stdout, stderr
}

// stripper removes markers from a log read in pieces: a piece's last bytes
// that may begin a marker wait for the next piece.
type stripper struct{ held []byte }

func (st *stripper) strip(p []byte) []byte {
	buf := append(st.held, p...)
	st.held = nil
	out := stripMarkers(buf)
	for k := min(2, len(out)); k > 0; k-- {
		tail := out[len(out)-k:]
		if bytes.HasPrefix(stdoutMarker, tail) || bytes.HasPrefix(stderrMarker, tail) {
			st.held = append([]byte(nil), tail...)
			return out[:len(out)-k]
		}
	}
	return out
}

func (st *stripper) flush() []byte {
	out := st.held
	st.held = nil
	return out
}

// commandLogs serves the command's log: as JSON (the older daemon: a plain
// string), or over a WebSocket, streaming as it grows with ?follow=true.
func (s *Server) commandLogs(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	ss, c := s.commandOf(w, r, sb)
	if c == nil {
		return
	}
	split := splitOutput(r.Header)
	if r.Header.Get("Upgrade") == "" {
		c.mu.Lock()
		log := append([]byte(nil), c.log...)
		c.mu.Unlock()
		if s.opts.OldDaemon {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if !split {
				log = stripMarkers(log)
			}
			w.Write(log)
			return
		}
		stdout, stderr := demux(log)
		writeJSON(w, http.StatusOK, map[string]string{"output": string(stripMarkers(log)), "stdout": string(stdout), "stderr": string(stderr)})
		return
	}
	s.mu.Lock()
	if sb.state == stateDestroyed {
		s.mu.Unlock()
		toolboxError(w, r, http.StatusNotFound, errNoRoute(r))
		return
	}
	sb.follows.Add(1)
	s.mu.Unlock()
	defer sb.follows.Done()
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := conn.CloseRead(context.Background()) // answers pings; done when the client goes
	f := follower{s: s, conn: conn, c: c, ss: ss, sb: sb, follow: r.URL.Query().Get("follow") == "true"}
	if !split {
		f.strip = &stripper{}
	}
	f.run(ctx)
}

// follower streams one command's log over a WebSocket.
type follower struct {
	s      *Server
	conn   *websocket.Conn
	c      *command
	ss     *session
	sb     *sandbox
	follow bool
	strip  *stripper // nil: the markers are sent
	sent   int
}

// run sends the log as it grows, in frames of at most frameMax bytes, and
// closes the stream once the command's exit code is known and the log has
// stayed at its end for the linger (without follow: once what is there
// is sent).
func (f *follower) run(ctx context.Context) {
	for {
		f.c.mu.Lock()
		pending := f.c.log[f.sent:]
		exited, ch := f.c.exitCode != nil, f.c.changed
		f.c.mu.Unlock()
		if err := f.send(ctx, pending); err != nil {
			return
		}
		if len(pending) > 0 {
			continue
		}
		var linger <-chan time.Time
		switch {
		case !f.follow:
			f.close(websocket.StatusNormalClosure)
			return
		case exited:
			linger = time.After(f.s.opts.FollowLinger)
		}
		select {
		case <-ch:
		case <-linger:
			f.close(websocket.StatusNormalClosure)
			return
		case <-f.ss.dead:
			f.close(websocket.StatusNormalClosure)
			return
		case <-ctx.Done():
			return
		case <-f.sb.ended:
			f.conn.Close(websocket.StatusGoingAway, "sandbox ended")
			return
		}
	}
}

func (f *follower) send(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), frameMax)
		frame := p[:n]
		if f.strip != nil {
			frame = f.strip.strip(frame)
		}
		if len(frame) > 0 {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := f.conn.Write(wctx, websocket.MessageBinary, frame)
			cancel()
			if err != nil {
				return err
			}
		}
		p, f.sent = p[n:], f.sent+n
	}
	return nil
}

// close sends what a stripper held back and closes the stream.
func (f *follower) close(code websocket.StatusCode) {
	if f.strip != nil {
		if rest := f.strip.flush(); len(rest) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			f.conn.Write(ctx, websocket.MessageBinary, rest)
			cancel()
		}
	}
	f.conn.Close(code, "")
}
