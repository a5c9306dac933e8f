package hands_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// signalAgent sends sig to the box's agent process, found by its binary's
// path under the box's TmpDir (nothing else runs from there), through a
// command in the box.
func signalAgent(t *testing.T, h *hands.Hands, sig string) {
	t.Helper()
	const script = `n=0
for d in /proc/[0-9]*; do
	x=$(readlink "$d/exe" 2>/dev/null) || continue
	case $x in "$1"/.boxfs-agent-*) kill -s "$2" "${d#/proc/}" && n=$((n + 1)) ;; esac
done
[ "$n" -gt 0 ]
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	// Through the provider, not h.Run: h has the test's short liveness
	// bound, which a loaded machine's docker exec start can exceed.
	p, err := h.Box().Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", script, "sh", strings.TrimSuffix(h.Facts().TmpDir, "/"), sig}, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("signalling the agent: %d, %v %s", code, err, out.String())
	}
}

// TestAgentRestart: a killed agent is reported as transport_lost and
// restarted on the next call; a stopped (hung) agent returns liveness within
// its bound, and the channel comes back.
func TestAgentRestart(t *testing.T) {
	const bound = 2 * time.Second
	for _, tc := range []struct {
		name string
		box  func(*testing.T) providers.Box
	}{
		{"box=local", newLocalBox},
		{"box=docker", testbox.NewDocker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, root := openOn(t, tc.box(t), hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t), Liveness: bound})
			ctx := context.Background()
			if err := h.WriteFile(ctx, root+"/f", strings.NewReader("kept"), 0o644); err != nil {
				t.Fatal(err)
			}

			signalAgent(t, h, "KILL")
			_, err := h.Stat(ctx, root+"/f")
			if !providers.IsCode(err, providers.TransportLost) {
				t.Errorf("first call after the agent was killed: %v, want transport_lost", err)
			}
			fi, err := h.Stat(ctx, root+"/f")
			if err != nil || fi.Size != 4 {
				t.Fatalf("the call after that should restart the agent: %+v, %v", fi, err)
			}
			st, _ := h.AgentStats()
			if st.Restarts < 1 || !st.Up {
				t.Errorf("stats after the restart: %+v", st)
			}

			signalAgent(t, h, "STOP")
			start := time.Now()
			_, err = h.Stat(ctx, root+"/f")
			if !providers.IsCode(err, providers.Liveness) {
				t.Errorf("a call to a stopped agent: %v, want liveness", err)
			}
			if d := time.Since(start); d > 5*bound {
				t.Errorf("liveness took %v with a bound of %v", d, bound)
			}
			var got string
			for range 3 {
				rc, err := h.ReadFile(ctx, root+"/f")
				if err != nil {
					continue
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err == nil {
					got = string(b)
					break
				}
			}
			if got != "kept" {
				t.Errorf("after the hung agent, reading back gave %q", got)
			}
		})
	}
}
