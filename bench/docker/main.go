// Command docker measures the Docker provider on this machine: per-exec
// latency, create+start time, and archive put/get throughput for one file of
// 100 MiB and for 1,000 files of 4 KiB.
//
// Usage (an engine must answer, see scripts/docker-up):
//
//	go run ./bench/docker [-n 30] [-rounds 3]
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

func main() {
	n := flag.Int("n", 30, "execs to time")
	rounds := flag.Int("rounds", 3, "rounds of each create and archive measurement")
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()

	p, err := docker.New(providers.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if err := p.Ping(ctx); err != nil {
		log.Fatalf("no engine: %v", err)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("machine load average at start: %s", load)

	// create+start
	var creates, destroys []time.Duration
	for range *rounds + 2 {
		t0 := time.Now()
		b, err := p.Create(ctx, providers.Spec{Labels: map[string]string{"boxfs-bench": "1"}, Lifetime: 10 * time.Minute})
		if err != nil {
			log.Fatal(err)
		}
		creates = append(creates, time.Since(t0))
		t0 = time.Now()
		if err := b.Destroy(ctx); err != nil {
			log.Fatal(err)
		}
		destroys = append(destroys, time.Since(t0))
	}
	fmt.Printf("create+start (returns running): %s\n", stats(creates))
	fmt.Printf("destroy (force remove):         %s\n", stats(destroys))

	b, err := p.Create(ctx, providers.Spec{Labels: map[string]string{"boxfs-bench": "1"}, Lifetime: 30 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Destroy(context.Background())

	// per-exec latency: the provider's Exec (wrapper, marker, exit code) ...
	var execs []time.Duration
	for range *n + 2 {
		t0 := time.Now()
		proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
		if err != nil {
			log.Fatal(err)
		}
		if code, err := proc.Wait(); err != nil || code != 0 {
			log.Fatalf("true: %d %v", code, err)
		}
		execs = append(execs, time.Since(t0))
	}
	fmt.Printf("Exec true, provider (n=%d):     %s\n", *n, stats(execs[2:]))
	// ... and a bare exec through the same API, for the wrapper's share.
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		log.Fatal(err)
	}
	var raw []time.Duration
	for range *n + 2 {
		t0 := time.Now()
		rawExec(ctx, cli, b.ID(), []string{"true"})
		raw = append(raw, time.Since(t0))
	}
	fmt.Printf("exec true, bare API (n=%d):     %s\n", *n, stats(raw[2:]))
	var facts []time.Duration
	for range *rounds {
		t0 := time.Now()
		bb, err := p.Attach(ctx, b.ID()) // a fresh handle measures again
		if err != nil {
			log.Fatal(err)
		}
		if _, err := bb.Facts(ctx); err != nil {
			log.Fatal(err)
		}
		facts = append(facts, time.Since(t0))
	}
	fmt.Printf("Attach+Facts (one exec):        %s\n", stats(facts))

	a := b.(providers.Archiver)
	st := b.(providers.PathStater)

	// one file of 100 MiB
	big := make([]byte, 100<<20)
	rand.Read(big)
	bigTar := tarOf(map[string][]byte{"big.bin": big})
	putGet(ctx, a, st, "1 file of 100 MiB", bigTar, "/tmp/big", "/tmp/big/big.bin", 100<<20, *rounds, b)

	// 1,000 files of 4 KiB
	small := map[string][]byte{}
	for i := range 1000 {
		d := make([]byte, 4096)
		rand.Read(d)
		small[fmt.Sprintf("many/d%02d/f%04d", i/50, i)] = d
	}
	smallTar := tarOf(small)
	putGet(ctx, a, st, "1,000 files of 4 KiB", smallTar, "/tmp/small", "/tmp/small/many", 1000*4096, *rounds, b)
	// The same put straight through the API, for the provider's share
	// (it rewrites every entry's owner to the box's user on the way).
	var bare []time.Duration
	for range *rounds {
		mustExec(ctx, b, "rm", "-rf", "/tmp/small")
		mustExec(ctx, b, "mkdir", "-p", "/tmp/small")
		t0 := time.Now()
		if err := cli.CopyToContainer(ctx, b.ID(), "/tmp/small", bytes.NewReader(smallTar), container.CopyToContainerOptions{}); err != nil {
			log.Fatal(err)
		}
		bare = append(bare, time.Since(t0))
	}
	fmt.Printf("CopyToContainer 1,000 files, bare API: %s\n", stats(bare))

	var stats1 []time.Duration
	for range *n {
		t0 := time.Now()
		if _, err := st.StatPath(ctx, "/tmp/big/big.bin"); err != nil {
			log.Fatal(err)
		}
		stats1 = append(stats1, time.Since(t0))
	}
	fmt.Printf("StatPath (n=%d):                %s\n", *n, stats(stats1))
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("machine load average at end: %s", load)
}

func putGet(ctx context.Context, a providers.Archiver, st providers.PathStater, what string, tarball []byte, dir, get string, payload int64, rounds int, b providers.Box) {
	var puts, gets []time.Duration
	for range rounds {
		mustExec(ctx, b, "rm", "-rf", dir)
		mustExec(ctx, b, "mkdir", "-p", dir)
		t0 := time.Now()
		if err := a.PutArchive(ctx, dir, bytes.NewReader(tarball)); err != nil {
			log.Fatal(err)
		}
		puts = append(puts, time.Since(t0))
		t0 = time.Now()
		rc, err := a.GetArchive(ctx, get)
		if err != nil {
			log.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n < payload {
			log.Fatalf("get: %d bytes, %v", n, err)
		}
		gets = append(gets, time.Since(t0))
	}
	mib := float64(payload) / (1 << 20)
	fmt.Printf("PutArchive %-20s %s  = %.0f MiB/s at the median\n", what+":", stats(puts), mib/median(puts).Seconds())
	fmt.Printf("GetArchive %-20s %s  = %.0f MiB/s at the median\n", what+":", stats(gets), mib/median(gets).Seconds())
}

func mustExec(ctx context.Context, b providers.Box, argv ...string) {
	proc, err := b.Exec(ctx, providers.ExecRequest{Argv: argv, Dir: "/"})
	if err != nil {
		log.Fatal(err)
	}
	if code, err := proc.Wait(); err != nil || code != 0 {
		log.Fatalf("%q: %d %v", argv, code, err)
	}
}

func rawExec(ctx context.Context, cli *client.Client, id string, argv []string) {
	c, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		log.Fatal(err)
	}
	hj, err := cli.ContainerExecAttach(ctx, c.ID, container.ExecAttachOptions{})
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, hj.Reader)
	hj.Close()
	for {
		ins, err := cli.ContainerExecInspect(ctx, c.ID)
		if err != nil {
			log.Fatal(err)
		}
		if !ins.Running {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func tarOf(files map[string][]byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		parts := strings.Split(n, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if !dirs[d] {
				dirs[d] = true
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Now()})
			}
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Now()})
		tw.Write(files[n])
	}
	tw.Close()
	return buf.Bytes()
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func stats(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	p90 := s[min(len(s)-1, len(s)*9/10)]
	return fmt.Sprintf("median %6.1f ms  min %6.1f  p90 %6.1f  (n=%d)", ms(median(s)), ms(s[0]), ms(p90), len(s))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
