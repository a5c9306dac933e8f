package modal_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// openState makes a provider on srv with a state directory.
func openState(t *testing.T, srv *modaltest.Server, state string) *modal.Provider {
	t.Helper()
	t.Setenv("MODAL_CONFIG_PATH", t.TempDir()+"/none.toml")
	p, err := modal.New(providers.Config{StateDir: state, Options: map[string]string{
		"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret(),
	}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// TestSuspendFromAnotherProcess: a box made by one provider is suspended by
// another of the same state directory (a daemon started again), whose
// resume makes it again with its environment; a provider without the box's
// definition refuses the suspend rather than make a different box.
func TestSuspendFromAnotherProcess(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	state := t.TempDir()
	a := openState(t, srv, state)
	b, err := a.Create(ctxT(t), providers.Spec{Workspace: t.TempDir(), Env: map[string]string{"KEPT": "across the suspend"}})
	require.NoError(t, err)
	t.Cleanup(func() { b.Destroy(ctxT(t)) })

	stranger := openState(t, srv, "")
	sb, err := stranger.Attach(ctxT(t), b.ID())
	require.NoError(t, err)
	_, err = stranger.Suspend(ctxT(t), sb)
	assert.True(t, providers.IsCode(err, providers.Unsupported), "suspend without the box's definition: %v", err)

	again := openState(t, srv, state)
	ab, err := again.Attach(ctxT(t), b.ID())
	require.NoError(t, err)
	id, err := again.Suspend(ctxT(t), ab)
	require.NoError(t, err)
	rb, err := again.Resume(ctxT(t), id)
	require.NoError(t, err)
	t.Cleanup(func() { rb.Destroy(ctxT(t)) })
	assert.NotEqual(t, b.ID(), rb.ID(), "a box resumed from a snapshot is a new sandbox")
	var out bytes.Buffer
	p, err := rb.Exec(ctxT(t), providers.ExecRequest{Argv: []string{"sh", "-c", `printf %s "$KEPT"`}, Stdout: &out})
	require.NoError(t, err)
	code, err := p.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "across the suspend", out.String())
	assert.Equal(t, b.Labels()["boxfs.created"], rb.Labels()["boxfs.created"], "the lifetime counts from the first box")
}
