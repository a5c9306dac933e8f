package e2b

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
)

// open opens the provider on the fake srv, with opts added.
func open(t *testing.T, srv *e2btest.Server, opts map[string]string) *Provider {
	t.Helper()
	o := map[string]string{"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}
	for k, v := range opts {
		if v == "" {
			delete(o, k)
		} else {
			o[k] = v
		}
	}
	p, err := New(providers.Config{Options: o})
	require.NoError(t, err)
	return p
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a box destroyed when t ends.
func create(t *testing.T, p *Provider, spec providers.Spec) *Box {
	t.Helper()
	b, err := p.Create(testContext(t), spec)
	require.NoError(t, err)
	t.Cleanup(func() { b.Destroy(context.Background()) })
	return b.(*Box)
}

// TestPausedListed checks that List finds a paused box as well as running
// ones: E2B runs no timeout while a sandbox is paused, so a sweep of
// List's boxes is what ends one nobody resumes.
func TestPausedListed(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := open(t, srv, nil)
	ctx := testContext(t)
	labels := map[string]string{"role": "sweep"}
	running := create(t, p, providers.Spec{Labels: labels})
	paused := create(t, p, providers.Spec{Labels: labels})
	_, err := p.Suspend(ctx, paused)
	require.NoError(t, err)

	boxes, err := open(t, srv, nil).List(ctx, labels)
	require.NoError(t, err)
	var ids []string
	for _, b := range boxes {
		ids = append(ids, b.ID())
	}
	assert.ElementsMatch(t, []string{running.ID(), paused.ID()}, ids)
	for _, b := range boxes {
		if b.ID() != paused.ID() {
			continue
		}
		st, err := b.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, providers.StateStopped, st.State, "the listed paused box's state")
		require.NoError(t, b.Destroy(ctx), "a sweep destroys the paused box")
	}
	assert.Equal(t, []string{running.ID()}, srv.SandboxIDs())
}

// TestResumeAfterLifetimeKills resumes a box whose lifetime passed while
// it was paused (a clock moved past its end): Resume is Gone, and the
// paused sandbox, which E2B would keep for ever, is killed.
func TestResumeAfterLifetimeKills(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := open(t, srv, nil)
	ctx := testContext(t)
	b := create(t, p, providers.Spec{Lifetime: 10 * time.Minute})
	id, err := p.Suspend(ctx, b)
	require.NoError(t, err)
	require.Equal(t, []string{b.ID()}, srv.SandboxIDs(), "the paused sandbox")

	later := time.Now().Add(11 * time.Minute)
	p.now = func() time.Time { return later }
	_, err = p.Resume(ctx, id)
	assert.True(t, providers.IsCode(err, providers.Gone), "Resume past the lifetime: %v", err)
	assert.Empty(t, srv.SandboxIDs(), "the paused sandbox was left alive")
}

// TestResumeAfterLifetimeLeavesOthers checks that an expired resume kills
// only a paused boxfs sandbox: one running again (resumed elsewhere) is
// E2B's timeout's to end.
func TestResumeAfterLifetimeLeavesOthers(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	p := open(t, srv, nil)
	ctx := testContext(t)
	b := create(t, p, providers.Spec{Lifetime: 10 * time.Minute})
	id, err := p.Suspend(ctx, b)
	require.NoError(t, err)
	_, err = p.Resume(ctx, id) // resumed in time, elsewhere
	require.NoError(t, err)

	later := time.Now().Add(11 * time.Minute)
	p.now = func() time.Time { return later }
	_, err = p.Resume(ctx, id)
	assert.True(t, providers.IsCode(err, providers.Gone), "Resume past the lifetime: %v", err)
	assert.Equal(t, []string{b.ID()}, srv.SandboxIDs(), "a running sandbox was killed")
}
