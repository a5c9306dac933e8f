package e2b_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
	"github.com/boxfs/boxfs/providers/providertest"
)

// newProvider opens the provider on the fake srv.
func newProvider(t *testing.T, srv *e2btest.Server, opts map[string]string) *e2b.Provider {
	t.Helper()
	o := map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}
	for k, v := range opts {
		o[k] = v
	}
	p, err := e2b.New(providers.Config{Options: o})
	require.NoError(t, err)
	return p
}

// harness is the conformance harness for the provider on the fake srv.
// The fake's template "base" has 2 CPUs and 512 MB.
func harness(t *testing.T, srv *e2btest.Server) providertest.Harness {
	return providertest.Harness{
		Provider:    newProvider(t, srv, nil),
		Unsupported: []string{"snapshot", "region", "gpu", "ports", "mounts", "user", "capabilities"},
		Refused: map[string]providers.Spec{
			"isolation=container": {Isolation: providers.IsolationContainer},
			"cpus=3":              {CPUs: 3},
			"memoryMb=1024":       {MemoryMB: 1024},
			"lifetime=25h":        {Lifetime: 25 * time.Hour},
		},
		Lifetime:      3 * time.Second,
		LifetimeSlack: 20 * time.Second,
		LargeOutput:   16 << 20,
	}
}

func TestConformance(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	providertest.Run(t, harness(t, srv))
	assert.Empty(t, srv.SandboxIDs(), "sandboxes left on the fake")
}
