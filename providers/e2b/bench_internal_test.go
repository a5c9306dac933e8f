package e2b

// Per-operation latency against the fake: the agent channel (one
// long-lived envd process, one round trip on its stream per operation),
// envd's own calls (a Connect RPC or an HTTP request each), and hands's
// scripts (one envd process per operation):
//
//	go test ./providers/e2b -run '^$' -bench Ops -benchtime 300x
//
// BOXFS_E2B_BENCH_LATENCY (a duration) delays every answer of the fake,
// as a network between host and E2B would (streams only at their start).
//
// Sub-benchmarks are op/path, e.g. BenchmarkOps/stat/agent.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem"
)

func BenchmarkOps(b *testing.B) {
	latency, _ := time.ParseDuration(os.Getenv("BOXFS_E2B_BENCH_LATENCY"))
	srv := e2btest.New(e2btest.Options{Latency: latency})
	b.Cleanup(srv.Close)
	p, err := New(providers.Config{Options: map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	pb, err := p.Create(ctx, providers.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pb.Destroy(context.Background()) })
	box := pb.(*Box)
	agent, err := hands.New(ctx, box, hands.Options{AgentBinary: boxfsbin.Path(b), Force: hands.ViaAgent})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { agent.Close() })
	script, err := hands.New(ctx, box, hands.Options{Force: hands.ViaScript})
	if err != nil {
		b.Fatal(err)
	}
	ws := agent.Facts().Workspace
	payload := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	file := path.Join(ws, "f")
	dir := path.Join(ws, "d")
	if err := agent.WriteFile(ctx, file, bytes.NewReader(payload), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := agent.Mkdir(ctx, dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		if err := agent.WriteFile(ctx, path.Join(dir, fmt.Sprint(i)), bytes.NewReader(payload[:100]), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	envdStat := func() error {
		_, err := box.envd.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: file}))
		return err
	}
	envdList := func() error {
		_, err := box.envd.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: dir, Depth: 1}))
		return err
	}
	envdUpload := func() error { return upload(ctx, box, file+".up", payload) }
	read := func(f interface {
		ReadFile(context.Context, string) (io.ReadCloser, error)
	}) func() error {
		return func() error {
			rc, err := f.ReadFile(ctx, file)
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(io.Discard, rc)
			return err
		}
	}
	for _, c := range []struct {
		op, path string
		fn       func() error
	}{
		{"stat", "agent", func() error { _, err := agent.Stat(ctx, file); return err }},
		{"stat", "envd", envdStat},
		{"stat", "script", func() error { _, err := script.Stat(ctx, file); return err }},
		{"read-4k", "agent", read(agent)},
		{"read-4k", "envd", read(box)},
		{"read-4k", "script", read(script)},
		{"write-4k", "agent", func() error { return agent.WriteFile(ctx, file+".a", bytes.NewReader(payload), 0o644) }},
		{"write-4k", "envd", envdUpload},
		{"write-4k", "script", func() error { return script.WriteFile(ctx, file+".s", bytes.NewReader(payload), 0o644) }},
		{"readdir-100", "agent", func() error { _, err := agent.ReadDir(ctx, dir); return err }},
		{"readdir-100", "envd", envdList},
		{"readdir-100", "script", func() error { _, err := script.ReadDir(ctx, dir); return err }},
	} {
		b.Run(c.op+"/"+c.path, func(b *testing.B) {
			for b.Loop() {
				if err := c.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// upload writes a file with envd's POST /files (raw body), the direct
// call a write costs without the agent.
func upload(ctx context.Context, b *Box, name string, data []byte) error {
	q := url.Values{"path": {name}, "username": {b.p.user}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.envd.base+"/files?"+q.Encode(), bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := b.envd.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upload: HTTP %d", resp.StatusCode)
	}
	return nil
}
