package fake_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/providers/providertest"
)

func TestConformance(t *testing.T) {
	p := fake.New()
	conformancePrograms(p)
	providertest.Run(t, providertest.Harness{
		Provider:      p,
		Unsupported:   []string{"region", "mounts", "capabilities"},
		Lifetime:      time.Second,
		LifetimeSlack: 10 * time.Second,
	})
}

// conformancePrograms registers exactly the argv the conformance suite runs
// (see the providertest package documentation).
func conformancePrograms(p *fake.Provider) {
	p.Program("printf", func(ctx context.Context, pc *fake.Proc) int {
		if len(pc.Argv) < 2 || pc.Argv[1] != providertest.PrintfNUL {
			fmt.Fprintf(pc.Stderr, "fake printf: only the format %q\n", providertest.PrintfNUL)
			return 1
		}
		for _, a := range pc.Argv[2:] {
			io.WriteString(pc.Stdout, a+"\x00")
		}
		return 0
	})
	p.Program("cat", func(ctx context.Context, pc *fake.Proc) int {
		if len(pc.Argv) == 1 {
			if _, err := io.Copy(pc.Stdout, pc.Stdin); err != nil {
				return 1
			}
			return 0
		}
		rc, err := pc.Files.ReadFile(ctx, pc.Argv[1])
		if err != nil {
			fmt.Fprintf(pc.Stderr, "cat: %v\n", err)
			return 1
		}
		defer rc.Close()
		io.Copy(pc.Stdout, rc)
		return 0
	})
	p.Program("env", func(ctx context.Context, pc *fake.Proc) int {
		for _, k := range slices.Sorted(maps.Keys(pc.Env)) {
			fmt.Fprintf(pc.Stdout, "%s=%s\n", k, pc.Env[k])
		}
		return 0
	})
	p.Program("pwd", func(ctx context.Context, pc *fake.Proc) int {
		fmt.Fprintln(pc.Stdout, pc.Dir)
		return 0
	})
	p.Program("sh", shProgram(p))
}

// shProgram runs the scripts of the conformance suite.
func shProgram(p *fake.Provider) fake.Program {
	return func(ctx context.Context, pc *fake.Proc) int {
		if len(pc.Argv) < 4 || pc.Argv[1] != "-c" {
			fmt.Fprintln(pc.Stderr, "fake sh: only sh -c SCRIPT sh ARGS...")
			return 2
		}
		args := pc.Argv[4:]
		switch pc.Argv[2] {
		case providertest.ScriptExit:
			n, _ := strconv.Atoi(args[0])
			return n
		case providertest.ScriptSignal:
			return 128 + map[string]int{"TERM": 15, "KILL": 9}[args[0]]
		case providertest.ScriptGroup:
			fmt.Fprintf(pc.Stdout, "%d\n%d\n%d\n", pc.Spawn(), pc.Spawn(), pc.PID)
			<-ctx.Done()
			return 143
		case providertest.ScriptAlive:
			for _, a := range args {
				if pid, err := strconv.Atoi(a); err == nil && pc.Alive(pid) {
					fmt.Fprintln(pc.Stdout, a)
				}
			}
			return 0
		case providertest.ScriptLarge:
			n, _ := strconv.ParseInt(args[0], 10, 64)
			rng := rand.NewChaCha8([32]byte{byte(n)})
			buf := make([]byte, 32<<10)
			for n > 0 {
				k := min(n, int64(len(buf)))
				rng.Read(buf[:k])
				if _, err := pc.Stdout.Write(buf[:k]); err != nil {
					return 1
				}
				if _, err := pc.Stderr.Write(buf[:k]); err != nil {
					return 1
				}
				n -= k
			}
			return 0
		case providertest.ScriptHomeWrite:
			if err := pc.Files.WriteFile(ctx, pc.Env["HOME"]+"/boxfs-conformance-file", strings.NewReader(args[0]), 0o644); err != nil {
				fmt.Fprintln(pc.Stderr, err)
				return 1
			}
			return 0
		case providertest.ScriptHomeCat:
			rc, err := pc.Files.ReadFile(ctx, pc.Env["HOME"]+"/boxfs-conformance-file")
			if err != nil {
				fmt.Fprintln(pc.Stderr, err)
				return 1
			}
			defer rc.Close()
			io.Copy(pc.Stdout, rc)
			return 0
		case providertest.ScriptSleepPrint:
			secs, _ := strconv.Atoi(args[0])
			if err := p.Clock().Sleep(ctx, "sleep", time.Duration(secs)*time.Second); err != nil {
				return 130
			}
			io.WriteString(pc.Stdout, args[1])
			return 0
		}
		fmt.Fprintf(pc.Stderr, "fake sh: no such script %q\n", pc.Argv[2])
		return 2
	}
}

var _ providers.Provider = (*fake.Provider)(nil)
