package integration

import (
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/archil"
	"github.com/boxfs/boxfs/providers/archil/archiltest"
)

// The archil row: the mount's serving process starts the in-process fake
// of Archil's control plane and object API, and opens the provider on a
// work disk of it. The row runs the tool suite only: without an agent,
// every file operation is one serverless exec.
func init() {
	toolOnlyRows = append(toolOnlyRows, "archil")
	fakeProviders["archil"] = func(cfg providers.Config) (providers.Provider, error) {
		srv := archiltest.New(archiltest.Options{SharedMode: true})
		cfg.Options = map[string]string{
			"api_url": srv.URL(), "s3_url": srv.URL(), "api_key": srv.APIKey(),
			"disk": "boxfs-it", "create_disk": "true",
		}
		return archil.New(cfg)
	}
}
