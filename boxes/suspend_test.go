package boxes_test

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// suspendable is a manager over a fake provider whose boxes run command
// lines through a fake sh: "sleep" runs until killed, "echo WORDS" prints
// WORDS.
type suspendable struct {
	fake  *fake.Provider
	m     *boxes.Manager
	state string
}

func newSuspendable(t *testing.T) *suspendable {
	t.Helper()
	fp := fake.New(fake.WithFacts(func(f *providers.Facts) { f.Shell = "" }))
	fp.Program("sh", func(ctx context.Context, pc *fake.Proc) int {
		line := pc.Argv[len(pc.Argv)-1]
		switch {
		case line == "sleep":
			<-ctx.Done()
			return 137
		case strings.HasPrefix(line, "echo "):
			pc.Stdout.Write([]byte(strings.TrimPrefix(line, "echo ") + "\n"))
		}
		return 0
	})
	e := &suspendable{fake: fp, state: t.TempDir()}
	e.m = e.open(t)
	return e
}

// open opens a manager on the environment's state directory, as a new
// daemon would.
func (e *suspendable) open(t *testing.T) *boxes.Manager {
	t.Helper()
	m, err := boxes.New(boxes.Options{
		StateDir:        e.state,
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return e.fake, nil },
		OpTimeout:       5 * time.Second,
		Logger:          quiet(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

func (e *suspendable) box(t *testing.T, name string) *boxes.Box {
	t.Helper()
	require.NoError(t, e.m.Create(tctx(t), name, "", providers.Spec{}))
	b, err := e.m.Box(name)
	require.NoError(t, err)
	return b
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// errno is the errno err carries, or 0.
func errno(err error) syscall.Errno {
	e, _ := providers.ErrnoOf(err)
	return e
}

// readAll follows a command's output to its end, within a bound.
func readAll(t *testing.T, c *boxes.Command) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, _, err := c.ReadAt(ctx, buf, int64(len(out)))
		require.NoError(t, err, "a reader of command %d's output", c.N())
		if n == 0 {
			return string(out)
		}
		out = append(out, buf[:n]...)
	}
}

type factsOut struct {
	State       string
	Suspend     string
	SuspendedAt string
	ResumeAuto  bool
	ResumedFrom *struct {
		How, Box, Keeps string
	}
}

func facts(t *testing.T, b *boxes.Box) factsOut {
	t.Helper()
	raw, err := b.FactsJSON(tctx(t))
	require.NoError(t, err)
	var f factsOut
	require.NoError(t, json.Unmarshal(raw, &f), "%s", raw)
	return f
}

func TestSuspendRefusesRunningCommandUnlessForced(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	cmd, err := b.Commands().Start(ctx, "sleep")
	require.NoError(t, err)

	err = b.Suspend(ctx, false)
	require.Error(t, err)
	assert.Equal(t, syscall.EBUSY, errno(err), "suspend with a command running: %v", err)
	assert.Contains(t, err.Error(), "cmds/1")
	assert.Equal(t, boxes.StateReady, b.Info().State)
	assert.True(t, cmd.Running(), "a refused suspend touched the command")
	assert.Equal(t, providers.StateRunning, fakeStatus(t, e.fake, b))

	done := make(chan string, 1)
	go func() { done <- readAll(t, cmd) }() // a reader following the command
	require.NoError(t, b.Suspend(ctx, true))
	assert.Equal(t, boxes.StatusKilled, cmd.Status())
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a reader of the killed command's output did not reach EOF")
	}
	assert.Equal(t, boxes.StateSuspended, b.Info().State)
	assert.Equal(t, providers.StateStopped, fakeStatus(t, e.fake, b))
}

func fakeStatus(t *testing.T, fp *fake.Provider, b *boxes.Box) providers.State {
	t.Helper()
	for _, fb := range fp.Boxes() {
		if fb.ID() == b.Info().ID {
			st, err := fb.Status(tctx(t))
			require.NoError(t, err)
			return st.State
		}
	}
	t.Fatalf("the fake has no box %s", b.Info().ID)
	return ""
}

func TestSuspendPushesThenResumeReopens(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	_, c, err := b.Parts(ctx)
	require.NoError(t, err)
	h, _, err := c.Create(ctx, "f", syscall.O_WRONLY|syscall.O_CREAT, 0o644)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("written on the host"), 0)
	require.NoError(t, err)

	err = b.Suspend(ctx, false)
	assert.Equal(t, syscall.EBUSY, errno(err), "suspend with work/f open: %v", err)
	assert.Contains(t, err.Error(), "work/f is open")
	h.Release(ctx)
	require.NoError(t, b.Suspend(ctx, false))

	_, _, err = b.Parts(ctx)
	assert.Equal(t, syscall.EHOSTDOWN, errno(err), "work/ of a suspended box: %v", err)
	assert.Contains(t, err.Error(), "is suspended")
	f := facts(t, b)
	assert.Equal(t, boxes.StateSuspended, f.State)
	assert.NotEmpty(t, f.SuspendedAt)
	assert.Equal(t, providers.SuspendFilesystem, f.Suspend)
	assert.Equal(t, "a fake "+b.Info().ID+" suspended", strings.Join(strings.Fields(listing(e.m)), " "))

	mark := len(e.fake.Calls())
	require.NoError(t, b.Resume(ctx))
	assert.Equal(t, boxes.StateReady, b.Info().State)
	got, err := e.fake.Boxes()[0].Files().ReadFile(ctx, "/work/f")
	require.NoError(t, err, "the dirty file was not pushed before the suspend")
	got.Close()
	_, c2, err := b.Parts(ctx)
	require.NoError(t, err)
	assert.NotSame(t, c, c2, "the cache from before the suspend was kept")
	fi, err := c2.Lookup(ctx, "f")
	require.NoError(t, err)
	assert.EqualValues(t, len("written on the host"), fi.Size)
	asked := false
	for _, call := range e.fake.Calls()[mark:] {
		asked = asked || call.Path == "/work" && (call.Op == "ReadDir" || call.Op == "Walk" || call.Op == "Lstat")
	}
	assert.True(t, asked, "the listing was not read again after the resume")
	f = facts(t, b)
	require.NotNil(t, f.ResumedFrom)
	assert.Equal(t, "resume", f.ResumedFrom.How)
	assert.Equal(t, providers.SuspendFilesystem, f.ResumedFrom.Keeps)
	assert.Empty(t, f.SuspendedAt)
}

func listing(m *boxes.Manager) string {
	var sb strings.Builder
	for _, i := range m.List() {
		sb.WriteString(i.Name + " " + i.Provider + " " + i.ID + " " + i.State + "\n")
	}
	return sb.String()
}

func TestResumeAuto(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	require.NoError(t, b.SetResumeAuto(true))
	require.NoError(t, b.Suspend(ctx, false))
	_, c, err := b.Parts(ctx) // a use of work/
	require.NoError(t, err, "a use of work/ of a resume=auto box")
	require.NotNil(t, c)
	assert.Equal(t, boxes.StateReady, b.Info().State)
	assert.Equal(t, providers.StateRunning, fakeStatus(t, e.fake, b))
}

func TestFailedSuspendLeavesBoxRunning(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	e.fake.On(fake.Match{Op: "Suspend"}).Fail(providers.Unavailable).Once()
	require.Error(t, b.Suspend(ctx, false))
	assert.Equal(t, boxes.StateReady, b.Info().State)
	assert.Equal(t, providers.StateRunning, fakeStatus(t, e.fake, b))
	cmd, err := b.Commands().Start(ctx, "echo still here")
	require.NoError(t, err)
	assert.Equal(t, "still here\n", readAll(t, cmd))
}

func TestSuspendSurvivesRestart(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	require.NoError(t, b.Suspend(ctx, false))

	m2 := e.open(t) // a new daemon on the same state directory
	b2, err := m2.Box("a")
	require.NoError(t, err)
	assert.Equal(t, boxes.StateSuspended, b2.Info().State)
	mark := len(e.fake.Calls())
	_, err = b2.FactsJSON(ctx)
	require.NoError(t, err)
	for _, c := range e.fake.Calls()[mark:] {
		assert.NotEqual(t, "Attach", c.Op, "facts.json of a suspended box reached it")
	}
	require.NoError(t, b2.Resume(ctx))
	cmd, err := b2.Commands().Start(ctx, "echo back")
	require.NoError(t, err)
	assert.Equal(t, "back\n", readAll(t, cmd))
}

// A daemon that dies with a command running: the next one finds the box
// again, the command lost, and facts.json says it reconnected.
func TestReconnectAfterDeath(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	_, err := b.Commands().Start(ctx, "sleep")
	require.NoError(t, err)

	m2 := e.open(t) // no Shutdown of the first: it died
	b2, err := m2.Box("a")
	require.NoError(t, err)
	n, st := b2.Commands().Last()
	assert.Equal(t, 1, n)
	assert.Equal(t, boxes.StatusLost, st)
	f := facts(t, b2)
	require.NotNil(t, f.ResumedFrom, "facts.json after a reconnect")
	assert.Equal(t, "reconnect", f.ResumedFrom.How)
	assert.Equal(t, b.Info().ID, f.ResumedFrom.Box)
	cmd, err := b2.Commands().Start(ctx, "echo reconnected")
	require.NoError(t, err)
	assert.Equal(t, "reconnected\n", readAll(t, cmd))
}

func TestResumeThatCannotReopenSuspendsAgain(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	require.NoError(t, b.Suspend(ctx, false))
	e.fake.On(fake.Match{Op: "Facts"}).Fail(providers.Unavailable).Times(20)
	err := b.Resume(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "suspended again")
	assert.Equal(t, boxes.StateSuspended, b.Info().State)
	assert.Equal(t, providers.StateStopped, fakeStatus(t, e.fake, b))
	assert.Contains(t, b.Err(), "could not be reopened")
	e.fake.ClearRules()
	require.NoError(t, b.Resume(ctx))
	assert.Equal(t, boxes.StateReady, b.Info().State)
}

func TestSnapshot(t *testing.T) {
	e := newSuspendable(t)
	b := e.box(t, "a")
	ctx := tctx(t)
	require.NoError(t, e.fake.Boxes()[0].Files().WriteFile(ctx, "/work/kept", strings.NewReader("at the snapshot"), 0o644))
	s, err := b.Snapshot(ctx, "first")
	require.NoError(t, err)
	assert.Equal(t, "first", s.Name)
	_, err = b.Snapshot(ctx, "first")
	assert.True(t, providers.IsCode(err, providers.Exists), "a second snapshot named first: %v", err)
	_, err = b.Snapshot(ctx, "no spaces")
	assert.True(t, providers.IsCode(err, providers.Invalid), "a snapshot name with a blank: %v", err)
	line := string(b.SnapshotsText())
	assert.Regexp(t, `^first `+s.ID+` \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n$`, line)

	require.NoError(t, e.m.Create(ctx, "b", "", providers.Spec{Snapshot: s.ID}))
	nb, err := e.m.Box("b")
	require.NoError(t, err)
	_, c, err := nb.Parts(ctx)
	require.NoError(t, err)
	fi, err := c.Lookup(ctx, "kept")
	require.NoError(t, err, "a box made from the snapshot lacks the file")
	assert.EqualValues(t, len("at the snapshot"), fi.Size)
}

func TestSplitResume(t *testing.T) {
	for _, tt := range []struct {
		words []string
		auto  bool
		rest  []string
		bad   bool
	}{
		{words: []string{"image=x", "resume=auto"}, auto: true, rest: []string{"image=x"}},
		{words: []string{"resume=manual"}, rest: nil},
		{words: []string{"image=x"}, rest: []string{"image=x"}},
		{words: []string{"resume=sometimes"}, bad: true},
		{words: []string{"resume=auto", "resume=auto"}, bad: true},
	} {
		t.Run(strings.Join(tt.words, "/"), func(t *testing.T) {
			auto, rest, err := boxes.SplitResume(tt.words)
			if tt.bad {
				assert.True(t, providers.IsCode(err, providers.Invalid), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.auto, auto)
			assert.Equal(t, tt.rest, rest)
		})
	}
}
