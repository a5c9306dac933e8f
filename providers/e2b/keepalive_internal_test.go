package e2b

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
)

// TestKeepaliveKeepsIdleStreams checks that envd's keepalive, asked for
// on every stream, keeps a silent command and an idle watch alive past
// the provider's silence bound (three keepalive intervals).
func TestKeepaliveKeepsIdleStreams(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p, err := New(providers.Config{Options: map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}})
	require.NoError(t, err)
	p.keepalive = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	defer box.Destroy(context.Background())
	b := box.(*Box)
	f, err := b.Facts(ctx)
	require.NoError(t, err)

	wctx, wcancel := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- b.Watch(wctx, f.Workspace, nil, func([]providers.Change, bool) {}) }()

	var out bytes.Buffer
	proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", "sleep 4; echo done"}, Stdout: &out})
	require.NoError(t, err)
	code, err := proc.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "done\n", out.String())

	select {
	case err := <-werr:
		t.Fatalf("the idle watch ended: %v", err)
	default:
	}
	wcancel()
	assert.NoError(t, <-werr)
}
