package launch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/launch/launchtest"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/daytona"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
	"github.com/boxfs/boxfs/providers/e2b"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/providers/modal"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
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

// withAgent returns the launcher options of a box whose hands run the
// agent: its binary in the box, commands through its command stream.
func withAgent(t *testing.T, b providers.Box) launch.Options {
	h, err := hands.New(context.Background(), b, hands.Options{AgentBinary: boxfsbin.Path(t), Force: hands.ViaAgent})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	require.NotEmpty(t, h.AgentPath())
	return launch.Options{Facts: h.Facts(), Exec: h.Exec, Agent: h.AgentPath(), Force: launch.ViaAgent}
}

// cloudFakes make boxes of the cloud providers, on their in-process fakes
// (whose sandboxes are processes and directories of this machine).
func cloudFakes(t *testing.T) map[string]func(t *testing.T) providers.Box {
	t.Setenv("MODAL_CONFIG_PATH", t.TempDir()+"/none.toml")
	box := func(t *testing.T, p providers.Provider, spec providers.Spec) providers.Box {
		b, err := p.Create(context.Background(), spec)
		require.NoError(t, err)
		t.Cleanup(func() { b.Destroy(context.Background()) })
		return b
	}
	return map[string]func(t *testing.T) providers.Box{
		"daytona": func(t *testing.T) providers.Box {
			srv := daytonatest.New(daytonatest.Options{})
			t.Cleanup(srv.Close)
			p, err := daytona.New(providers.Config{Options: map[string]string{"api_url": srv.APIURL(), "api_key": srv.APIKey()}})
			require.NoError(t, err)
			return box(t, p, providers.Spec{Workspace: t.TempDir()})
		},
		"modal": func(t *testing.T) providers.Box {
			srv, err := modaltest.New(modaltest.Options{})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			p, err := modal.New(providers.Config{Options: map[string]string{"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}})
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			return box(t, p, providers.Spec{Workspace: t.TempDir()})
		},
		"e2b": func(t *testing.T) providers.Box {
			srv := e2btest.New(e2btest.Options{})
			t.Cleanup(srv.Close)
			p, err := e2b.New(providers.Config{Options: map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}})
			require.NoError(t, err)
			return box(t, p, providers.Spec{})
		},
	}
}

func TestConformance(t *testing.T) {
	for _, via := range []string{launch.ViaSh, launch.ViaAgent} {
		t.Run("provider=local/via="+via, func(t *testing.T) {
			b := localBox(t)
			opts := launch.Options{Facts: facts(t, b), Force: via}
			if via == launch.ViaAgent {
				// A local box's paths are the host's: the binary runs as it is.
				opts.Agent = boxfsbin.Path(t)
			}
			launchtest.Run(t, launchtest.Harness{Box: b, Options: opts})
		})
	}
	for name, newBox := range cloudFakes(t) {
		t.Run("provider="+name+"/via=sh", func(t *testing.T) {
			b := newBox(t)
			launchtest.Run(t, launchtest.Harness{Box: b, Options: launch.Options{Facts: facts(t, b)}})
		})
	}
	for _, via := range []string{launch.ViaSh, launch.ViaAgent} {
		t.Run("provider=kubernetes/via="+via, func(t *testing.T) {
			p := testbox.Kubernetes(t, nil)
			b, err := p.Create(context.Background(), providers.Spec{Lifetime: time.Hour, Labels: map[string]string{testbox.Label: "launch"}})
			require.NoError(t, err)
			t.Cleanup(func() { b.Destroy(context.Background()) })
			opts := launch.Options{Facts: facts(t, b), Force: via}
			if via == launch.ViaAgent {
				opts = withAgent(t, b)
			}
			launchtest.Run(t, launchtest.Harness{Box: b, Options: opts, User: "nobody"})
		})
	}
	for _, image := range []string{"boxfs-base:latest", "boxfs-busybox:latest"} {
		for _, via := range []string{launch.ViaSh, launch.ViaAgent} {
			t.Run("provider=docker/image="+image+"/via="+via, func(t *testing.T) {
				b := testbox.NewDockerOf(t, providers.Spec{Image: image})
				user := "nobody"
				if image == "boxfs-busybox:latest" {
					user = ""
				}
				opts := launch.Options{Facts: facts(t, b), Force: via}
				if via == launch.ViaAgent {
					opts = withAgent(t, b)
				}
				launchtest.Run(t, launchtest.Harness{Box: b, Options: opts, User: user})
			})
		}
	}
}
