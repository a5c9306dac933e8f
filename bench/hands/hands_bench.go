// Command hands_bench measures hands's per-operation latency on a Docker box
// for each path (agent channel, native stat/archive API + scripts, scripts
// alone), side by side with a raw docker exec per operation and with the
// same operation on a host directory through the os package.
//
// Usage (as root, with an engine from scripts/docker-up):
//
//	go run ./bench/hands [-n 200] [-slow 20] [-agent PATH]
//
// -n is the number of samples for the fast paths (agent, host), -slow for
// the paths that spend an exec per operation. -agent names a static boxfs
// binary; by default one is built. It prints one table of medians and p90s
// in milliseconds.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

var (
	fastN  = flag.Int("n", 200, "samples per operation for the agent and the host directory")
	slowN  = flag.Int("slow", 20, "samples per operation for paths that run an exec per operation")
	binary = flag.String("agent", "", "static boxfs binary to run as the agent (default: build one)")
)

// op is one measured operation on a Files under a directory holding f4k (4
// KiB) and big/ (1,000 entries).
type op struct {
	name string
	do   func(ctx context.Context, f providers.Files, dir string, i int) error
}

var payload = bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB

var ops = []op{
	{"stat", func(ctx context.Context, f providers.Files, dir string, i int) error {
		_, err := f.Stat(ctx, dir+"/f4k")
		return err
	}},
	{"read 4 KiB", func(ctx context.Context, f providers.Files, dir string, i int) error {
		rc, err := f.ReadFile(ctx, dir+"/f4k")
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err := io.Copy(io.Discard, rc)
		if err == nil && n != 4096 {
			err = fmt.Errorf("read %d bytes", n)
		}
		return err
	}},
	{"atomic write 4 KiB", func(ctx context.Context, f providers.Files, dir string, i int) error {
		return f.WriteFile(ctx, dir+"/w4k", bytes.NewReader(payload), 0o644)
	}},
	{"readdir 1,000", func(ctx context.Context, f providers.Files, dir string, i int) error {
		ents, err := f.ReadDir(ctx, dir+"/big")
		if err == nil && len(ents) != 1000 {
			err = fmt.Errorf("%d entries", len(ents))
		}
		return err
	}},
}

// column is one way of doing the operations.
type column struct {
	name  string
	files providers.Files
	dir   string
	n     int
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()

	bin := *binary
	if bin == "" {
		var err error
		if bin, err = buildAgent(); err != nil {
			log.Fatalf("building the agent: %v", err)
		}
		defer os.RemoveAll(filepath.Dir(bin))
	}

	p, err := docker.New(providers.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if err := p.Ping(ctx); err != nil {
		log.Fatalf("no Docker engine (scripts/docker-up starts one): %v", err)
	}
	box, err := p.Create(ctx, providers.Spec{Lifetime: time.Hour, Labels: map[string]string{"boxfs-bench": "hands"}})
	if err != nil {
		log.Fatal(err)
	}
	defer box.Destroy(context.Background())
	facts, err := box.Facts(ctx)
	if err != nil {
		log.Fatal(err)
	}
	boxDir := facts.Workspace + "/bench"
	if err := fixture(ctx, box, facts.Workspace); err != nil {
		log.Fatalf("fixture: %v", err)
	}

	hostDir, err := os.MkdirTemp("", "hands-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(hostDir)
	if err := hostFixture(hostDir); err != nil {
		log.Fatal(err)
	}

	var cols []column
	for _, via := range []string{hands.ViaAgent, hands.ViaNative, hands.ViaScript} {
		t0 := time.Now()
		h, err := hands.New(ctx, box, hands.Options{AgentBinary: bin, Force: via})
		if err != nil {
			log.Fatalf("hands via %s: %v", via, err)
		}
		defer h.Close()
		n := *slowN
		if via == hands.ViaAgent {
			n = *fastN
			fmt.Printf("agent channel up (upload + exec + handshake) in %.0f ms\n", ms(time.Since(t0)))
		}
		cols = append(cols, column{"hands " + via, h, boxDir, n})
	}
	cols = append(cols, column{"raw docker exec", rawExec{box}, boxDir, *slowN})
	cols = append(cols, column{"host dir (os)", hostFiles{}, hostDir, *fastN})

	// Samples are taken round-robin across the columns, so that the load of
	// a shared machine falls on every column alike.
	results := map[string]map[string]stats{}
	for _, c := range cols {
		results[c.name] = map[string]stats{}
	}
	for _, o := range ops {
		samples := make([][]float64, len(cols))
		for _, c := range cols {
			if err := o.do(ctx, c.files, c.dir, -1); err != nil { // warm up
				log.Fatalf("%s / %s: %v", c.name, o.name, err)
			}
		}
		for i := 0; ; i++ {
			more := false
			for ci, c := range cols {
				if i >= c.n {
					continue
				}
				more = true
				t0 := time.Now()
				if err := o.do(ctx, c.files, c.dir, i); err != nil {
					log.Fatalf("%s / %s: %v", c.name, o.name, err)
				}
				samples[ci] = append(samples[ci], ms(time.Since(t0)))
			}
			if !more {
				break
			}
		}
		for ci, c := range cols {
			results[c.name][o.name] = summarize(samples[ci])
		}
	}

	fmt.Printf("\nper-operation latency, ms, median / p90 (samples: %d fast, %d per exec path); %s\n\n", *fastN, *slowN, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("| operation |")
	for _, c := range cols {
		fmt.Printf(" %s |", c.name)
	}
	fmt.Printf("\n|---|")
	for range cols {
		fmt.Printf("---|")
	}
	fmt.Println()
	for _, o := range ops {
		fmt.Printf("| %s |", o.name)
		for _, c := range cols {
			s := results[c.name][o.name]
			fmt.Printf(" %s / %s |", num(s.median), num(s.p90))
		}
		fmt.Println()
	}
}

type stats struct{ median, p90 float64 }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func num(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func summarize(d []float64) stats {
	slices.Sort(d)
	return stats{median: d[len(d)/2], p90: d[len(d)*9/10]}
}

// fixture makes bench/f4k and bench/big/ (1,000 files of 100 bytes) under
// ws in the box with one archive.
func fixture(ctx context.Context, box providers.Box, ws string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte) {
		typ := byte(tar.TypeReg)
		if strings.HasSuffix(name, "/") {
			typ = tar.TypeDir
		}
		tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: typ, ModTime: time.Now()})
		tw.Write(data)
	}
	add("bench/", 0o755, nil)
	add("bench/big/", 0o755, nil)
	add("bench/f4k", 0o644, payload)
	for i := range 1000 {
		add(fmt.Sprintf("bench/big/file-%04d", i), 0o644, payload[:100])
	}
	tw.Close()
	ar, ok := box.(providers.Archiver)
	if !ok {
		return fmt.Errorf("the box has no archive API")
	}
	return ar.PutArchive(ctx, ws, &buf)
}

func hostFixture(dir string) error {
	if err := os.WriteFile(dir+"/f4k", payload, 0o644); err != nil {
		return err
	}
	if err := os.Mkdir(dir+"/big", 0o755); err != nil {
		return err
	}
	for i := range 1000 {
		if err := os.WriteFile(fmt.Sprintf("%s/big/file-%04d", dir, i), payload[:100], 0o644); err != nil {
			return err
		}
	}
	return nil
}

func buildAgent() (string, error) {
	dir, err := os.MkdirTemp("", "hands-bench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "boxfs")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/boxfs/boxfs/cmd/boxfs")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	return bin, nil
}
