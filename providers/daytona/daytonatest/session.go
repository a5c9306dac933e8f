package daytonatest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// The markers that frame a session command's log: each chunk of stdout
// follows 01 01 01, each chunk of stderr 02 02 02.
var (
	stdoutMarker = []byte{1, 1, 1}
	stderrMarker = []byte{2, 2, 2}
)

// session is one daemon session: commands run one after another.
type session struct {
	id       string
	run      sync.Mutex // held while a command runs
	mu       sync.Mutex
	commands map[string]*command
	order    []string
	shell    *os.Process // the command running, killed with the session
}

// command is one session command and its log.
type command struct {
	id, text string

	mu       sync.Mutex
	log      []byte
	stdout   []byte
	stderr   []byte
	exitCode *int
	drained  bool          // its output pipes reached EOF
	changed  chan struct{} // closed and replaced on every change
	stdin    io.WriteCloser
}

func newCommand(id, text string) *command {
	return &command{id: id, text: text, changed: make(chan struct{})}
}

// update changes the command under its lock and wakes followers.
func (c *command) update(f func()) {
	c.mu.Lock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *command) dto() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]any{"id": c.id, "command": c.text}
	if c.exitCode != nil {
		m["exitCode"] = *c.exitCode
	}
	return m
}

func (s *Server) serveSession(w http.ResponseWriter, r *http.Request, sb *sandbox, rest string) {
	parts := strings.Split(rest, "/")
	if rest == "" {
		parts = nil
	}
	switch {
	case len(parts) == 0 && r.Method == http.MethodPost:
		var req struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SessionID == "" {
			toolboxError(w, r, http.StatusBadRequest, errors.New("invalid request body: sessionId is required"))
			return
		}
		s.mu.Lock()
		if _, ok := sb.sessions[req.SessionID]; ok {
			s.mu.Unlock()
			toolboxError(w, r, http.StatusConflict, errors.New("session already exists"))
			return
		}
		sb.sessions[req.SessionID] = &session{id: req.SessionID, commands: map[string]*command{}}
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	case len(parts) == 0 && r.Method == http.MethodGet:
		s.mu.Lock()
		var all []*session
		for _, ss := range sb.sessions {
			all = append(all, ss)
		}
		s.mu.Unlock()
		out := []map[string]any{}
		for _, ss := range all {
			out = append(out, ss.dto())
		}
		writeJSON(w, http.StatusOK, out)
	default:
		s.mu.Lock()
		ss := sb.sessions[parts[0]]
		s.mu.Unlock()
		if ss == nil {
			toolboxError(w, r, http.StatusNotFound, errors.New("session not found"))
			return
		}
		switch {
		case len(parts) == 1 && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, ss.dto())
		case len(parts) == 1 && r.Method == http.MethodDelete:
			s.mu.Lock()
			delete(sb.sessions, ss.id)
			s.mu.Unlock()
			ss.mu.Lock()
			if ss.shell != nil {
				ss.shell.Kill() // the session's shell, not what it started
			}
			ss.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		case len(parts) == 2 && parts[1] == "exec" && r.Method == http.MethodPost:
			s.sessionExec(w, r, sb, ss)
		case len(parts) >= 3 && parts[1] == "command":
			ss.mu.Lock()
			c := ss.commands[parts[2]]
			ss.mu.Unlock()
			if c == nil {
				toolboxError(w, r, http.StatusNotFound, errors.New("command not found"))
				return
			}
			switch {
			case len(parts) == 3 && r.Method == http.MethodGet:
				writeJSON(w, http.StatusOK, c.dto())
			case len(parts) == 4 && parts[3] == "logs" && r.Method == http.MethodGet:
				s.commandLogs(w, r, sb, c)
			case len(parts) == 4 && parts[3] == "input" && r.Method == http.MethodPost:
				commandInput(w, r, c)
			default:
				toolboxError(w, r, http.StatusNotFound, errors.New("no such route"))
			}
		default:
			toolboxError(w, r, http.StatusNotFound, errors.New("no such route"))
		}
	}
}

func (ss *session) dto() map[string]any {
	ss.mu.Lock()
	var cmds []*command
	for _, id := range ss.order {
		cmds = append(cmds, ss.commands[id])
	}
	ss.mu.Unlock()
	out := []map[string]any{}
	for _, c := range cmds {
		out = append(out, c.dto())
	}
	return map[string]any{"sessionId": ss.id, "commands": out}
}

// sessionExec starts a command in the session: through sh, after the
// session's previous command ended.
func (s *Server) sessionExec(w http.ResponseWriter, r *http.Request, sb *sandbox, ss *session) {
	var req struct {
		Command           string `json:"command"`
		RunAsync          bool   `json:"runAsync"`
		Async             bool   `json:"async"`
		SuppressInputEcho bool   `json:"suppressInputEcho"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, errors.New("invalid request body"))
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("command cannot be empty"))
		return
	}
	c := newCommand(newID(), req.Command)
	ss.mu.Lock()
	ss.commands[c.id] = c
	ss.order = append(ss.order, c.id)
	ss.mu.Unlock()
	go s.runCommand(sb, ss, c)
	if req.RunAsync || req.Async {
		writeJSON(w, http.StatusAccepted, map[string]any{"cmdId": c.id})
		return
	}
	for {
		c.mu.Lock()
		done, ch := c.exitCode != nil && c.drained, c.changed
		c.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
		case <-sb.ended:
			toolboxError(w, r, http.StatusBadRequest, errors.New("session cancelled"))
			return
		}
	}
	c.mu.Lock()
	out := map[string]any{"cmdId": c.id, "output": string(c.stdout) + string(c.stderr), "stdout": string(c.stdout), "stderr": string(c.stderr), "exitCode": *c.exitCode}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// runCommand runs one session command through sh, its stdout and stderr
// framed by markers into the log.
func (s *Server) runCommand(sb *sandbox, ss *session, c *command) {
	ss.run.Lock()
	defer ss.run.Unlock()
	fail := func(code int, msg string) {
		c.update(func() {
			c.log = append(append(c.log, stderrMarker...), msg...)
			c.stderr = append(c.stderr, msg...)
			c.exitCode = &code
			c.drained = true
		})
	}
	select {
	case <-sb.ended:
		fail(1, "session cancelled\n")
		return
	default:
	}
	cmd := s.command(context.Background(), sb, "/bin/sh", "-c", c.text)
	or, ow, err := os.Pipe()
	if err != nil {
		fail(1, err.Error())
		return
	}
	er, ew, err := os.Pipe()
	if err != nil {
		or.Close()
		ow.Close()
		fail(1, err.Error())
		return
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		fail(1, err.Error())
		return
	}
	cmd.Stdout, cmd.Stderr = ow, ew
	if err := cmd.Start(); err != nil {
		or.Close()
		ow.Close()
		er.Close()
		ew.Close()
		fail(127, err.Error()+"\n")
		return
	}
	ow.Close()
	ew.Close()
	c.update(func() { c.stdin = in })
	ss.mu.Lock()
	ss.shell = cmd.Process
	ss.mu.Unlock()
	var wg sync.WaitGroup
	pump := func(r *os.File, marker []byte, own *[]byte) {
		defer wg.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				c.update(func() {
					c.log = append(append(c.log, marker...), chunk...)
					*own = append(*own, chunk...)
				})
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pump(or, stdoutMarker, &c.stdout)
	go pump(er, stderrMarker, &c.stderr)
	cmd.Wait()
	code := -1
	if ps := cmd.ProcessState; ps != nil {
		code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal()) // what $? says of a command a signal ended
		}
	}
	c.update(func() { c.exitCode = &code; c.stdin = nil })
	in.Close()
	wg.Wait()
	c.update(func() { c.drained = true })
}

// commandLogs serves the command's log: as JSON, or over a WebSocket
// (streaming as it grows with ?follow=true, closed once the command has
// ended and its output is all sent).
func (s *Server) commandLogs(w http.ResponseWriter, r *http.Request, sb *sandbox, c *command) {
	if r.Header.Get("Upgrade") == "" {
		c.mu.Lock()
		out := map[string]string{"output": string(c.stdout) + string(c.stderr), "stdout": string(c.stdout), "stderr": string(c.stderr)}
		c.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
		return
	}
	s.mu.Lock()
	if sb.gone() {
		s.mu.Unlock()
		toolboxError(w, r, http.StatusNotFound, errors.New("session not found"))
		return
	}
	sb.follows.Add(1)
	s.mu.Unlock()
	defer sb.follows.Done()
	follow := r.URL.Query().Get("follow") == "true"
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := conn.CloseRead(context.Background()) // answers pings; done when the client goes
	sent := 0
	for {
		c.mu.Lock()
		pending := c.log[sent:]
		done := c.exitCode != nil && c.drained
		ch := c.changed
		c.mu.Unlock()
		for len(pending) > 0 {
			n := min(len(pending), 32<<10)
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := conn.Write(wctx, websocket.MessageText, pending[:n])
			cancel()
			if err != nil {
				return
			}
			pending, sent = pending[n:], sent+n
		}
		if done || !follow {
			c.mu.Lock()
			more := len(c.log) > sent
			c.mu.Unlock()
			if !more {
				conn.Close(websocket.StatusNormalClosure, "")
				return
			}
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-sb.ended:
			conn.Close(websocket.StatusGoingAway, "sandbox ended")
			return
		}
	}
}

// commandInput writes data (with a newline forced) to the command's stdin.
func commandInput(w http.ResponseWriter, r *http.Request, c *command) {
	var req struct {
		Data string `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, errors.New("invalid request body"))
		return
	}
	c.mu.Lock()
	in, ended := c.stdin, c.exitCode != nil
	c.mu.Unlock()
	if ended || in == nil {
		toolboxError(w, r, http.StatusGone, errors.New("command has already completed"))
		return
	}
	data := req.Data
	if !strings.HasSuffix(data, "\n") {
		data += "\n"
	}
	if _, err := io.WriteString(in, data); err != nil {
		toolboxError(w, r, http.StatusGone, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
