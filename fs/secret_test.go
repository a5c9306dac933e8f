package fs_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	boxfs "github.com/boxfs/boxfs/fs"
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
	// Quoting hides no key: the words are judged as the parser reads them.
	err = writeFile(t, filepath.Join(mnt, "ctl"), `new x 'env'.TOKEN=sekrit-q env."B"='sekrit b' lifetime=-5`+"\n")
	require.ErrorIs(t, err, syscall.EINVAL)
	assert.Contains(t, readErr(mnt), "env.TOKEN=<redacted> env.B=<redacted>")
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

// mount --debug logs requests and sizes, never the bytes written: not a
// file's, not a launch's secrets.
func TestDebugLogHasNoData(t *testing.T) {
	var log syncBuf
	mnt := mountWith(t, boxfs.MountOptions{Debug: true, DebugLog: &log})
	box := newBox(t, mnt, "a")
	require.NoError(t, os.WriteFile(filepath.Join(box, "work", "f"), []byte("FILEDATA-1234567"), 0o644))
	b, err := os.ReadFile(filepath.Join(box, "work", "f"))
	require.NoError(t, err)
	require.Equal(t, "FILEDATA-1234567", string(b))
	launch := filepath.Join(box, "launch", "web")
	require.NoError(t, os.Mkdir(launch, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(launch, "secrets"), []byte("TOKEN=s3cret\n"), 0o600))
	out := log.String()
	assert.Contains(t, out, "WRITE", "the log has the writes")
	assert.NotContains(t, out, "FILEDATA")
	assert.NotContains(t, out, "TOKEN=s3")
}

// syncBuf is a bytes.Buffer safe for the FUSE server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
