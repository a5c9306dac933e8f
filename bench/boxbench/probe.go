package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// probeLoop is the shell a probe keeps running: it evaluates one line at a
// time and ends each answer with a line "\x01rc=STATUS".
const probeLoop = `export LC_ALL=C; while IFS= read -r __l; do eval "$__l" </dev/null 2>&1; printf '\n\001rc=%d\n' $?; done`

// probe is one long-lived shell in a box (docker exec -i CTR bash, or bash
// on the host for a host directory), so that checking what landed in the box
// costs a round trip on an open stream and no process start on the host.
// It always talks to the real daemon, never through the delay proxy: it
// observes the box, it is not a peer.
type probe struct {
	argv []string

	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func newProbe(argv ...string) *probe { return &probe{argv: argv} }

func (p *probe) startLocked() error {
	cmd := exec.Command(p.argv[0], append(p.argv[1:], "bash", "-c", probeLoop)...)
	cmd.Env = toolEnv("/")
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd, p.in, p.out = cmd, in, bufio.NewReader(out)
	return nil
}

func (p *probe) stopLocked() {
	if p.cmd == nil {
		return
	}
	p.in.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
	p.cmd = nil
}

func (p *probe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

// run evaluates script (one line) in the box and returns its output without
// the final newline, and its exit status. A probe that does not answer
// within ctx is killed and started again at the next call.
func (p *probe) run(ctx context.Context, script string) (string, int, error) {
	if strings.Contains(script, "\n") {
		return "", 0, errors.New("probe: script must be one line")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		if err := p.startLocked(); err != nil {
			return "", 0, err
		}
	}
	type answer struct {
		out string
		rc  int
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		if _, err := io.WriteString(p.in, script+"\n"); err != nil {
			ch <- answer{err: err}
			return
		}
		var b strings.Builder
		for {
			line, err := p.out.ReadString('\n')
			if err != nil {
				ch <- answer{err: fmt.Errorf("probe ended: %v (output %q)", err, b.String())}
				return
			}
			if rest, ok := strings.CutPrefix(line, "\x01rc="); ok {
				rc, _ := strconv.Atoi(strings.TrimSpace(rest))
				ch <- answer{out: strings.TrimSuffix(b.String(), "\n"), rc: rc}
				return
			}
			b.WriteString(line)
		}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			p.stopLocked()
		}
		return a.out, a.rc, a.err
	case <-ctx.Done():
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.stopLocked()
		return "", 0, fmt.Errorf("probe: %q: %w", script, ctx.Err())
	}
}

// ok runs script and fails unless it exits 0.
func (p *probe) ok(ctx context.Context, script string) (string, error) {
	out, rc, err := p.run(ctx, script)
	if err != nil {
		return out, err
	}
	if rc != 0 {
		return out, fmt.Errorf("in the box: %q exited %d: %s", script, rc, clip(out, 300))
	}
	return out, nil
}

// q quotes s for the shell.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
