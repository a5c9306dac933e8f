package hands_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// TestDirectChannel: on a Docker box the agent's requests go over a direct
// connection (a unix socket under the container's root, which this test,
// run as root, may reach; with network=none too), files and commands work,
// and a killed agent is lost and restarted as over the exec.
func TestDirectChannel(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec providers.Spec
	}{
		{"box=docker", providers.Spec{}},
		{"box=docker/network=none", providers.Spec{Network: providers.Network{Mode: providers.NetworkNone}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := testbox.NewDockerOf(t, tc.spec)
			if _, ok := box.(providers.DirectDialer); !ok {
				t.Fatal("the Docker box is not a providers.DirectDialer")
			}
			h, root := openOn(t, box, hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t), Liveness: 5 * time.Second})
			st, _ := h.AgentStats()
			if !strings.HasPrefix(st.Direct, "unix ") {
				t.Fatalf("agent stats: direct %q (off: %q), want a unix route", st.Direct, st.DirectOff)
			}
			ctx := context.Background()
			if err := h.WriteFile(ctx, root+"/f", strings.NewReader("over the socket"), 0o644); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			p, err := h.Run(ctx, hands.Command{Line: "cat " + root + "/f", Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			if code, err := p.Wait(); code != 0 || err != nil || out.String() != "over the socket" {
				t.Fatalf("cat in the box: %d, %v, %q", code, err, out.String())
			}
			if err := h.Remove(ctx, root+"/f"); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Lstat(ctx, root+"/f"); !providers.IsCode(err, providers.NotFound) {
				t.Fatalf("after Remove: %v, want not_found", err)
			}

			signalAgent(t, h, "KILL")
			if _, err := h.Stat(ctx, root); !providers.IsCode(err, providers.TransportLost) {
				t.Errorf("first call after the agent was killed: %v, want transport_lost", err)
			}
			if _, err := h.Stat(ctx, root); err != nil {
				t.Fatalf("the call after that should restart the agent: %v", err)
			}
			st, _ = h.AgentStats()
			if st.Opens != 2 || !strings.HasPrefix(st.Direct, "unix ") {
				t.Errorf("after the restart: opens %d, direct %q (off: %q)", st.Opens, st.Direct, st.DirectOff)
			}
		})
	}
}

// routeBox is a box whose direct routes are the test's.
type routeBox struct {
	providers.Box
	routes []providers.DirectRoute
}

func (b routeBox) DirectRoutes(ctx context.Context) ([]providers.DirectRoute, error) {
	return b.routes, nil
}

// TestDirectChannelFallback: a real agent in a Docker box whose only route
// does not answer (a TCP address that is not the box's: what Docker
// Desktop's VM address is to the host) keeps the requests on the exec's
// stdio, says why, and serves files there.
func TestDirectChannelFallback(t *testing.T) {
	box := routeBox{testbox.NewDocker(t), []providers.DirectRoute{
		{Network: providers.DirectTCP, Host: "192.0.2.1", Why: "unreachable"}, // TEST-NET-1
	}}
	ch := agent.NewChannel(box, agent.ChannelOptions{Binary: boxfsbin.Path(t)})
	t.Cleanup(func() { ch.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := ch.WriteFile(ctx, "/tmp/f", strings.NewReader("over stdio"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := ch.ReadFile(ctx, "/tmp/f")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "over stdio" {
		t.Fatalf("read back %q, %v", b, err)
	}
	st := ch.Stats()
	if st.Direct != "" || !strings.Contains(st.DirectOff, "unreachable") {
		t.Fatalf("stats: direct %q, off %q; want no direct route, and why", st.Direct, st.DirectOff)
	}
}
