package testbox

import (
	"context"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/kubernetes"
)

// DefaultKubeconfig is where scripts/k8s-up writes the test cluster's
// kubeconfig (its context's namespace is boxfs-test).
const DefaultKubeconfig = "/var/lib/boxfs-k8s/kubeconfig"

// Kubeconfig is the test cluster's kubeconfig: BOXFS_K8S_KUBECONFIG, else
// DefaultKubeconfig. Tests never fall back to KUBECONFIG or ~/.kube/config:
// those may name a cluster that is not for tests.
func Kubeconfig() string {
	if v := os.Getenv("BOXFS_K8S_KUBECONFIG"); v != "" {
		return v
	}
	return DefaultKubeconfig
}

// RequireK8s fails the test when BOXFS_REQUIRE_K8S=1 (CI), else skips it;
// format and args say what is missing.
func RequireK8s(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("BOXFS_REQUIRE_K8S") == "1" {
		t.Fatalf("BOXFS_REQUIRE_K8S=1: "+format, args...)
	}
	t.Skipf(format+" (scripts/k8s-up starts a cluster; set BOXFS_REQUIRE_K8S=1 to fail instead of skipping)", args...)
}

// Kubernetes opens the kubernetes provider on the test cluster with opts
// added to its kubeconfig, or ends the test as RequireK8s does when no
// cluster answers there.
func Kubernetes(t testing.TB, opts map[string]string) *kubernetes.Provider {
	t.Helper()
	kc := Kubeconfig()
	if _, err := os.Stat(kc); err != nil {
		RequireK8s(t, "no kubeconfig at %s: %v", kc, err)
	}
	o := map[string]string{"kubeconfig": kc}
	maps.Copy(o, opts)
	p, err := kubernetes.New(providers.Config{Options: o})
	if err != nil {
		t.Fatalf("kubernetes.New(%v): %v", o, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		RequireK8s(t, "the cluster of %s does not answer: %v", kc, err)
	}
	return p
}
