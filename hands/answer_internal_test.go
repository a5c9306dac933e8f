package hands

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// namedBox is a Box of which the scripts use only the ID.
type namedBox struct{ providers.Box }

func (namedBox) ID() string { return "answerbox" }

// floodProc is a command that writes chunk to its stdout without end until
// a write fails or its ctx ends: a box that answers without bound.
type floodProc struct {
	offered atomic.Int64 // bytes the command tried to write
	killed  atomic.Bool  // its ctx ended it
	done    chan struct{}
}

const floodChunk = 4 << 10

func (f *floodProc) exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	f.done = make(chan struct{})
	go func() {
		defer close(f.done)
		chunk := []byte(strings.Repeat("x", floodChunk-1) + "\n")
		for {
			if ctx.Err() != nil {
				f.killed.Store(true)
				return
			}
			f.offered.Add(int64(len(chunk)))
			if _, err := req.Stdout.Write(chunk); err != nil {
				<-ctx.Done() // the writer failed: hands kills the command
				f.killed.Store(true)
				return
			}
		}
	}()
	return f, nil
}

func (f *floodProc) Wait() (int, error) {
	<-f.done
	return -1, providers.E(providers.Aborted, "flood.Wait", context.Canceled)
}

func (f *floodProc) Kill(context.Context) error { return nil }

// A script's answer over the cap is TooLarge: the daemon stops taking it at
// the cap and the command is ended, whatever the op.
func TestScriptAnswerOverCap(t *testing.T) {
	const limit = 64 << 10
	for name, op := range map[string]func(*scripts) error{
		"ReadDir":  func(s *scripts) error { _, err := s.ReadDir(context.Background(), "/d"); return err },
		"Walk":     func(s *scripts) error { _, err := s.Walk(context.Background(), "/d"); return err },
		"Stat":     func(s *scripts) error { _, err := s.Stat(context.Background(), "/d"); return err },
		"Readlink": func(s *scripts) error { _, err := s.Readlink(context.Background(), "/d"); return err },
	} {
		t.Run(name, func(t *testing.T) {
			f := &floodProc{}
			s := &scripts{box: namedBox{}, exec: f.exec, liveness: 10 * time.Second, maxAnswer: limit}
			start := time.Now()
			err := op(s)
			if !providers.IsCode(err, providers.TooLarge) {
				t.Fatalf("err = %v, want TooLarge", err)
			}
			if want := fmt.Sprintf("over %d bytes", limit); !strings.Contains(err.Error(), want) {
				t.Errorf("err = %q, want it to say %q", err, want)
			}
			if took := time.Since(start); took > grace {
				t.Errorf("took %v: the command was not ended at the cap", took)
			}
			if n := f.offered.Load(); n > limit+floodChunk {
				t.Errorf("the command got to write %d bytes past a cap of %d", n, limit)
			}
			if !f.killed.Load() {
				t.Error("the command was not ended")
			}
		})
	}
}

func TestAnswerWriterHoldsAtMostMax(t *testing.T) {
	stopped := 0
	w := &answerWriter{max: 1000, stop: func() { stopped++ }}
	for i := 0; i < 9; i++ {
		if _, err := w.Write(make([]byte, 111)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if _, err := w.Write(make([]byte, 1)); err != nil { // 1000: at the cap
		t.Fatal(err)
	}
	if cap(w.b) > 1000 {
		t.Errorf("the buffer grew to %d bytes for a cap of 1000", cap(w.b))
	}
	if _, err := w.Write(make([]byte, 1)); !errors.Is(err, errAnswerOver) || !w.over.Load() || stopped != 1 {
		t.Errorf("the write past the cap: err %v, over %v, stopped %d", err, w.over.Load(), stopped)
	}
	if _, err := w.Write(nil); err == nil || stopped != 1 {
		t.Errorf("a write after the cap: err %v, stopped %d", err, stopped)
	}
}

// hostExec runs a script on this machine, as a box's Exec.
func hostExec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	cmd.Dir = req.Dir
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &hostExecProc{ctx: ctx, cmd: cmd}, nil
}

type hostExecProc struct {
	ctx  context.Context
	cmd  *exec.Cmd
	once sync.Once
	code int
	err  error
}

func (p *hostExecProc) Wait() (int, error) {
	p.once.Do(func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case p.ctx.Err() != nil:
			p.code, p.err = -1, providers.E(0, "hostExec.Wait", p.ctx.Err())
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		case err != nil:
			p.code, p.err = -1, err
		}
	})
	return p.code, p.err
}

func (p *hostExecProc) Kill(context.Context) error {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

// The cap holds a real listing that is over it, and lets every change
// through: a change's output is no answer.
func TestScriptAnswerCapOnHost(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &scripts{box: namedBox{}, exec: hostExec, liveness: 10 * time.Second}
	infos, err := s.ReadDir(ctx, dir)
	if err != nil || len(infos) != 100 {
		t.Fatalf("ReadDir under the default cap: %d entries, %v", len(infos), err)
	}

	s.maxAnswer = 1024
	if _, err := s.ReadDir(ctx, dir); !providers.IsCode(err, providers.TooLarge) {
		t.Errorf("ReadDir of a listing over the cap: %v, want TooLarge", err)
	}
	if _, err := s.Walk(ctx, dir); !providers.IsCode(err, providers.TooLarge) {
		t.Errorf("Walk of a listing over the cap: %v, want TooLarge", err)
	}

	s.maxAnswer = 1
	if err := s.Mkdir(ctx, filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatalf("Mkdir under a cap of 1 byte: %v", err)
	}
	if err := s.WriteFile(ctx, filepath.Join(dir, "sub", "f"), strings.NewReader("hello"), 0o644); err != nil {
		t.Fatalf("WriteFile under a cap of 1 byte: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "f")); err != nil || string(b) != "hello" {
		t.Fatalf("the file written: %q, %v", b, err)
	}
	if _, err := s.Stat(ctx, filepath.Join(dir, "sub", "f")); !providers.IsCode(err, providers.TooLarge) {
		t.Errorf("Stat under a cap of 1 byte: %v, want TooLarge", err)
	}
}
