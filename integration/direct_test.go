package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirectChannel: through a real mount of Docker boxes, the agent's
// file requests go over a direct connection to the agent (a unix socket
// under the container's root: the mount runs as root here, and the engine
// runs without a bridge, so a box's address is not reachable; the socket
// needs no network, so a box made with network=none is reached the same
// way), facts.json says which, and files and commands work over it.
func TestDirectChannel(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"network=default", nil},
		{"network=none", []string{"network=none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMount(t, "docker", 30*time.Second)
			b := m.newBox(t, "d", tc.args...)

			// Host writes, read in the box by a command.
			require.NoError(t, os.WriteFile(filepath.Join(b.work, "a"), []byte("from the host\n"), 0o644))
			assert.Equal(t, "from the host\n", b.must(t, "cat a"))
			// A tree made in the box, read and removed through the mount.
			b.must(t, "mkdir -p t/sub && for i in $(seq 40); do echo $i >t/$i; echo $i >t/sub/$i; done")
			got, err := os.ReadFile(filepath.Join(b.work, "t", "sub", "7"))
			require.NoError(t, err)
			assert.Equal(t, "7\n", string(got))
			host(t, b.work, "rm", "-rf", "t")
			assert.Equal(t, "gone\n", b.must(t, "test -e t || echo gone"))

			agent, ok := factsMap(t, b)["agent"].(map[string]any)
			require.True(t, ok, "facts.json has no agent counters")
			direct, _ := agent["direct"].(string)
			assert.True(t, strings.HasPrefix(direct, "unix /proc/"), "facts.json agent.direct = %q (directOff %v)", direct, agent["directOff"])
			assert.Greater(t, agent["roundTrips"], float64(80), "the removal's requests are counted on the channel: %v", agent)
		})
	}
}
