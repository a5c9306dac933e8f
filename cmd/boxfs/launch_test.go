package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/launch"
)

// TestLaunch runs `boxfs launch` as a user does, with nothing mounted and
// through a mount: start with a secret from a file, status, logs, a
// start of a running name, stop with grace, ls; and the usage errors.
func TestLaunch(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		h := newHarness(t)
		h.cleanup(filepath.Join(t.TempDir(), "unused"))
		launchAsUser(t, h, "d")
	})
	t.Run("mounted", func(t *testing.T) {
		needMount(t)
		h := newHarness(t)
		mnt := t.TempDir()
		h.cleanup(mnt)
		h.mountBackground(mnt)
		launchAsUser(t, h, "m")
		ents, err := os.ReadDir(filepath.Join(mnt, "m", "launch"))
		require.NoError(t, err)
		require.Len(t, ents, 1)
		assert.Equal(t, "web", ents[0].Name())
	})
}

func launchAsUser(t *testing.T, h *harness, box string) {
	h.ok("new", box, "lifetime=10m")
	secret := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(secret, []byte("multi\nline\n"), 0o600))
	prog := `tr "\0" "\n" <&$BOXFS_SECRETS_FD | head -2 | tr "\n" "|"; echo; echo "mode $MODE"; exec sleep 300`
	out := h.ok("launch", box, "web", "--env", "MODE=a,b", "--grace", "1s", "--secret", "TOKEN=@"+secret, "--", "sh", "-c", prog)
	assert.Regexp(t, `^web phase=(running|starting) incarnation=1 .*secrets=yes\n$`, out)

	var st launch.State
	require.Eventually(t, func() bool {
		require.NoError(t, json.Unmarshal([]byte(h.ok("launch", "status", box, "web", "--json")), &st))
		return st.Phase == launch.Running
	}, 30*time.Second, 200*time.Millisecond)
	again := h.ok("launch", box, "web", "--", "sh", "-c", "echo other")
	assert.Contains(t, again, "pid="+strconv.Itoa(st.PID), "a running launch is left as it is")

	var logs string
	require.Eventually(t, func() bool {
		logs = h.ok("launch", "logs", box, "web")
		return strings.Contains(logs, "mode a,b\n")
	}, 30*time.Second, 200*time.Millisecond, "logs: %q; status %s; mount log: %s", logs, h.run("launch", "status", box, "web").stdout, readMountLog(h))
	assert.Equal(t, "TOKEN=multi|line|\nmode a,b\n", logs, "logs print what there is and return")
	assert.Regexp(t, `^web phase=running `, h.ok("launch", "ls", box))

	out = h.ok("launch", "stop", box, "web", "--grace", "0")
	assert.Regexp(t, `^web phase=stopped incarnation=1 restarts=0 last_exit=(137|143) `, out)
	assert.Equal(t, logs, h.ok("launch", "logs", box, "web", "-f"), "following a stopped launch ends")

	for _, bad := range [][]string{
		{"launch", box, "web"},
		{"launch", box, "web", "--secret", "TOKEN=value", "--", "x"},
		{"launch", "stop", box, "web", "--env", "A=1"},
		{"launch", "status", box},
		{"launch", box, "../x", "--", "y"},
		{"launch", box, "web", "--grace", "1h", "--", "y"},
		{"launch", box, "web", "--env", "GITHUB_TOKEN=x", "--", "y"},
	} {
		r := h.run(bad...)
		assert.Equal(t, 2, r.code, "%q: %s", bad, r.stderr)
	}
	r := h.run("launch", "status", box, "nosuch")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "nosuch")
}

func readMountLog(h *harness) string {
	b, _ := os.ReadFile(filepath.Join(h.state, "mount.log"))
	m, _ := filepath.Glob(filepath.Join(h.state, "providers/local/local/*/tmp/boxfs-launch-*/web/*"))
	for _, f := range m {
		c, _ := os.ReadFile(f)
		b = append(b, "\n== "+f+"\n"+string(c)...)
	}
	return string(b)
}
