package local_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/providers/providertest"
)

func TestConformance(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the local provider runs on Linux only")
	}
	root := t.TempDir()
	providertest.Run(t, providertest.Harness{
		Provider: local.New(root),
		Reopen:   func(t *testing.T) providers.Provider { return local.New(root) },
		Unsupported: []string{
			"image", "snapshot", "region", "cpus", "memoryMb", "gpu",
			"ports", "mounts", "workspace", "user", "capabilities",
		},
		Refused: map[string]providers.Spec{
			"isolation=container": {Isolation: providers.IsolationContainer},
			"isolation=gvisor":    {Isolation: providers.IsolationGVisor},
			"isolation=microvm":   {Isolation: providers.IsolationMicroVM},
			"network=none":        {Network: providers.Network{Mode: providers.NetworkNone}},
			"network=allowlist":   {Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"example.com"}}},
		},
		Lifetime:      2 * time.Second,
		LifetimeSlack: 20 * time.Second,
	})
}
