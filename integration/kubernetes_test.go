package integration

import (
	"testing"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers/kubernetes"
)

// The kubernetes row runs on the cluster scripts/k8s-up starts (its
// kubeconfig: testbox.Kubeconfig). Importing the provider registers it in
// the serving process too.
func init() {
	providerRows = append(providerRows, kubernetes.Name)
	providerChecks[kubernetes.Name] = requireKubernetes
}

// requireKubernetes skips the row when no cluster answers, or fails it under
// BOXFS_REQUIRE_K8S=1 (CI); when one does, the serving process finds it
// through KUBECONFIG.
func requireKubernetes(t *testing.T) {
	t.Helper()
	testbox.Kubernetes(t, nil)
	t.Setenv("KUBECONFIG", testbox.Kubeconfig())
}
