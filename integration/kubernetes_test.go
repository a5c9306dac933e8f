package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/kubernetes"
)

// The kubernetes row runs on the cluster scripts/k8s-up starts; its
// kubeconfig is BOXFS_K8S_KUBECONFIG, else where the script writes it.
func init() {
	providerRows = append(providerRows, kubernetes.Name)
	providerChecks[kubernetes.Name] = requireKubernetes
}

const defaultKubeconfig = "/var/lib/boxfs-k8s/kubeconfig"

// requireKubernetes skips the row when no cluster answers, or fails it under
// BOXFS_REQUIRE_K8S=1 (CI); when one does, the serving process finds it
// through KUBECONFIG.
func requireKubernetes(t *testing.T) {
	t.Helper()
	kc := os.Getenv("BOXFS_K8S_KUBECONFIG")
	if kc == "" {
		kc = defaultKubeconfig
	}
	p, err := kubernetes.New(providers.Config{Options: map[string]string{"kubeconfig": kc}})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = p.Ping(ctx)
		cancel()
	}
	if err != nil {
		if os.Getenv("BOXFS_REQUIRE_K8S") == "1" {
			t.Fatalf("BOXFS_REQUIRE_K8S=1 and no Kubernetes cluster answers through %s: %v", kc, err)
		}
		t.Skipf("no Kubernetes cluster answers through %s (%v); scripts/k8s-up starts one", kc, err)
	}
	t.Setenv("KUBECONFIG", kc)
}
