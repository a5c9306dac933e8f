package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
)

// The e2b row runs against e2btest, the in-process fake of E2B's control
// plane and envd, started in the serving process; the fake runs the
// sandboxes' processes on this machine, so the agent channel (the static
// boxfs binary) runs there as it would in a sandbox.
func init() {
	providerRows = append(providerRows, "e2b")
	fakeProviders["e2b"] = openE2BFake
}

// openE2BFake starts the fake, keeping its sandboxes under the provider's
// state directory, and opens the provider pointed at it.
func openE2BFake(cfg providers.Config) (providers.Provider, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	srv := e2btest.New(e2btest.Options{Dir: cfg.StateDir})
	cfg.Options = map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}
	return e2b.New(cfg)
}

// TestE2BAgent checks that the e2b row reaches its box through the agent
// channel (one long-lived envd process), which the tool matrix then uses.
func TestE2BAgent(t *testing.T) {
	m := startMount(t, "e2b", 20*time.Second)
	b := m.newBox(t, "box", "provider=e2b")
	data, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
	require.NoError(t, err)
	var facts struct {
		Provider string `json:"provider"`
		Via      string `json:"via"`
	}
	require.NoError(t, json.Unmarshal(data, &facts), "%s", data)
	assert.Equal(t, "e2b", facts.Provider)
	assert.Equal(t, "agent", facts.Via, "facts.json: %s", data)
}
