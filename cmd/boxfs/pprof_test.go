package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BOXFS_PPROF=1 serves the profiles on a 0600 unix socket in the state
// directory, removed at the end; a TCP address is refused.
func TestPprofSocket(t *testing.T) {
	state := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv(pprofEnv, "127.0.0.1:6060")
	startPprof(log, state)()
	_, err := os.Stat(filepath.Join(state, pprofSocket))
	assert.ErrorIs(t, err, os.ErrNotExist, "a TCP address serves nothing")

	t.Setenv(pprofEnv, "1")
	stop := startPprof(log, state)
	sock := filepath.Join(state, pprofSocket)
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket|0o600, fi.Mode()&(os.ModeType|os.ModePerm))
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://boxfs/debug/pprof/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	stop()
	_, err = net.Dial("unix", sock)
	assert.Error(t, err, "served after stop")
}
