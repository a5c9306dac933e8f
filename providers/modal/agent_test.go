package modal_test

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// fakeBox makes a provider on a fresh fake and one box with its own
// workspace.
func fakeBox(tb testing.TB, opts modaltest.Options) (*modaltest.Server, providers.Box, string) {
	tb.Helper()
	srv, err := modaltest.New(opts)
	require.NoError(tb, err)
	tb.Cleanup(srv.Close)
	tb.Setenv("MODAL_CONFIG_PATH", filepath.Join(tb.TempDir(), "none.toml"))
	p, err := modal.New(providers.Config{Options: map[string]string{"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}})
	require.NoError(tb, err)
	tb.Cleanup(func() { p.Close() })
	ws := tb.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box, err := p.Create(ctx, providers.Spec{Workspace: ws, Lifetime: time.Hour})
	require.NoError(tb, err)
	tb.Cleanup(func() { box.Destroy(context.Background()) })
	return srv, box, ws
}

func execStarts(srv *modaltest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if strings.HasSuffix(r.Method, "/TaskExecStart") {
			n++
		}
	}
	return n
}

// TestAgentChannel runs hands' agent channel over one long-lived Modal
// exec: the binary goes in as a tar over exec, then file operations cost
// no exec of their own, and a broken stdio stream on the way is resumed.
func TestAgentChannel(t *testing.T) {
	srv, box, ws := fakeBox(t, modaltest.Options{DropStreamAfter: 64 << 10})
	ch := agent.NewChannel(box, agent.ChannelOptions{Binary: boxfsbin.Path(t)})
	t.Cleanup(func() { ch.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, ch.Open(ctx))
	before := execStarts(srv)

	name := filepath.Join(ws, "via-agent.txt")
	big := bytes.Repeat([]byte("modal agent channel\n"), 20000) // 400 KB: crosses a dropped stream
	require.NoError(t, ch.WriteFile(ctx, name, bytes.NewReader(big), 0o640))
	fi, err := ch.Stat(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, int64(len(big)), fi.Size)
	assert.Equal(t, providers.FileMode(0o640), fi.Mode.Perm())
	rc, err := ch.ReadFile(ctx, name)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.Equal(t, big, got)
	for range 20 {
		_, err := ch.Lstat(ctx, name)
		require.NoError(t, err)
	}
	_, err = ch.Stat(ctx, filepath.Join(ws, "missing"))
	assert.True(t, providers.IsCode(err, providers.NotFound), "Stat of a missing file: %v", err)

	st := ch.Stats()
	assert.True(t, st.Up)
	assert.Equal(t, 1, st.Opens)
	assert.Equal(t, before, execStarts(srv), "file operations over the channel started execs of their own")
}

// BenchmarkStat compares one stat over the agent channel with one stat
// run as its own exec, both against the fake (loopback gRPC, local
// processes): go test ./providers/modal -run '^$' -bench Stat
func BenchmarkStat(b *testing.B) {
	_, box, ws := fakeBox(b, modaltest.Options{})
	ctx := context.Background()
	name := filepath.Join(ws, "f")
	b.Run("channel", func(b *testing.B) {
		ch := agent.NewChannel(box, agent.ChannelOptions{Binary: boxfsbin.Path(b)})
		defer ch.Close()
		require.NoError(b, ch.WriteFile(ctx, name, strings.NewReader("x"), 0o644))
		for b.Loop() {
			if _, err := ch.Stat(ctx, name); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exec", func(b *testing.B) {
		for b.Loop() {
			var out bytes.Buffer
			p, err := box.Exec(ctx, providers.ExecRequest{Argv: []string{"stat", "-c", "%s %a %Y", name}, Stdout: &out})
			if err != nil {
				b.Fatal(err)
			}
			if code, err := p.Wait(); err != nil || code != 0 {
				b.Fatal(code, err)
			}
		}
	})
}
