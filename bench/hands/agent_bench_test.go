package main

// The agent channel's own benchmarks (hands/agent, without hands around
// it), on a Docker box, beside the same operation on a host directory, the
// same agent run as a local subprocess over pipes (the floor without
// Docker in the path), and a raw docker exec:
//
//	go test ./bench/hands -run '^$' -bench Agent -benchtime 2s
//
// Needs an engine (scripts/docker-up); skips without one. Sub-benchmark
// names are op/path, e.g. BenchmarkAgentOps/stat/docker-channel.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

var agentBenchPayload = bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB

type agentBenchEnv struct {
	box     providers.Box
	ch      *agent.Channel
	boxDir  string
	hostDir string
	local   *agent.Client // the agent as a subprocess over pipes
	bin     string
	cleanup []func()
}

// agentBenchSetup makes a Docker box with the fixture, the channel to it,
// a host directory with the same fixture and a local agent, for one
// benchmark function (which must run its body once: b.Loop or b.Run).
func agentBenchSetup(b *testing.B) *agentBenchEnv {
	b.Helper()
	e, err := newAgentBenchEnv(boxfsbin.Path(b))
	if e != nil {
		b.Cleanup(e.close)
	}
	if err != nil {
		b.Skipf("agent benchmark: %v", err)
	}
	return e
}

func (e *agentBenchEnv) close() {
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

func newAgentBenchEnv(bin string) (*agentBenchEnv, error) {
	ctx := context.Background()
	p, err := docker.New(providers.Config{})
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Ping(pctx); err != nil {
		return nil, fmt.Errorf("no Docker engine (scripts/docker-up starts one): %w", err)
	}
	box, err := p.Create(ctx, providers.Spec{Lifetime: time.Hour, Labels: map[string]string{"boxfs-bench": "agent"}})
	if err != nil {
		return nil, err
	}
	e := &agentBenchEnv{box: box, bin: bin, boxDir: "/tmp/agent-bench"}
	e.cleanup = append(e.cleanup, func() { box.Destroy(context.Background()) })
	e.ch = agent.NewChannel(box, agent.ChannelOptions{Binary: bin})
	e.cleanup = append(e.cleanup, func() { e.ch.Close() })
	if err := agentBenchFixture(ctx, e.ch, e.boxDir); err != nil {
		return e, err
	}
	if e.hostDir, err = os.MkdirTemp("", "agent-bench-"); err != nil {
		return e, err
	}
	e.cleanup = append(e.cleanup, func() { os.RemoveAll(e.hostDir) })
	if err := os.Remove(e.hostDir); err != nil {
		return e, err
	}
	if err := agentBenchFixture(ctx, agentBenchOS{}, e.hostDir); err != nil {
		return e, err
	}
	cmd := exec.CommandContext(ctx, bin, "agent")
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 5 * time.Second
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return e, err
	}
	e.cleanup = append(e.cleanup, func() { cmd.Wait() })
	if e.local, err = agent.NewClient(ctx, stdout, stdin, agent.ClientOptions{Box: "local-pipe"}); err != nil {
		stdin.Close()
		return e, err
	}
	e.cleanup = append(e.cleanup, func() { e.local.Close() })
	return e, nil
}

// agentBenchFixture makes f4k and big/ (1,000 files of 100 bytes) under dir.
func agentBenchFixture(ctx context.Context, f providers.Files, dir string) error {
	if err := f.Mkdir(ctx, dir, 0o755); err != nil {
		return err
	}
	if err := f.Mkdir(ctx, dir+"/big", 0o755); err != nil {
		return err
	}
	if err := f.WriteFile(ctx, dir+"/f4k", bytes.NewReader(agentBenchPayload), 0o644); err != nil {
		return err
	}
	for i := range 1000 {
		if err := f.WriteFile(ctx, fmt.Sprintf("%s/big/file-%04d", dir, i), bytes.NewReader(agentBenchPayload[:100]), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type agentBenchOp struct {
	name string
	do   func(ctx context.Context, f providers.Files, dir string) error
}

var agentBenchOps = []agentBenchOp{
	{"stat", func(ctx context.Context, f providers.Files, dir string) error {
		_, err := f.Stat(ctx, dir+"/f4k")
		return err
	}},
	{"read-4KiB", func(ctx context.Context, f providers.Files, dir string) error {
		rc, err := f.ReadFile(ctx, dir+"/f4k")
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err == nil && n != 4096 {
			err = fmt.Errorf("read %d bytes", n)
		}
		return err
	}},
	{"readat-4KiB", func(ctx context.Context, f providers.Files, dir string) error {
		p := make([]byte, 4096)
		_, err := f.ReadAt(ctx, dir+"/f4k", p, 0)
		return err
	}},
	{"atomic-write-4KiB", func(ctx context.Context, f providers.Files, dir string) error {
		return f.WriteFile(ctx, dir+"/w4k", bytes.NewReader(agentBenchPayload), 0o644)
	}},
	{"readdir-1000", func(ctx context.Context, f providers.Files, dir string) error {
		ents, err := f.ReadDir(ctx, dir+"/big")
		if err == nil && len(ents) != 1000 {
			err = fmt.Errorf("%d entries", len(ents))
		}
		return err
	}},
	{"walk-1002+", func(ctx context.Context, f providers.Files, dir string) error {
		ents, err := f.(providers.Walker).Walk(ctx, dir)
		if err == nil && len(ents) < 1002 { // f4k, big/ and its 1,000 files (and w4k once written)
			err = fmt.Errorf("%d entries", len(ents))
		}
		return err
	}},
}

func BenchmarkAgentOps(b *testing.B) {
	e := agentBenchSetup(b)
	paths := []struct {
		name string
		f    providers.Files
		dir  string
	}{
		{"docker-channel", e.ch, e.boxDir},
		{"local-pipe", e.local, e.hostDir},
		{"host-os", agentBenchOS{}, e.hostDir},
	}
	for _, op := range agentBenchOps {
		for _, p := range paths {
			b.Run(op.name+"/"+p.name, func(b *testing.B) {
				ctx := context.Background()
				for b.Loop() {
					if err := op.do(ctx, p.f, p.dir); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkAgentRawExec is the same stat as one docker exec per operation.
func BenchmarkAgentRawExec(b *testing.B) {
	e := agentBenchSetup(b)
	ctx := context.Background()
	for b.Loop() {
		p, err := e.box.Exec(ctx, providers.ExecRequest{Argv: []string{"stat", "-c", "%s %Y", e.boxDir + "/f4k"}, Stdout: io.Discard})
		if err != nil {
			b.Fatal(err)
		}
		if code, err := p.Wait(); err != nil || code != 0 {
			b.Fatal(code, err)
		}
	}
}

// BenchmarkAgentParallelStat: 8 goroutines pipelining stats on the one
// channel; ns/op is the cost per stat with the pipeline full.
func BenchmarkAgentParallelStat(b *testing.B) {
	e := agentBenchSetup(b)
	b.Run("8-goroutines", func(b *testing.B) {
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if _, err := e.ch.Stat(ctx, e.boxDir+"/f4k"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkAgentThroughput moves a 32 MiB file each way over the docker
// channel.
func BenchmarkAgentThroughput(b *testing.B) {
	e := agentBenchSetup(b)
	data := bytes.Repeat([]byte("boxfs agent throughput 0123456789"), (32<<20)/33+1)[:32<<20]
	ctx := context.Background()
	name := e.boxDir + "/big32"
	b.Run("write", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := e.ch.WriteFile(ctx, name, bytes.NewReader(data), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			rc, err := e.ch.ReadFile(ctx, name)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n != int64(len(data)) {
				b.Fatal(n, err)
			}
		}
	})
}

// BenchmarkAgentOpen is bringing a channel up on a box that already has
// the binary (exec + handshake + first stat), and closing it.
func BenchmarkAgentOpen(b *testing.B) {
	e := agentBenchSetup(b)
	ctx := context.Background()
	for b.Loop() {
		ch := agent.NewChannel(e.box, agent.ChannelOptions{Binary: e.bin})
		if _, err := ch.Stat(ctx, "/"); err != nil {
			b.Fatal(err)
		}
		ch.Close()
	}
}

// BenchmarkAgentOpenCold is bringing a channel up on a fresh box: upload
// of the binary + exec + handshake + first stat (box creation not timed).
func BenchmarkAgentOpenCold(b *testing.B) {
	bin := boxfsbin.Path(b)
	p, err := docker.New(providers.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Ping(ctx); err != nil {
		b.Skipf("no Docker engine: %v", err)
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		box, err := p.Create(ctx, providers.Spec{Lifetime: 10 * time.Minute, Labels: map[string]string{"boxfs-bench": "agent"}})
		if err != nil {
			b.Fatal(err)
		}
		ch := agent.NewChannel(box, agent.ChannelOptions{Binary: bin})
		b.StartTimer()
		if _, err := ch.Stat(ctx, "/"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		ch.Close()
		box.Destroy(ctx)
		b.StartTimer()
	}
}

// agentBenchOS is the host-directory column: the os package, with the
// attributes the agent returns (an lstat per readdir entry) and an atomic
// write done as the agent does it.
type agentBenchOS struct{ providers.Files }

func (agentBenchOS) Stat(_ context.Context, name string) (providers.FileInfo, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	return providers.FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), Mtime: fi.ModTime()}, nil
}

func (agentBenchOS) ReadFile(_ context.Context, name string) (io.ReadCloser, error) {
	return os.Open(name)
}

func (agentBenchOS) ReadAt(_ context.Context, name string, p []byte, off int64) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.ReadAt(p, off)
}

func (agentBenchOS) WriteFile(_ context.Context, name string, r io.Reader, perm providers.FileMode) error {
	tmp := filepath.Join(filepath.Dir(name), ".tmp-"+filepath.Base(name))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func (agentBenchOS) ReadDir(_ context.Context, name string) ([]providers.FileInfo, error) {
	des, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	out := make([]providers.FileInfo, 0, len(des))
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, providers.FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), Mtime: fi.ModTime()})
	}
	return out, nil
}

func (o agentBenchOS) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	var out []providers.FileInfo
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, providers.FileInfo{Name: rel, Size: fi.Size(), Mode: fi.Mode(), Mtime: fi.ModTime()})
		return nil
	})
	return out, err
}

func (agentBenchOS) Mkdir(_ context.Context, name string, perm providers.FileMode) error {
	return os.Mkdir(name, perm)
}
