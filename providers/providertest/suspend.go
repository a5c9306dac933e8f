package providertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

// The scripts the suspend, snapshot and reconnect subtests run with sh -c.
// They keep their file in the box's HOME, which every provider keeps with
// the box (the fakes each give a box a directory of its own there).
const (
	// ScriptHomeWrite writes $1 to $HOME/boxfs-conformance-file.
	ScriptHomeWrite = `printf %s "$1" >"$HOME/boxfs-conformance-file"`
	// ScriptHomeCat prints $HOME/boxfs-conformance-file.
	ScriptHomeCat = `cat "$HOME/boxfs-conformance-file"`
)

// suspendKinds are the values Facts.Suspend may take.
var suspendKinds = []string{providers.SuspendMemory, providers.SuspendFilesystem, providers.SuspendSnapshot}

// homeWrite writes text to the box's conformance file.
func homeWrite(t *testing.T, ctx context.Context, b providers.Box, text string) {
	t.Helper()
	mustRun(t, ctx, b, providers.ExecRequest{Argv: sh(ScriptHomeWrite, text)})
}

// homeCat returns the box's conformance file.
func homeCat(t *testing.T, ctx context.Context, b providers.Box) string {
	t.Helper()
	return string(mustRun(t, ctx, b, providers.ExecRequest{Argv: sh(ScriptHomeCat)}))
}

// suspendable makes a box for t and returns it, its facts and the
// provider as a Suspender; for a provider that is none, it checks that the
// box claims no suspend, says the ability is unsupported, and returns
// false.
func (s *suite) suspendable(t *testing.T, ctx context.Context, mutate func(*providers.Spec)) (providers.Box, providers.Facts, providers.Suspender, bool) {
	b := s.box(t, mutate)
	f, err := b.Facts(ctx)
	require.NoError(t, err)
	sp, ok := s.h.Provider.(providers.Suspender)
	if !ok {
		assert.Empty(t, f.Suspend, "Facts.Suspend of a box whose provider is no providers.Suspender")
		t.Logf("unsupported: provider %q is no providers.Suspender", s.h.Provider.Name())
		return b, f, nil, false
	}
	require.Contains(t, suspendKinds, f.Suspend, "Facts.Suspend of a box whose provider is a Suspender")
	return b, f, sp, true
}

// resumed makes sure a box Resume returned is destroyed when t ends.
func resumed(t *testing.T, b providers.Box) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
		defer cancel()
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("cleanup: Destroy(%s) of a resumed box: %v", b.ID(), err)
		}
	})
}

// testSuspend suspends a box with a command running: the command ends,
// the box is stopped (or gone, for a box its snapshot replaces), and the
// box Resume returns runs, with the file written before; the processes of
// a box that keeps only its filesystem are gone.
func testSuspend(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b, f, sp, ok := s.suspendable(t, ctx, nil)
	if !ok {
		return
	}
	homeWrite(t, ctx, b, "kept across a suspend")
	p, pids := startGroup(t, ctx, b)
	id, err := sp.Suspend(ctx, b)
	require.NoError(t, err, "Suspend")
	require.NotEmpty(t, id, "Suspend's id")
	code, werr := waitWithin(t, p, endBound, "a command running when its box was suspended")
	t.Logf("the command running at Suspend ended: exit %d, %v", code, werr)
	assert.False(t, werr == nil && code == 0, "a command ended by a suspend exited 0")

	st, err := b.Status(ctx)
	switch {
	case f.Suspend == providers.SuspendSnapshot:
		assert.True(t, err != nil && providers.IsCode(err, providers.Gone) || err == nil && st.State != providers.StateRunning,
			"Status of a box suspended into a snapshot: %+v, %v; want not running", st, err)
	default:
		if assert.NoError(t, err, "Status of a suspended box") {
			assert.Equal(t, providers.StateStopped, st.State, "Status of a suspended box")
		}
	}

	rb, err := sp.Resume(ctx, id)
	require.NoError(t, err, "Resume(%s)", id)
	resumed(t, rb)
	if f.Suspend != providers.SuspendSnapshot {
		assert.Equal(t, b.ID(), rb.ID(), "a box that keeps its %s is resumed as itself", f.Suspend)
	}
	st, err = rb.Status(ctx)
	require.NoError(t, err, "Status of the resumed box")
	assert.Equal(t, providers.StateRunning, st.State)
	assert.Equal(t, "kept across a suspend", homeCat(t, ctx, rb), "the file written before the suspend")
	if f.Suspend == providers.SuspendFilesystem {
		assert.Empty(t, alive(t, rb, pids), "processes of the command running at Suspend, alive after Resume")
	}
	rf, err := rb.Facts(ctx)
	require.NoError(t, err)
	assert.Equal(t, f.Suspend, rf.Suspend, "Facts.Suspend of the resumed box")

	// The resumed box suspends and resumes again.
	id2, err := sp.Suspend(ctx, rb)
	require.NoError(t, err, "Suspend of the resumed box")
	rb2, err := sp.Resume(ctx, id2)
	require.NoError(t, err, "second Resume")
	if rb2.ID() != rb.ID() {
		resumed(t, rb2)
	}
	assert.Equal(t, "kept across a suspend", homeCat(t, ctx, rb2), "the file, after a second suspend")
}

// testSuspendErrors: a destroyed box is Gone to Suspend, and an id never
// suspended is NotFound to Resume.
func testSuspendErrors(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b, _, sp, ok := s.suspendable(t, ctx, nil)
	if !ok {
		return
	}
	_, err := sp.Resume(ctx, "boxfs-conformance-never-suspended-"+providers.NewID(4))
	wantCode(t, err, providers.NotFound, "Resume of an id never suspended")
	require.NoError(t, b.Destroy(ctx))
	_, err = sp.Suspend(ctx, b)
	wantCode(t, err, providers.Gone, "Suspend of a destroyed box")
}

// testSuspendLifetime suspends a box at once and resumes it after its
// lifetime (Harness.Lifetime, at least 10 s so that the suspend comes
// first): the lifetime counts from when the box was made, suspended or not,
// so the box is gone.
func testSuspendLifetime(t *testing.T, s *suite) {
	ctx := testCtx(t)
	lifetime := max(s.h.Lifetime, 10*time.Second)
	start := time.Now()
	b, _, sp, ok := s.suspendable(t, ctx, func(sp *providers.Spec) { sp.Lifetime = lifetime })
	if !ok {
		return
	}
	id, err := sp.Suspend(ctx, b)
	require.NoError(t, err, "Suspend")
	time.Sleep(time.Until(start.Add(lifetime + time.Second)))
	rb, err := sp.Resume(ctx, id)
	if err == nil {
		resumed(t, rb)
	}
	code := providers.CodeOf(err)
	assert.True(t, code == providers.Gone || code == providers.NotFound,
		"Resume of a box past its lifetime of %v: %v (code %v), want Gone or NotFound", lifetime, err, code)
}

// testSnapshot saves a box's filesystem and starts a new box from it: the
// new box has the file as it was at the snapshot, not as the first box
// changed it after, and the first box runs on.
func testSnapshot(t *testing.T, s *suite) {
	ctx := testCtx(t)
	sn, ok := s.h.Provider.(providers.Snapshotter)
	if !ok {
		if !slices.Contains(s.h.Unsupported, "snapshot") {
			t.Errorf("provider %q is no providers.Snapshotter, but the harness does not list spec field snapshot as unsupported", s.h.Provider.Name())
		}
		t.Logf("unsupported: provider %q is no providers.Snapshotter", s.h.Provider.Name())
		return
	}
	require.NotContains(t, s.h.Unsupported, "snapshot", "a Snapshotter must take Spec.Snapshot")
	b := s.box(t, nil)
	homeWrite(t, ctx, b, "at the snapshot")
	name := "boxfs-conformance-" + strings.ToLower(providers.NewID(6))
	id, err := sn.Snapshot(ctx, b, name)
	require.NoError(t, err, "Snapshot")
	require.NotEmpty(t, id)
	if s.h.RemoveSnapshot != nil {
		t.Cleanup(func() {
			if err := s.h.RemoveSnapshot(id); err != nil {
				t.Errorf("cleanup: removing snapshot %s: %v", id, err)
			}
		})
	}
	homeWrite(t, ctx, b, "after the snapshot")
	nb := s.box(t, func(sp *providers.Spec) { sp.Snapshot = id })
	assert.Equal(t, "at the snapshot", homeCat(t, ctx, nb), "the file in a box made from the snapshot")
	assert.Equal(t, "after the snapshot", homeCat(t, ctx, b), "the file in the box the snapshot was taken of")
	st, err := b.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, providers.StateRunning, st.State, "the box a snapshot was taken of")

	// Daytona answers a snapshot it lacks as a bad request: NotFound or
	// Invalid.
	nb2, err := s.h.Provider.Create(ctx, overlay(s.spec(t), providers.Spec{Snapshot: "boxfs-conformance-no-such-snapshot"}))
	if nb2 != nil {
		nb2.Destroy(ctx)
	}
	code := providers.CodeOf(err)
	assert.True(t, code == providers.NotFound || code == providers.Invalid,
		"Create from a snapshot that does not exist: %v (code %v), want NotFound or Invalid", err, code)
}

// testReconnect finds a box again from a fresh provider, as a new process
// of boxfs does after the one that made it died with a command running:
// the box runs, takes commands, and the command left running still runs
// (nothing the earlier process started was ended by its death). Where a
// command's output arrives at its end, and a box runs one command at a
// time, the command left running cannot be seen from another command: the
// box is found again while it runs, and takes commands once it ends.
func testReconnect(t *testing.T, s *suite) {
	ctx := testCtx(t)
	b := s.box(t, nil)
	if s.h.OutputAtEnd {
		p := s.startLong(t, ctx, b)
		rb := reconnect(t, ctx, s, b)
		require.NoError(t, p.Kill(ctx), "Kill of the command left running")
		waitWithin(t, p, endBound, "Kill")
		out := mustRun(t, ctx, rb, providers.ExecRequest{Argv: []string{"printf", PrintfNUL, "reconnected"}})
		assert.Equal(t, "reconnected\x00", string(out))
		return
	}
	p, pids := startGroup(t, ctx, b)
	rb := reconnect(t, ctx, s, b)
	assert.ElementsMatch(t, pids, alive(t, rb, pids), "the command left running, seen from the reconnected box")
	out := mustRun(t, ctx, rb, providers.ExecRequest{Argv: []string{"printf", PrintfNUL, "reconnected"}})
	assert.Equal(t, "reconnected\x00", string(out))
	require.NoError(t, p.Kill(ctx), "Kill of the command left running")
	assert.Empty(t, alive(t, rb, pids), "the command's processes after Kill")
}

// reconnect attaches to b from a fresh provider and checks that it runs.
func reconnect(t *testing.T, ctx context.Context, s *suite, b providers.Box) providers.Box {
	t.Helper()
	prov := s.h.Provider
	if s.h.Reopen != nil {
		prov = s.h.Reopen(t)
	}
	rb, err := prov.Attach(ctx, b.ID())
	require.NoError(t, err, "Attach from a fresh provider")
	assert.Equal(t, b.ID(), rb.ID())
	st, err := rb.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, providers.StateRunning, st.State)
	return rb
}
