package integration

import (
	"context"
	"os"
	"sync"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// The modal row runs against modaltest, started in the serving process.
func init() {
	providerRows = append(providerRows, "modal")
	fakeProviders["modal"] = openModalFake
}

var modalFake struct {
	once sync.Once
	srv  *modaltest.Server
	err  error
}

// openModalFake opens the Modal provider on the serving process's fake.
// The fake's sandboxes share this machine's file system, so each box gets
// a workspace of its own under the provider's state directory, as the
// conformance harness gives each box its own.
func openModalFake(cfg providers.Config) (providers.Provider, error) {
	modalFake.once.Do(func() { modalFake.srv, modalFake.err = modaltest.New(modaltest.Options{TaskIDPolls: 1}) })
	if modalFake.err != nil {
		return nil, modalFake.err
	}
	srv := modalFake.srv
	cfg.Options = map[string]string{"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}
	p, err := modal.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	return ownWorkspaces{Provider: p, dir: cfg.StateDir}, nil
}

// ownWorkspaces gives every box it creates a fresh workspace under dir
// unless the spec names one.
type ownWorkspaces struct {
	*modal.Provider
	dir string
}

func (o ownWorkspaces) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	if spec.Workspace == "" {
		ws, err := os.MkdirTemp(o.dir, "workspace-")
		if err != nil {
			return nil, err
		}
		spec.Workspace = ws
	}
	return o.Provider.Create(ctx, spec)
}
