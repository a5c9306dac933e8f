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

			agentWork(t, b, "mkdir -p t/sub && for i in $(seq 40); do echo $i >t/$i; echo $i >t/sub/$i; done", "t/sub/7")

			agent, ok := factsMap(t, b)["agent"].(map[string]any)
			require.True(t, ok, "facts.json has no agent counters")
			direct, _ := agent["direct"].(string)
			assert.True(t, strings.HasPrefix(direct, "unix /proc/"), "facts.json agent.direct = %q (directOff %v)", direct, agent["directOff"])
			assert.Greater(t, agent["roundTrips"], float64(80), "the removal's requests are counted on the channel: %v", agent)
		})
	}
}

// TestDirectChannelOff: with the Docker provider's option direct=off (what
// a config file's [providers.docker] direct = "off" gives), the agent's
// requests stay on the exec's stdio although the box could be dialled:
// facts.json names no direct route and says the option is why, and the
// file operations, counted on the channel, work over the exec.
func TestDirectChannelOff(t *testing.T) {
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 30 * time.Second, attr: time.Second,
		env: []string{envOptions + "=docker.direct=off"}})
	b := m.newBox(t, "d")

	agentWork(t, b, "mkdir -p t && for i in $(seq 40); do echo $i >t/$i; done", "t/7")

	agent, ok := factsMap(t, b)["agent"].(map[string]any)
	require.True(t, ok, "facts.json has no agent counters")
	assert.Nil(t, agent["direct"], "facts.json agent: %v", agent)
	off, _ := agent["directOff"].(string)
	assert.Contains(t, off, "direct=off", "facts.json agent: %v", agent)
	assert.Greater(t, agent["roundTrips"], float64(40), "the removal's requests are counted on the channel: %v", agent)
}

// agentWork is file work on the agent's channel: a host write read in the
// box by a command, then a tree the box makes (mk, a script making files
// t/... holding their own name) read at seven (a file holding "7") and
// removed through the mount.
func agentWork(t *testing.T, b *boxT, mk, seven string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(b.work, "a"), []byte("from the host\n"), 0o644))
	assert.Equal(t, "from the host\n", b.must(t, "cat a"))
	b.must(t, mk)
	got, err := os.ReadFile(filepath.Join(b.work, filepath.FromSlash(seven)))
	require.NoError(t, err)
	assert.Equal(t, "7\n", string(got))
	host(t, b.work, "rm", "-rf", "t")
	assert.Equal(t, "gone\n", b.must(t, "test -e t || echo gone"))
}
