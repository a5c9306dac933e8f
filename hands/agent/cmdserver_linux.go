//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// drainGrace is how long output is still read after a command's leader
	// has exited (what it wrote just before, or what a child it left in the
	// background writes); each read that brings data extends it, up to
	// drainMax after the exit. The local provider drains the same way.
	drainGrace = 250 * time.Millisecond
	drainMax   = 10 * time.Second
	// defaultPath is the PATH a command is looked up in when its
	// environment has none.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// ServeCommands runs commands for the host over in and out (see
// cmdwire.go) until in closes; it then kills every process group it
// started, confirms them gone, and returns. Each command runs as its own
// process group. The agent makes itself the child subreaper, so that what a
// command leaves behind is reaped here and a killed group is confirmed gone
// (a box's PID 1 is often a sleep that reaps nothing).
func ServeCommands(in io.Reader, out io.Writer) error {
	s := &cmdServer{
		fw:    &frameWriter{w: out},
		cmds:  map[uint32]*boxCmd{},
		byPid: map[int]*boxCmd{},
	}
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	stop := make(chan struct{})
	defer close(stop)
	go s.reap(sigs, stop)

	hello, _ := json.Marshal(cmdHello{Protocol: cmdProtocol, Pid: os.Getpid()})
	if err := s.fw.write(frameHello, 0, hello); err != nil {
		return err
	}
	var ferr error
	for {
		typ, id, payload, err := readFrame(in)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				ferr = err
			}
			break
		}
		switch typ {
		case frameStart:
			s.start(id, payload)
		case frameStdin, frameStdinEOF:
			if c := s.get(id); c != nil && c.stdin != nil {
				c.stdin.push(payload, typ == frameStdinEOF)
			}
		case frameKill:
			c := s.get(id)
			go func() {
				var k cmdKilled
				if c != nil {
					if err := killGroup(c.pid); err != nil {
						k.Error = err.Error()
					}
				}
				b, _ := json.Marshal(k)
				s.fw.write(frameKilled, id, b)
			}()
		case framePing:
			go s.fw.write(framePong, 0, nil)
		case frameOutAck:
			if c := s.get(id); c != nil {
				if n, err := ackSize(payload); err == nil {
					c.out.give(n)
				}
			}
		default:
			ferr = fmt.Errorf("agent: unknown command frame %q", typ)
		}
		if ferr != nil {
			break
		}
	}
	s.shutdown()
	return ferr
}

type cmdServer struct {
	fw *frameWriter

	mu    sync.Mutex
	cmds  map[uint32]*boxCmd // every command started, ended ones too (for kill)
	byPid map[int]*boxCmd    // leaders not yet reaped
}

// boxCmd is one command, box-side.
type boxCmd struct {
	id     uint32
	pid    int // the leader's pid, which is its group's id
	out    *credit
	stdin  *chunkQueue // stdin from the host; nil without stdin
	exited chan struct{}
	status unix.WaitStatus
	record string // the record's path in the box, or ""
}

func (s *cmdServer) get(id uint32) *boxCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmds[id]
}

// reap reaps every child (the subreaper gets orphans too) and hands a
// leader's status to its command.
func (s *cmdServer) reap(sigs <-chan os.Signal, stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-sigs:
		case <-t.C:
		case <-stop:
			return
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			s.mu.Lock()
			c := s.byPid[pid]
			delete(s.byPid, pid)
			s.mu.Unlock()
			if c != nil {
				c.status = ws
				close(c.exited)
			}
		}
	}
}

// failStart answers a command that could not start as a shell would: a
// line on its stderr and exit 127 (not found) or 126.
func (s *cmdServer) failStart(id uint32, st cmdStart, code int, msg string) {
	b, _ := json.Marshal(cmdStarted{})
	s.fw.write(frameStarted, id, b)
	if st.Merge || st.Stderr {
		typ := byte(frameStderr)
		if st.Merge {
			typ = frameStdout
		}
		s.fw.write(typ, id, []byte("boxfs: "+msg+"\n"))
	}
	b, _ = json.Marshal(cmdExit{Code: code})
	s.fw.write(frameExit, id, b)
}

// start runs the command a host asked for: its program found, its pipes
// made, forked as the leader of its own process group, its output
// streamed to the host until it exits.
func (s *cmdServer) start(id uint32, payload []byte) {
	var st cmdStart
	if err := json.Unmarshal(payload, &st); err != nil || len(st.Argv) == 0 {
		s.failed(id, fmt.Sprintf("bad start: %v", err))
		return
	}
	argv := toStrings(st.Argv)
	env := mergeEnv(os.Environ(), toStrings(st.Env))
	dir := string(st.Dir)
	if dir == "" {
		dir = "/"
	}
	prog, err := lookPath(argv[0], env, dir)
	if err != nil {
		s.failStart(id, st, execCode(err), fmt.Sprintf("%s: %v", argv[0], err))
		return
	}
	p, err := openPipes(st)
	if err != nil {
		s.failed(id, err.Error())
		return
	}
	c := &boxCmd{id: id, out: newCredit(cmdWindow), exited: make(chan struct{})}
	if st.Stdin {
		c.stdin = newChunkQueue()
	}
	err = s.fork(c, prog, argv, env, dir, p.fds)
	p.closeChild()
	if err != nil {
		p.closeOurs()
		s.failStart(id, st, execCode(err), fmt.Sprintf("%s: %v", argv[0], err))
		return
	}
	if st.Record != nil {
		c.record = writeRecord(*st.Record, c.pid)
	}
	b, _ := json.Marshal(cmdStarted{Pid: c.pid})
	s.fw.write(frameStarted, id, b)
	if p.stdin != nil {
		go feedStdin(s.fw, c, p.stdin)
	}
	s.stream(c, p.outs)
}

// failed tells the host a command could not be started at all.
func (s *cmdServer) failed(id uint32, msg string) {
	b, _ := json.Marshal(cmdFailed{Message: msg})
	s.fw.write(frameFailed, id, b)
}

// execCode is the shell's exit status for a program that could not run:
// 127 when it is not there, else 126.
func execCode(err error) int {
	if errors.Is(err, unix.ENOENT) {
		return 127
	}
	return 126
}

// fork starts c's program as the leader of its own process group, with
// fds as its stdin, stdout and stderr, and keeps it among the running.
func (s *cmdServer) fork(c *boxCmd, prog string, argv, env []string, dir string, fds []uintptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pid, err := syscall.ForkExec(prog, argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: fds,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return err
	}
	c.pid = pid
	s.byPid[pid] = c
	s.cmds[c.id] = c
	return nil
}

// outPipe is the read end of a command's output pipe, and the frame type
// its bytes travel in.
type outPipe struct {
	r   *os.File
	typ byte
}

// cmdPipes are a command's standard files: the child's ends (/dev/null
// for what the host did not ask for), and the agent's.
type cmdPipes struct {
	fds   []uintptr  // the child's stdin, stdout and stderr
	child []*os.File // the child's ends, closed once it is forked
	outs  []outPipe  // the agent's read ends of its output
	stdin *os.File   // the agent's write end of its stdin, or nil
}

// openPipes makes the pipes st asks for: stdin, and stdout and stderr
// apart or merged into one.
func openPipes(st cmdStart) (*cmdPipes, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	p := &cmdPipes{fds: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd()}, child: []*os.File{devnull}}
	if st.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeChild()
			return nil, err
		}
		p.child, p.stdin = append(p.child, r), w
		p.fds[0] = r.Fd()
	}
	switch {
	case st.Merge:
		err = p.output(frameStdout, 1, 2)
	case st.Stdout && st.Stderr:
		if err = p.output(frameStdout, 1); err == nil {
			err = p.output(frameStderr, 2)
		}
	case st.Stdout:
		err = p.output(frameStdout, 1)
	case st.Stderr:
		err = p.output(frameStderr, 2)
	}
	if err != nil {
		p.closeChild()
		p.closeOurs()
		return nil, err
	}
	return p, nil
}

// output makes one output pipe, the child's end as each of its fds.
func (p *cmdPipes) output(typ byte, fds ...int) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	p.child = append(p.child, w)
	p.outs = append(p.outs, outPipe{r, typ})
	for _, fd := range fds {
		p.fds[fd] = w.Fd()
	}
	return nil
}

// closeChild closes the child's ends: it has its own copies once forked.
func (p *cmdPipes) closeChild() {
	for _, f := range p.child {
		f.Close()
	}
}

// closeOurs closes the agent's ends, of a command that did not start.
func (p *cmdPipes) closeOurs() {
	for _, o := range p.outs {
		o.r.Close()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
}

// stream sends the command's output to the host as it comes and, once
// the leader has exited and each pipe is drained (for at most drainGrace
// after its last bytes, drainMax in all: what the group's other processes
// keep writing is not waited for), its exit status.
func (s *cmdServer) stream(c *boxCmd, outs []outPipe) {
	var copiers sync.WaitGroup
	var exitedAt atomic.Int64 // when the leader exited (unix ns); 0 before
	for _, o := range outs {
		copiers.Go(func() { s.copyOut(c, o, &exitedAt) })
	}
	go func() {
		<-c.exited
		exitedAt.Store(time.Now().UnixNano())
		for _, o := range outs {
			o.r.SetReadDeadline(time.Now().Add(drainGrace))
		}
		copiers.Wait()
		if c.record != "" {
			os.Remove(c.record)
		}
		code := c.status.ExitStatus()
		if c.status.Signaled() {
			code = 128 + int(c.status.Signal())
		}
		b, _ := json.Marshal(cmdExit{Code: code})
		s.fw.write(frameExit, c.id, b)
		if c.stdin != nil {
			c.stdin.push(nil, true)
		}
	}()
}

// copyOut sends one output pipe's bytes as the host's credit allows
// (dropping them once the stream is gone), until the pipe ends or its
// drain deadline passes.
func (s *cmdServer) copyOut(c *boxCmd, o outPipe, exitedAt *atomic.Int64) {
	defer o.r.Close()
	buf := make([]byte, cmdChunk)
	for {
		n, err := o.r.Read(buf)
		for sent := 0; sent < n; {
			k := c.out.take(n - sent)
			if k == 0 {
				break // the stream is gone: drop it
			}
			s.fw.write(o.typ, c.id, buf[sent:sent+k])
			sent += k
		}
		if at := exitedAt.Load(); n > 0 && at != 0 && time.Since(time.Unix(0, at)) < drainMax {
			o.r.SetReadDeadline(time.Now().Add(drainGrace))
		}
		if err != nil {
			return
		}
	}
}

// feedStdin writes the host's stdin chunks into the command's pipe and
// acknowledges each; a command that stopped reading has the rest dropped,
// still acknowledged, so the host never waits on it. The pipe closes at the
// host's EOF or when the leader has exited.
func feedStdin(fw *frameWriter, c *boxCmd, w *os.File) {
	defer w.Close()
	broken := false
	for {
		p, eof := c.stdin.pop()
		if len(p) > 0 {
			if !broken {
				if _, err := w.Write(p); err != nil {
					broken = true
				}
			}
			fw.writeAck(frameInAck, c.id, len(p))
		}
		if eof {
			return
		}
	}
}

// chunkQueue is a command's stdin waiting for its pipe; the host's window
// bounds it.
type chunkQueue struct {
	mu   sync.Mutex
	cond *sync.Cond
	q    [][]byte
	eof  bool
}

func newChunkQueue() *chunkQueue {
	q := &chunkQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *chunkQueue) push(p []byte, eof bool) {
	q.mu.Lock()
	if !q.eof {
		if len(p) > 0 {
			q.q = append(q.q, p)
		}
		q.eof = eof
	}
	q.mu.Unlock()
	q.cond.Broadcast()
}

// pop returns the next chunk, waiting for one; eof is true with the last.
func (q *chunkQueue) pop() (p []byte, eof bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.q) == 0 && !q.eof {
		q.cond.Wait()
	}
	if len(q.q) > 0 {
		p, q.q = q.q[0], q.q[1:]
	}
	return p, q.eof && len(q.q) == 0
}

// shutdown ends every group this server started (the host is gone: no one
// will read their output) and removes their records.
func (s *cmdServer) shutdown() {
	s.mu.Lock()
	var all []*boxCmd
	for _, c := range s.cmds {
		all = append(all, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.out.close()
			if killGroup(c.pid) == nil && c.record != "" {
				os.Remove(c.record)
			}
		}()
	}
	wg.Wait()
}

// killGroup kills process group pg and confirms it gone, re-checking and
// re-sending at growing intervals (about 5 s in all).
func killGroup(pg int) error {
	if pg <= 1 {
		return nil
	}
	for _, d := range []time.Duration{0, 5, 10, 20, 50, 100, 200, 500, 1000, 1000, 2000} {
		time.Sleep(d * time.Millisecond)
		if unix.Kill(-pg, 0) == unix.ESRCH {
			return nil
		}
		unix.Kill(-pg, unix.SIGKILL)
	}
	if unix.Kill(-pg, 0) == unix.ESRCH {
		return nil
	}
	return fmt.Errorf("process group %d outlived its kill", pg)
}

// mergeEnv is base with extra's K=V on top (extra wins).
func mergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	over := map[string]bool{}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		over[k] = true
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !over[k] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// lookPath finds name as execve would after a shell's PATH search: a name
// with a slash is taken as is (relative to dir), else the first executable
// regular file of that name in env's PATH.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := unix.Access(p, unix.X_OK); err != nil {
			return "", err
		}
		return p, nil
	}
	pathVar, found := defaultPath, false
	for i := len(env) - 1; i >= 0 && !found; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			pathVar, found = v, true
		}
	}
	var denied error
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if err := unix.Access(p, unix.X_OK); err != nil {
			denied = err
			continue
		}
		return p, nil
	}
	if denied != nil {
		return "", denied
	}
	return "", fmt.Errorf("not found: %w", unix.ENOENT)
}

// writeRecord writes the command's record ("pgid pid starttime owner") as
// hands' recordScript does, and returns its path ("" when it could not).
func writeRecord(r cmdRecord, pid int) string {
	dir := string(r.Dir)
	if dir == "" || r.ID == "" || strings.ContainsAny(r.ID, "/\x00") {
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	start := "0"
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			// Fields after the command name start at field 3; starttime is 22.
			if f := strings.Fields(string(b[i+1:])); len(f) > 19 {
				start = f[19]
			}
		}
	}
	p := filepath.Join(dir, r.ID)
	tmp := p + ".tmp"
	line := fmt.Sprintf("%d %d %s %s\n", pid, pid, start, r.Owner)
	if err := os.WriteFile(tmp, []byte(line), 0o644); err != nil {
		return ""
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return ""
	}
	return p
}
