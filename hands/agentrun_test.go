package hands_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// Commands through the agent's command stream, on a host box and a Docker
// box: what a provider exec gives (streams, stdin, exit codes, kills), and
// what a shared stream must add (no command waits behind another's slow
// reader; a dead stream fails its commands and is replaced).

var agentRunBoxes = []struct {
	name string
	box  func(t *testing.T) providers.Box
}{
	{"box=hostbox", func(t *testing.T) providers.Box { return newHostBox(t) }},
	{"box=docker", testbox.NewDocker},
}

func agentHands(t *testing.T, box providers.Box, liveness time.Duration) *hands.Hands {
	t.Helper()
	return runRoutes[1].hands(t, box, liveness)
}

func runOut(t *testing.T, h *hands.Hands, cmd hands.Command) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	p, err := h.Run(context.Background(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil {
		t.Fatalf("%v: Wait: %v", cmd, err)
	}
	return code, out.String(), errb.String()
}

func TestAgentRunStreams(t *testing.T) {
	for _, b := range agentRunBoxes {
		t.Run(b.name, func(t *testing.T) {
			h := agentHands(t, b.box(t), 0)

			// 64 MiB on each stream at once, and 8 MiB of stdin echoed back.
			const big = 64 << 20
			outSum, errSum := sha256.New(), sha256.New()
			var outN, errN countWriter
			p, err := h.Run(context.Background(), hands.Command{
				Line:   fmt.Sprintf("head -c %d /dev/zero | tr '\\0' o & head -c %d /dev/zero | tr '\\0' e >&2; wait", big, big),
				Stdout: io.MultiWriter(outSum, &outN), Stderr: io.MultiWriter(errSum, &errN),
			})
			if err != nil {
				t.Fatal(err)
			}
			if code, err := p.Wait(); code != 0 || err != nil {
				t.Fatalf("Wait = %d, %v", code, err)
			}
			if outN.n != big || errN.n != big {
				t.Fatalf("got %d bytes of stdout and %d of stderr, want %d each", outN.n, errN.n, big)
			}
			want := sha256.Sum256(bytes.Repeat([]byte("o"), big))
			if !bytes.Equal(outSum.Sum(nil), want[:]) {
				t.Errorf("stdout damaged")
			}

			in := bytes.Repeat([]byte("0123456789abcdef\n"), (8<<20)/17)
			code, out, _ := runOut(t, h, hands.Command{Argv: []string{"cat"}, Stdin: bytes.NewReader(in)})
			if code != 0 || out != string(in) {
				t.Errorf("cat of %d bytes of stdin: exit %d, %d bytes back", len(in), code, len(out))
			}

			// A command with no stdin reads EOF; one that ignores its stdin
			// still ends.
			code, out, _ = runOut(t, h, hands.Command{Line: "wc -c"})
			if code != 0 || strings.TrimSpace(out) != "0" {
				t.Errorf("wc -c of no stdin: %d %q", code, out)
			}
			code, _, _ = runOut(t, h, hands.Command{Line: "exit 7", Stdin: strings.NewReader(strings.Repeat("x", 3<<20))})
			if code != 7 {
				t.Errorf("a command that ignores its stdin: exit %d, want 7", code)
			}

			// Exit codes, signals, a missing program.
			for _, c := range []struct {
				line string
				code int
			}{{"exit 0", 0}, {"exit 255", 255}, {"kill -TERM $$", 128 + 15}} {
				if code, _, _ := runOut(t, h, hands.Command{Line: c.line}); code != c.code {
					t.Errorf("%q: exit %d, want %d", c.line, code, c.code)
				}
			}
			code, _, errs := runOut(t, h, hands.Command{Argv: []string{"no-such-program-boxfs"}})
			if code != 127 || !strings.Contains(errs, "no-such-program-boxfs") {
				t.Errorf("a missing program: exit %d, stderr %q; want 127 naming it", code, errs)
			}

			// One writer for both streams keeps their order.
			var both bytes.Buffer
			runOut(t, h, hands.Command{Line: "echo 1; echo 2 >&2; echo 3; echo 4 >&2", Stdout: &both, Stderr: &both})
			if both.String() != "1\n2\n3\n4\n" {
				t.Errorf("merged streams %q", both.String())
			}

			// Env and dir.
			code, out, _ = runOut(t, h, hands.Command{Line: `printf '%s|%s' "$BOXFS_T" "$PWD"`, Env: map[string]string{"BOXFS_T": "v a\nl"}, Dir: "/"})
			if code != 0 || out != "v a\nl|/" {
				t.Errorf("env and dir: %q", out)
			}
		})
	}
}

type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// blockingWriter blocks every write until released.
type blockingWriter struct {
	release chan struct{}
	buf     bytes.Buffer
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	return b.buf.Write(p)
}

func TestAgentRunShared(t *testing.T) {
	for _, b := range agentRunBoxes {
		t.Run(b.name, func(t *testing.T) {
			h := agentHands(t, b.box(t), 0)
			ctx := context.Background()

			// A command whose reader does not read fills its window; others
			// go on meanwhile.
			slow := &blockingWriter{release: make(chan struct{})}
			sp, err := h.Run(ctx, hands.Command{Line: "head -c 8388608 /dev/zero", Stdout: slow})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var out bytes.Buffer
					p, err := h.Run(ctx, hands.Command{Argv: []string{"sh", "-c", `seq 1 "$1"`, "sh", fmt.Sprint(1000 + i)}, Stdout: &out})
					if err != nil {
						errs <- err
						return
					}
					if code, err := p.Wait(); code != 0 || err != nil {
						errs <- fmt.Errorf("command %d: %d, %v", i, code, err)
						return
					}
					if lines := strings.Count(out.String(), "\n"); lines != 1000+i {
						errs <- fmt.Errorf("command %d: %d lines, want %d", i, lines, 1000+i)
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("commands waited behind a slow reader")
			}
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			close(slow.release)
			if code, err := sp.Wait(); code != 0 || err != nil || slow.buf.Len() != 8<<20 {
				t.Errorf("the slow command: %d, %v, %d bytes", code, err, slow.buf.Len())
			}
		})
	}
}

// TestAgentRunStreamLost: the agent's command stream dies under a running
// command; the command fails with TransportLost within the bound, and the
// next command gets a new stream.
func TestAgentRunStreamLost(t *testing.T) {
	for _, b := range agentRunBoxes {
		t.Run(b.name, func(t *testing.T) {
			const bound = 5 * time.Second
			h := agentHands(t, b.box(t), bound)
			ctx := context.Background()
			p, err := h.Run(ctx, hands.Command{Line: `echo started; sleep 300`, Stdout: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			// Kill the command stream's agent from inside the box.
			pids := commandAgents(t, h)
			// (kill is only a shell builtin in a minimal image.)
			// The killer runs on the stream it kills: the stream may die
			// before it says the killer started.
			kp, err := h.Run(ctx, hands.Command{Argv: append([]string{"sh", "-c", `kill -9 "$@"`, "sh"}, pids...)})
			switch {
			case err == nil:
				kp.Wait()
			case !providers.IsCode(err, providers.TransportLost):
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := p.Wait(); !providers.IsCode(err, providers.TransportLost) {
				t.Errorf("Wait after the stream died: %v, want transport_lost", err)
			}
			if d := time.Since(start); d > 3*bound {
				t.Errorf("the lost stream took %v to notice", d)
			}
			if code, out, _ := runOut(t, h, hands.Command{Line: "echo again"}); code != 0 || out != "again\n" {
				t.Errorf("after a new stream: %d %q", code, out)
			}
		})
	}
}

// TestAgentRunClose: Close returns once the commands still running on the
// command stream are ended; an idle command agent, which Close does not
// wait for, exits by itself at its stdin's EOF.
func TestAgentRunClose(t *testing.T) {
	for _, b := range agentRunBoxes {
		t.Run(b.name, func(t *testing.T) {
			box := b.box(t)
			look := newScriptHands(t, box, 0)
			ctx := context.Background()

			h := agentHands(t, box, 10*time.Second)
			p, err := h.Run(ctx, hands.Command{Line: `echo $$ > busy.tmp && mv busy.tmp busy.pid && exec sleep 300`, Stdout: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			pid := boxPid(t, look, "busy.pid")
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			if boxRuns(t, look, pid) {
				t.Errorf("the command %s still runs when Close returns", pid)
			}
			p.Wait()

			// Idle, then running only the watch, stopped as Close is
			// called (as a box's close does): the agent ends by itself.
			for _, watching := range []bool{false, true} {
				h = agentHands(t, box, 10*time.Second)
				agent := commandAgents(t, h)[0]
				stop, ended := func() {}, make(chan struct{})
				if watching {
					wctx, cancel := context.WithCancel(ctx)
					ready := make(chan struct{})
					go func() {
						defer close(ended)
						h.Watch(wctx, h.Facts().Workspace, func() { close(ready) }, func([]providers.Change, bool) {})
					}()
					<-ready
					stop = cancel
				} else {
					close(ended)
				}
				stop()
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				<-ended
				deadline := time.Now().Add(20 * time.Second)
				for boxRuns(t, look, agent) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				if boxRuns(t, look, agent) {
					t.Errorf("the command agent %s (watching %v) outlived Close by 20 s", agent, watching)
				}
			}
		})
	}
}

// commandAgents returns the pid of the box's command agent (by argv; the
// file channel's agent has no -commands), and fails unless there is one.
func commandAgents(t *testing.T, h *hands.Hands) []string {
	t.Helper()
	// Only this box's agent, in its TmpDir: a host box sees the host's
	// processes, other tests' agents among them.
	code, out, errs := runOut(t, h, hands.Command{Argv: []string{"sh", "-c", `for d in /proc/[0-9]*; do
	c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)
	case $c in "$1"/.boxfs-agent*" agent "*-commands*) echo "${d#/proc/}" ;; esac
done`, "sh", h.Facts().TmpDir}})
	pids := strings.Fields(out)
	if code != 0 || len(pids) != 1 {
		t.Fatalf("want one command agent, found %q (exit %d, %q)", out, code, errs)
	}
	return pids
}

// cmdRecords lists the command records in the box (hands' record
// directory under TmpDir), through a file call: listing them with a command
// would add that command's own record.
func cmdRecords(t *testing.T, h *hands.Hands) []string {
	t.Helper()
	dir := strings.TrimSuffix(h.Facts().TmpDir, "/") + "/.boxfs/cmds"
	ents, err := h.ReadDir(context.Background(), dir)
	if providers.IsCode(err, providers.NotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("listing %s: %v", dir, err)
	}
	var recs []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name, ".tmp") {
			recs = append(recs, e.Name)
		}
	}
	return recs
}

func runScript(t *testing.T, h *hands.Hands, script string) (int, string, string) {
	t.Helper()
	return runOut(t, h, hands.Command{Argv: []string{"sh", "-c", script}})
}

// TestAgentRunHostDies: the host process that started a command through
// the agent dies; the command does not outlive it for long (the agent ends
// the groups of a host that went away), and EndLeftCommands finds nothing
// left or ends what is.
func TestAgentRunHostDies(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := boxfsbin.Path(t)
	for _, b := range agentRunBoxes {
		t.Run(b.name, func(t *testing.T) {
			box := b.box(t)
			spec := "docker:" + box.ID()
			if hb, ok := box.(*hostBox); ok {
				spec = "hostbox:" + strings.TrimSuffix(hb.dir, "/work")
			}
			helper := startHelper(t, exe, helperEnv+"="+spec, helperAgentEnv+"="+bin)
			h := newScriptHands(t, box, 0)
			leftPid := boxPid(t, h, "left.pid")
			if !boxRuns(t, h, leftPid) {
				t.Fatalf("the command should run while its host lives")
			}
			helper.Process.Kill()
			helper.Wait()
			deadline := time.Now().Add(20 * time.Second)
			for boxRuns(t, h, leftPid) && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if boxRuns(t, h, leftPid) {
				t.Errorf("the command %s outlived its host by 20 s", leftPid)
			}
			// The agent removes the command's record only after it has
			// confirmed the whole group gone, a moment after the process
			// above is reaped: wait for the record too, not just the process.
			for len(cmdRecords(t, h)) > 0 && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if n, err := h.EndLeftCommands(context.Background()); err != nil || n != 0 {
				t.Errorf("EndLeftCommands = %d, %v; want no record left", n, err)
			}
		})
	}
}

// TestAgentRunStreamHangs: the command agent stops answering (stopped by a
// signal); a running command fails with Liveness within the bound, and the
// next command gets a new stream.
func TestAgentRunStreamHangs(t *testing.T) {
	for _, b := range agentRunBoxes {
		t.Run(b.name, func(t *testing.T) {
			const bound = 2 * time.Second
			h := agentHands(t, b.box(t), bound)
			ctx := context.Background()
			p, err := h.Run(ctx, hands.Command{Line: `while :; do echo tick; sleep 0.2; done`, Stdout: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			pids := commandAgents(t, h)
			// The kill may stop the agent before it says the kill started:
			// its own outcome does not matter.
			if kp, err := h.Run(ctx, hands.Command{Argv: []string{"sh", "-c", `kill -STOP "$1"`, "sh", pids[0]}}); err == nil {
				kp.Wait()
			}
			start := time.Now()
			_, err = p.Wait()
			if !providers.IsCode(err, providers.Liveness) && !providers.IsCode(err, providers.TransportLost) {
				t.Errorf("Wait on a stopped agent: %v, want liveness", err)
			}
			if d := time.Since(start); d > 5*bound {
				t.Errorf("the hung stream took %v to notice, bound %v", d, bound)
			}
			if code, out, _ := runOut(t, h, hands.Command{Line: "echo again"}); code != 0 || out != "again\n" {
				t.Errorf("after a new stream: %d %q", code, out)
			}
		})
	}
}
