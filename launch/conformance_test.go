package launch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/launch/launchtest"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

func localBox(t *testing.T) providers.Box {
	p := local.New(t.TempDir())
	b, err := p.Create(context.Background(), providers.Spec{Lifetime: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { b.Destroy(context.Background()) })
	return b
}

func facts(t *testing.T, b providers.Box) providers.Facts {
	f, err := b.Facts(context.Background())
	require.NoError(t, err)
	return f
}

func TestConformance(t *testing.T) {
	t.Run("provider=local/via=sh", func(t *testing.T) {
		b := localBox(t)
		launchtest.Run(t, launchtest.Harness{Box: b, Options: launch.Options{Facts: facts(t, b), Force: launch.ViaSh}})
	})
	for _, image := range []string{"boxfs-base:latest", "boxfs-busybox:latest"} {
		t.Run("provider=docker/image="+image+"/via=sh", func(t *testing.T) {
			b := testbox.NewDockerOf(t, providers.Spec{Image: image})
			user := "nobody"
			if image == "boxfs-busybox:latest" {
				user = ""
			}
			launchtest.Run(t, launchtest.Harness{Box: b, Options: launch.Options{Facts: facts(t, b), Force: launch.ViaSh}, User: user})
		})
	}
}
