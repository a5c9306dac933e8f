package hands_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// hostBox is a tiny in-test Box: its Exec runs argv on this machine, in its
// own process group, in a temp workspace. It has no file API of its own, so
// hands drives it with scripts (or the agent).
type hostBox struct {
	id    string
	dir   string // the workspace
	tmp   string
	shell string

	arch string // reported as Facts.Arch when set (a foreign box)

	mu   sync.Mutex
	hang bool // Exec and Status never answer until ctx ends
}

func newHostBox(t testing.TB) *hostBox {
	t.Helper()
	b, err := hostBoxAt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostBoxAt makes a hostBox in dir (work/ and tmp/ under it).
func hostBoxAt(dir string) (*hostBox, error) {
	b := &hostBox{id: "hostbox-" + filepath.Base(dir), dir: filepath.Join(dir, "work"), tmp: filepath.Join(dir, "tmp"), shell: "/bin/sh"}
	if _, err := os.Stat("/bin/bash"); err == nil {
		b.shell = "/bin/bash"
	}
	for _, d := range []string{b.dir, b.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *hostBox) ID() string                { return b.id }
func (b *hostBox) Labels() map[string]string { return nil }
func (b *hostBox) Destroy(context.Context) error {
	return nil
}

func (b *hostBox) Facts(ctx context.Context) (providers.Facts, error) {
	arch := runtime.GOARCH
	if b.arch != "" {
		arch = b.arch
	}
	return providers.Facts{
		Provider: "hostbox", ID: b.id, OS: runtime.GOOS, Arch: arch,
		Workspace: b.dir, TmpDir: b.tmp, Shell: b.shell,
		LiveProcesses: providers.Bool(true), Stdin: providers.Bool(true),
	}, nil
}

func (b *hostBox) hung() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hang
}

func (b *hostBox) setHang(v bool) {
	b.mu.Lock()
	b.hang = v
	b.mu.Unlock()
}

func (b *hostBox) Status(ctx context.Context) (providers.Status, error) {
	if b.hung() {
		<-ctx.Done()
		return providers.Status{}, providers.E(0, "hostbox.Status", ctx.Err())
	}
	return providers.Status{State: providers.StateRunning}, nil
}

func (b *hostBox) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	if b.hung() {
		<-ctx.Done()
		return nil, providers.E(0, "hostbox.Exec", ctx.Err())
	}
	if len(req.Argv) == 0 {
		return nil, providers.Errorf(providers.Invalid, "hostbox.Exec", "empty argv")
	}
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	cmd.Dir = req.Dir
	if cmd.Dir == "" {
		cmd.Dir = b.dir
	}
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + b.dir, "TMPDIR=" + b.tmp}
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = req.Stdin
	cmd.Stdout = req.Stdout
	cmd.Stderr = req.Stderr
	if err := cmd.Start(); err != nil {
		return nil, providers.E(providers.Unknown, "hostbox.Exec", err)
	}
	return &hostProc{ctxErr: ctx.Err, cmd: cmd, done: make(chan struct{})}, nil
}

type hostProc struct {
	ctxErr func() error // the exec's ctx.Err, to classify its end
	cmd    *exec.Cmd
	once   sync.Once
	done   chan struct{}
	code   int
	err    error
}

func (p *hostProc) Wait() (int, error) {
	p.once.Do(func() {
		err := p.cmd.Wait()
		pg := p.cmd.Process.Pid
		syscall.Kill(-pg, syscall.SIGKILL)
		switch {
		case p.ctxErr() != nil:
			p.code, p.err = -1, providers.E(0, "hostbox.Wait", p.ctxErr())
		case err == nil:
		default:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					p.code = 128 + int(ws.Signal())
				} else {
					p.code = ee.ExitCode()
				}
			} else {
				p.code, p.err = -1, providers.E(providers.Unknown, "hostbox.Wait", err)
			}
		}
		close(p.done)
	})
	return p.code, p.err
}

func (p *hostProc) Kill(ctx context.Context) error {
	pg := p.cmd.Process.Pid
	for d := time.Millisecond; ; d *= 2 {
		if err := syscall.Kill(-pg, syscall.SIGKILL); err == syscall.ESRCH {
			return nil
		}
		select {
		case <-ctx.Done():
			return providers.E(0, "hostbox.Kill", ctx.Err())
		case <-time.After(d):
		}
	}
}
