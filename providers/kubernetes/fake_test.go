package kubernetes_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/kubernetes"
	"github.com/boxfs/boxfs/providers/kubernetes/kubetest"
	"github.com/boxfs/boxfs/providers/providertest"
)

// TestConformanceFake runs the conformance suite against the in-process
// fake API server, once over WebSocket v5 and once with WebSocket refused,
// so the executors fall back to SPDY. It needs no cluster and no root.
func TestConformanceFake(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refuseWS bool
		protocol string
	}{
		{"websocket", false, "websocket"},
		{"spdy", true, "spdy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := kubetest.NewServer(kubetest.Options{RefuseWebSocket: tc.refuseWS})
			t.Cleanup(srv.Close)
			kc, err := srv.Kubeconfig(t.TempDir())
			require.NoError(t, err)
			p, err := kubernetes.New(providers.Config{Options: map[string]string{"kubeconfig": kc}})
			require.NoError(t, err)
			providertest.Run(t, providertest.Harness{
				Provider:    p,
				Spec:        providers.Spec{Workspace: t.TempDir()},
				Unsupported: []string{"snapshot", "region", "gpu", "mounts"},
				Refused: map[string]providers.Spec{
					"network=none":      {Network: providers.Network{Mode: providers.NetworkNone}},
					"network=allowlist": {Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"example.com"}}},
					"isolation=gvisor":  {Isolation: providers.IsolationGVisor},
				},
				LargeOutput: 16 << 20,
			})
			assert.Positive(t, srv.Execs(tc.protocol), "execs over %s", tc.protocol)
		})
	}
}
