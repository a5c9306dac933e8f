package hands_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

// requireDocker fails the test when BOXFS_REQUIRE_DOCKER=1 (CI), else skips
// it.
func requireDocker(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("BOXFS_REQUIRE_DOCKER") == "1" {
		t.Fatalf("BOXFS_REQUIRE_DOCKER=1: "+format, args...)
	}
	t.Skipf(format+" (scripts/docker-up starts an engine; set BOXFS_REQUIRE_DOCKER=1 to fail instead of skipping)", args...)
}

var dockerOnce struct {
	sync.Once
	p   *docker.Provider
	err error
}

// newDockerBox makes a container box on the engine DOCKER_HOST names, or
// skips when none answers (fails under BOXFS_REQUIRE_DOCKER=1).
func newDockerBox(t *testing.T) providers.Box {
	t.Helper()
	return newDockerBoxOf(t, "")
}

// newBusyboxBox makes a container box of the busybox image (no bash, no
// GNU tools).
func newBusyboxBox(t *testing.T) providers.Box {
	t.Helper()
	return newDockerBoxOf(t, "boxfs-busybox:latest")
}

func newDockerBoxOf(t *testing.T, image string) providers.Box {
	t.Helper()
	dockerOnce.Do(func() {
		p, err := docker.New(providers.Config{})
		if err != nil {
			dockerOnce.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			dockerOnce.err = err
			return
		}
		dockerOnce.p = p
	})
	if dockerOnce.err != nil {
		requireDocker(t, "no Docker engine answers: %v", dockerOnce.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	box, err := dockerOnce.p.Create(ctx, providers.Spec{Image: image, Lifetime: 30 * time.Minute, Labels: map[string]string{"boxfs-test": "hands"}})
	if err != nil {
		t.Fatalf("docker Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		box.Destroy(ctx)
	})
	return box
}
