package fs_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// mountLogged serves a local-provider namespace whose log (at level) goes
// to the returned file.
func mountLogged(t *testing.T, level slog.Level) (string, string) {
	t.Helper()
	lp := local.New(t.TempDir())
	name := filepath.Join(t.TempDir(), "log")
	log, err := os.Create(name)
	require.NoError(t, err)
	t.Cleanup(func() { log.Close() })
	mnt, _ := serve(t, boxes.Options{
		DefaultProvider: "local",
		OpenProvider:    func(string) (providers.Provider, error) { return lp, nil },
		OpTimeout:       10 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: level})),
	})
	t.Cleanup(func() {
		bs, _ := lp.List(context.Background(), nil)
		for _, b := range bs {
			b.Destroy(context.Background())
		}
	})
	return mnt, name
}

// A refused message quotes no env value and at most 256 bytes of itself,
// in err and in the log; command lines are logged at debug only.
func TestSecretsStayOutOfErrAndLog(t *testing.T) {
	mnt, log := mountLogged(t, slog.LevelInfo)
	err := writeFile(t, filepath.Join(mnt, "ctl"), "new x env.TOKEN=sekrit-token lifetime=-5\n")
	require.ErrorIs(t, err, syscall.EINVAL)
	assert.Contains(t, readErr(mnt), "env.TOKEN=<redacted>")
	assert.NotContains(t, readErr(mnt), "sekrit")

	big := "new " + strings.Repeat("y", 512<<10) + "\n"
	require.ErrorIs(t, writeFile(t, filepath.Join(mnt, "ctl"), big), syscall.EINVAL)
	assert.Less(t, len(readErr(mnt)), 1024, "err quotes a bounded part of a bad message")

	newBox(t, mnt, "a")
	assert.Equal(t, "sekrit-cmd\n", run(t, mnt, "a", "echo sekrit-cmd"))
	time.Sleep(100 * time.Millisecond)
	logged := readFile(t, log)
	assert.NotContains(t, logged, "sekrit")
	assert.Less(t, len(logged), 16<<10, "the log quotes a bounded part of a bad message")
	assert.Contains(t, logged, "command started")
}
