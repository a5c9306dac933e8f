package kubernetes_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// DefaultKubeconfig is where scripts/k8s-up writes the test cluster's
// kubeconfig; BOXFS_K8S_KUBECONFIG names another.
const defaultKubeconfig = "/var/lib/boxfs-k8s/kubeconfig"

func kubeconfig() string {
	if v := os.Getenv("BOXFS_K8S_KUBECONFIG"); v != "" {
		return v
	}
	return defaultKubeconfig
}

// requireK8s fails the test when BOXFS_REQUIRE_K8S=1 (CI), else skips it.
func requireK8s(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("BOXFS_REQUIRE_K8S") == "1" {
		t.Fatalf("BOXFS_REQUIRE_K8S=1: "+format, args...)
	}
	t.Skipf(format+" (scripts/k8s-up starts a cluster; set BOXFS_REQUIRE_K8S=1 to fail instead of skipping)", args...)
}

// newProvider opens the provider on the test cluster with opts added, or
// skips (fails under BOXFS_REQUIRE_K8S=1) when no cluster answers. Every
// box with testLabel still there when the test ends is deleted.
func newProvider(t *testing.T, opts map[string]string) *kubernetes.Provider {
	t.Helper()
	kc := kubeconfig()
	if _, err := os.Stat(kc); err != nil {
		requireK8s(t, "no kubeconfig at %s: %v", kc, err)
	}
	o := map[string]string{"kubeconfig": kc}
	for k, v := range opts {
		o[k] = v
	}
	p, err := kubernetes.New(providers.Config{Options: o})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		requireK8s(t, "the cluster of %s does not answer: %v", kc, err)
	}
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
