package kubernetes_test

import (
	"context"
	"testing"
	"time"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/kubernetes"
	"github.com/boxfs/boxfs/providers/providertest"
)

func TestConformance(t *testing.T) {
	p := newProvider(t, nil)
	providertest.Run(t, providertest.Harness{
		Provider:    p,
		Spec:        providers.Spec{Labels: map[string]string{testLabel: t.Name()}},
		Unsupported: []string{"snapshot", "region", "gpu", "mounts"},
		Refused: map[string]providers.Spec{
			"isolation=microvm": {Isolation: providers.IsolationMicroVM},
			"isolation=gvisor":  {Isolation: providers.IsolationGVisor},
			"isolation=none":    {Isolation: providers.IsolationNone},
			// The test cluster's bridge plugin enforces no NetworkPolicy,
			// and the provider is not told it does.
			"network=none":      {Network: providers.Network{Mode: providers.NetworkNone}},
			"network=allowlist": {Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"example.com"}}},
		},
	})
}

// testLabel marks every box these tests make, so leftovers of a crashed
// run can be found and removed: kubectl delete pod -l boxfs-test.
const testLabel = "boxfs-test"

// newProvider opens the provider on the test cluster with opts added, or
// skips (fails under BOXFS_REQUIRE_K8S=1) when no cluster answers. Every
// box with testLabel still there when the test ends is deleted.
func newProvider(t *testing.T, opts map[string]string) *kubernetes.Provider {
	t.Helper()
	p := testbox.Kubernetes(t, opts)
	t.Cleanup(func() { sweep(t, p) })
	return p
}

// sweep destroys the boxes of these tests that are left.
func sweep(t *testing.T, p *kubernetes.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	boxes, err := p.List(ctx, map[string]string{testLabel: t.Name()})
	if err != nil {
		t.Errorf("listing leftover boxes: %v", err)
		return
	}
	for _, b := range boxes {
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("destroying leftover box %s: %v", b.ID(), err)
		}
	}
}
