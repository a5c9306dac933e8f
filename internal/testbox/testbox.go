// Package testbox gives tests what they need from the machine: boxes on the
// real Docker engine, and Node with npm for the checks of a fake against
// its vendor's published client. A test that needs one skips when it is
// missing, and fails instead under BOXFS_REQUIRE_DOCKER=1 or
// BOXFS_REQUIRE_NPM=1 (CI).
package testbox

import (
	"context"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

// Label is the label key on every container NewDocker makes, so leftovers
// of a crashed run can be found: docker ps -a --filter label=boxfs-test.
const Label = "boxfs-test"

// RequireDocker fails the test when BOXFS_REQUIRE_DOCKER=1 (CI), else
// skips it; format and args say what is missing.
func RequireDocker(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("BOXFS_REQUIRE_DOCKER") == "1" {
		t.Fatalf("BOXFS_REQUIRE_DOCKER=1: "+format, args...)
	}
	t.Skipf(format+" (scripts/docker-up starts an engine; set BOXFS_REQUIRE_DOCKER=1 to fail instead of skipping)", args...)
}

// engine is the provider this test process shares, once its engine
// answered and showed the base image.
var engine = sync.OnceValues(func() (*docker.Provider, error) {
	p, err := docker.New(providers.Config{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		p.Close()
		return nil, err
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, docker.DefaultImage); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
})

// Docker returns the Docker provider on the engine DOCKER_HOST names,
// shared by the tests of one process (never closed), or ends the test as
// RequireDocker does when no engine with the base image answers.
func Docker(t testing.TB) *docker.Provider {
	t.Helper()
	p, err := engine()
	if err != nil {
		RequireDocker(t, "no Docker engine with the image %s answers: %v", docker.DefaultImage, err)
	}
	return p
}

// NewDocker makes a container box of the default image, destroyed when
// the test ends; see NewDockerOf.
func NewDocker(t *testing.T) providers.Box {
	t.Helper()
	return NewDockerOf(t, providers.Spec{})
}

// NewDockerOf makes a container box from spec (a lifetime of 30 minutes
// when it names none, the Label added), destroyed when the test ends.
func NewDockerOf(t testing.TB, spec providers.Spec) providers.Box {
	t.Helper()
	p := Docker(t)
	if spec.Lifetime == 0 {
		spec.Lifetime = 30 * time.Minute
	}
	labels := map[string]string{Label: "1"}
	maps.Copy(labels, spec.Labels)
	spec.Labels = labels
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	box, err := p.Create(ctx, spec)
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

// RemoveImage removes an image of the engine (a snapshot a test made), its
// untagged parents with it.
func RemoveImage(id string) error {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = cli.ImageRemove(ctx, id, image.RemoveOptions{Force: true, PruneChildren: true})
	return err
}
