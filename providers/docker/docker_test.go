package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
	"github.com/boxfs/boxfs/providers/providertest"
)

func TestConformance(t *testing.T) {
	p := newProvider(t)
	providertest.Run(t, providertest.Harness{
		Provider:       p,
		Spec:           providers.Spec{Labels: map[string]string{testbox.Label: "conformance"}},
		Unsupported:    []string{"region", "gpu", "ports"},
		Reopen:         func(t *testing.T) providers.Provider { return newProvider(t) },
		RemoveSnapshot: testbox.RemoveImage,
		Refused: map[string]providers.Spec{
			"isolation=microvm": {Isolation: providers.IsolationMicroVM},
			"isolation=gvisor":  {Isolation: providers.IsolationGVisor},
			"isolation=none":    {Isolation: providers.IsolationNone},
			"network=open":      {Network: providers.Network{Mode: providers.NetworkOpen}},
			"network=allowlist": {Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"example.com"}}},
		},
	})
}

// newProvider opens the provider on the engine DOCKER_HOST names, or skips
// (fails under BOXFS_REQUIRE_DOCKER=1) when no engine answers or the base
// image is missing.
func newProvider(t *testing.T) *docker.Provider {
	t.Helper()
	p, err := docker.New(providers.Config{})
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		testbox.RequireDocker(t, "no Docker engine answers: %v", err)
	}
	cli := dockerClient(t)
	if _, err := cli.ImageInspect(ctx, docker.DefaultImage); err != nil {
		testbox.RequireDocker(t, "the engine has no image %s: %v", docker.DefaultImage, err)
	}
	return p
}

// dockerClient is a plain Engine API client, for checking behind the
// provider's back.
func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
