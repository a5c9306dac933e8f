package fs

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stoppedShell starts sh running script, waits for it to stop itself
// (a stopped process keeps the signals sent to it pending), and returns
// its pid.
func stoppedShell(t *testing.T, script string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", script+"; kill -STOP $$; exit 0")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		require.NoError(t, err)
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return cmd.Process.Pid
		}
		time.Sleep(time.Millisecond)
	}
}

// A caller is given up on only when a signal that ends it is pending.
func TestDying(t *testing.T) {
	assert.False(t, dying(os.Getpid()), "this test, nothing pending")
	assert.True(t, dying(1<<22+12345), "a process that is not there")

	term := stoppedShell(t, "true")
	require.NoError(t, syscall.Kill(term, syscall.SIGTERM))
	assert.True(t, dying(term), "SIGTERM pending, default action")

	caught := stoppedShell(t, "trap 'echo' USR1")
	require.NoError(t, syscall.Kill(caught, syscall.SIGUSR1))
	assert.False(t, dying(caught), "SIGUSR1 pending, caught")

	killed := stoppedShell(t, "trap 'echo' USR1")
	require.NoError(t, syscall.Kill(killed, syscall.SIGKILL))
	assert.True(t, dying(killed), "SIGKILL, or gone already")
}
