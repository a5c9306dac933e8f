package daytonatest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The markers that label each line of a session command's log: 01 01 01
// for stdout, 02 02 02 for stderr.
var (
	stdoutMarker = []byte{1, 1, 1}
	stderrMarker = []byte{2, 2, 2}
)

// sessionGrace is how long a deleted session's shell group has between
// SIGTERM and SIGKILL.
const sessionGrace = 2 * time.Second

// session is one daemon session: a long-lived sh in its own process group,
// which runs the commands written to its stdin one after another.
type session struct {
	id    string
	dir   string // a directory per command, holding its FIFOs
	shell *exec.Cmd
	stdin io.WriteCloser
	dead  chan struct{} // closed when the shell has ended

	mu       sync.Mutex
	commands map[string]*command
	order    []string
	deleted  bool
}

// command is one session command and its log.
type command struct {
	id, text string
	dir      string // its FIFOs: out, err, in, code

	mu       sync.Mutex
	log      []byte // the labelled lines of stdout and stderr
	exitCode *int
	drained  bool          // its output FIFOs reached EOF
	changed  chan struct{} // closed and replaced on every change

	inMu sync.Mutex
	in   *os.File // the stdin FIFO, held open for input; nil once the command ended
}

func newCommand(id, text, dir string) *command {
	return &command{id: id, text: text, dir: dir, changed: make(chan struct{})}
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

// createSession starts the session's shell.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SessionID == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("invalid request body: sessionId is required"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := sb.sessions[req.SessionID]; ok {
		toolboxError(w, r, http.StatusConflict, errors.New("session already exists"))
		return
	}
	ss, err := s.startSession(sb, req.SessionID)
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	sb.sessions[req.SessionID] = ss
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) startSession(sb *sandbox, id string) (*session, error) {
	dir, err := os.MkdirTemp(sb.dir, ".daytona-session-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/sh")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env, cmd.Dir = s.envLocked(sb), sb.dir
	stdin, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ss := &session{id: id, dir: dir, shell: cmd, stdin: stdin, dead: make(chan struct{}), commands: map[string]*command{}}
	go func() {
		cmd.Wait()
		close(ss.dead)
	}()
	return ss, nil
}

// sessionOf finds the session the path names, or answers 404.
func (s *Server) sessionOf(w http.ResponseWriter, r *http.Request, sb *sandbox) *session {
	s.mu.Lock()
	ss := sb.sessions[r.PathValue("sessionId")]
	s.mu.Unlock()
	if ss == nil {
		toolboxError(w, r, http.StatusNotFound, errors.New("session not found"))
	}
	return ss
}

// commandOf finds the command the path names, or answers 404.
func (s *Server) commandOf(w http.ResponseWriter, r *http.Request, sb *sandbox) (*session, *command) {
	ss := s.sessionOf(w, r, sb)
	if ss == nil {
		return nil, nil
	}
	ss.mu.Lock()
	c := ss.commands[r.PathValue("commandId")]
	ss.mu.Unlock()
	if c == nil {
		toolboxError(w, r, http.StatusNotFound, errors.New("command not found"))
	}
	return ss, c
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, sb *sandbox) {
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
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	if ss := s.sessionOf(w, r, sb); ss != nil {
		writeJSON(w, http.StatusOK, ss.dto())
	}
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	if _, c := s.commandOf(w, r, sb); c != nil {
		writeJSON(w, http.StatusOK, c.dto())
	}
}

// deleteSession terminates the session's shell group (SIGTERM, then
// SIGKILL after a grace) and forgets it.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	ss := s.sessionOf(w, r, sb)
	if ss == nil {
		return
	}
	s.mu.Lock()
	delete(sb.sessions, ss.id)
	s.mu.Unlock()
	ss.end()
	w.WriteHeader(http.StatusNoContent)
}

// end terminates the shell's group, unblocks what waits on the commands'
// FIFOs, and removes the session's files.
func (ss *session) end() {
	ss.mu.Lock()
	if ss.deleted {
		ss.mu.Unlock()
		return
	}
	ss.deleted = true
	cmds := make([]*command, 0, len(ss.commands))
	for _, c := range ss.commands {
		cmds = append(cmds, c)
	}
	ss.mu.Unlock()
	pgid := ss.shell.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-ss.dead:
	case <-time.After(sessionGrace):
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-ss.dead
	for _, c := range cmds {
		c.release()
	}
	os.RemoveAll(ss.dir)
}

// sessionExec starts a command in the session: its FIFOs made, its
// labellers started, the command written to the shell wrapped so that its
// stdin, stdout and stderr are the FIFOs and its status is written to the
// last one.
func (s *Server) sessionExec(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	ss := s.sessionOf(w, r, sb)
	if ss == nil {
		return
	}
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
	id := newID()
	c := newCommand(id, req.Command, filepath.Join(ss.dir, id))
	if err := c.start(ss); err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	if req.RunAsync || req.Async {
		writeJSON(w, http.StatusAccepted, map[string]any{"cmdId": c.id})
		return
	}
	if !c.waitDone(ss, sb) {
		toolboxError(w, r, http.StatusBadRequest, errors.New("session cancelled"))
		return
	}
	c.mu.Lock()
	stdout, stderr := demux(c.log)
	out := map[string]any{"cmdId": c.id, "output": string(c.log), "stdout": string(stdout), "stderr": string(stderr), "exitCode": *c.exitCode}
	c.mu.Unlock()
	if !splitOutput(r.Header) {
		out["output"] = string(stripMarkers(c.log))
	}
	writeJSON(w, http.StatusOK, out)
}

// start makes the command's FIFOs, starts what reads them, and writes the
// command to the session's shell.
func (c *command) start(ss *session) error {
	if err := os.Mkdir(c.dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"out", "err", "in", "code"} {
		if err := syscall.Mkfifo(filepath.Join(c.dir, f), 0o600); err != nil {
			return fmt.Errorf("mkfifo: %w", err)
		}
	}
	in, err := os.OpenFile(filepath.Join(c.dir, "in"), os.O_RDWR, 0) // a writer, so the command's stdin stays open
	if err != nil {
		return err
	}
	c.in = in
	ss.mu.Lock()
	ss.commands[c.id] = c
	ss.order = append(ss.order, c.id)
	ss.mu.Unlock()
	var labels sync.WaitGroup
	labels.Add(2)
	go c.label("out", stdoutMarker, &labels)
	go c.label("err", stderrMarker, &labels)
	go func() {
		labels.Wait()
		c.update(func() { c.drained = true })
	}()
	go c.readExit()
	q := func(name string) string { return "'" + filepath.Join(c.dir, name) + "'" }
	line := fmt.Sprintf("{ %s; } <%s >%s 2>%s; echo $? >%s\n", c.text, q("in"), q("out"), q("err"), q("code"))
	if _, err := io.WriteString(ss.stdin, line); err != nil {
		c.release()
		return fmt.Errorf("failed to write command: %w", err)
	}
	return nil
}

// label copies one output FIFO into the log, each line after the stream's
// marker and ending in a newline (the last line gets one too); NUL bytes
// are dropped, as the shell's read does.
func (c *command) label(name string, marker []byte, done *sync.WaitGroup) {
	defer done.Done()
	f, err := os.Open(filepath.Join(c.dir, name)) // blocks until the shell opens it
	if err != nil {
		return
	}
	defer f.Close()
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.ReplaceAll(bytes.TrimSuffix(line, []byte("\n")), []byte{0}, nil)
			c.update(func() {
				c.log = append(append(append(c.log, marker...), line...), '\n')
			})
		}
		if err != nil {
			return
		}
	}
}

// readExit waits for the command's status on its code FIFO.
func (c *command) readExit() {
	b, err := os.ReadFile(filepath.Join(c.dir, "code")) // blocks until the shell writes it
	code, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil {
		return
	}
	c.update(func() { c.exitCode = &code })
	c.closeStdin()
}

// closeStdin closes the command's stdin FIFO (what input writes to).
func (c *command) closeStdin() {
	c.inMu.Lock()
	if c.in != nil {
		c.in.Close()
		c.in = nil
	}
	c.inMu.Unlock()
}

// release unblocks the goroutines of a command that will not run (the
// session ended): every FIFO is opened and closed once, and its stdin
// closed.
func (c *command) release() {
	for _, f := range []string{"out", "err", "code"} {
		if fd, err := os.OpenFile(filepath.Join(c.dir, f), os.O_RDWR, 0); err == nil {
			fd.Close()
		}
	}
	c.closeStdin()
	c.update(func() {})
}

// waitDone waits for the command to end and its output to drain; false
// when the session or the sandbox ended first.
func (c *command) waitDone(ss *session, sb *sandbox) bool {
	for {
		c.mu.Lock()
		done, ch := c.exitCode != nil && c.drained, c.changed
		c.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-ss.dead:
			return false
		case <-sb.ended:
			return false
		}
	}
}

// commandInput writes data (with a newline forced) to the command's stdin.
func (s *Server) commandInput(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	_, c := s.commandOf(w, r, sb)
	if c == nil {
		return
	}
	var req struct {
		Data string `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, errors.New("invalid request body"))
		return
	}
	data := req.Data
	if !strings.HasSuffix(data, "\n") {
		data += "\n"
	}
	c.mu.Lock()
	exited := c.exitCode != nil
	c.mu.Unlock()
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if exited || c.in == nil {
		toolboxError(w, r, http.StatusGone, errors.New("command has already completed"))
		return
	}
	if _, err := io.WriteString(c.in, data); err != nil {
		toolboxError(w, r, http.StatusGone, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
