package launch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// A box whose processes do not live between commands (Archil's) cannot
// keep a program alive: Unsupported, before anything runs in it.
func TestNoLiveProcesses(t *testing.T) {
	p := fake.New(fake.WithFacts(func(f *providers.Facts) { f.LiveProcesses = providers.Bool(false) }))
	b, err := p.Create(context.Background(), providers.Spec{})
	require.NoError(t, err)
	f, err := b.Facts(context.Background())
	require.NoError(t, err)
	_, err = launch.New(b, launch.Options{Facts: f})
	assert.True(t, providers.IsCode(err, providers.Unsupported), "%v", err)
	assert.Empty(t, p.CallsOf("Exec"), "nothing ran in the box")
}

// Either supervisor stops, reads and restarts what the other started:
// they keep a launch's files the same way.
func TestHandover(t *testing.T) {
	b := localBox(t)
	f := facts(t, b)
	sh, err := launch.New(b, launch.Options{Facts: f, Force: launch.ViaSh})
	require.NoError(t, err)
	ag, err := launch.New(b, launch.Options{Facts: f, Force: launch.ViaAgent, Agent: boxfsbin.Path(t)})
	require.NoError(t, err)
	ctx := context.Background()
	spec := launch.Spec{Argv: []string{"sh", "-c", `echo "run $BOXFS_INCARNATION"; exec sleep 300`}}
	for _, pair := range [][2]*launch.Launcher{{sh, ag}, {ag, sh}} {
		first, second := pair[0], pair[1]
		st, err := first.Start(ctx, "handover", spec)
		require.NoError(t, err)
		require.Equal(t, launch.Running, st.Phase)
		got, err := second.State(ctx, "handover")
		require.NoError(t, err)
		assert.Equal(t, st.PID, got.PID)
		again, err := second.Start(ctx, "handover", spec)
		require.NoError(t, err)
		assert.Equal(t, st.PID, again.PID, "the other supervisor sees it run")
		restarted, err := second.Restart(ctx, "handover", launch.Input{})
		require.NoError(t, err)
		assert.Equal(t, 2, restarted.Incarnation)
		lg, err := second.ReadLog(ctx, "handover", 0, 1<<20)
		require.NoError(t, err)
		assert.Contains(t, string(lg.Data), "run 1\n")
		zero := time.Duration(0)
		stopped, err := second.Stop(ctx, "handover", &zero)
		require.NoError(t, err)
		assert.Equal(t, launch.Stopped, stopped.Phase)
		list, err := first.List(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		assert.Equal(t, launch.Stopped, list[0].Phase)
		require.NoError(t, first.Remove(ctx, "handover"))
		_, err = second.State(ctx, "handover")
		assert.True(t, providers.IsCode(err, providers.NotFound), "%v", err)
	}
}

// The sh supervisor's script travels until the box has it installed, and
// again when the box has lost it.
func TestScriptSentOnce(t *testing.T) {
	installed := false
	p := fake.New()
	p.Program("sh", func(ctx context.Context, pc *fake.Proc) int {
		switch {
		case pc.Argv[4] != "":
			installed = true
		case !installed:
			return 87
		}
		fmt.Fprintln(pc.Stdout, `{"name":"web","phase":"running","incarnation":1,"restarts":0,"via":"sh"}`)
		return 0
	})
	b, err := p.Create(context.Background(), providers.Spec{})
	require.NoError(t, err)
	f, err := b.Facts(context.Background())
	require.NoError(t, err)
	l, err := launch.New(b, launch.Options{Facts: f})
	require.NoError(t, err)
	state := func() {
		st, err := l.State(context.Background(), "web")
		require.NoError(t, err)
		assert.Equal(t, launch.Running, st.Phase)
	}
	state()
	state()
	installed = false // the box lost it (a new /tmp)
	state()
	var sent []bool
	for _, c := range p.CallsOf("Exec") {
		sent = append(sent, c.Argv[4] != "")
	}
	assert.Equal(t, []bool{true, false, false, true}, sent)
}
