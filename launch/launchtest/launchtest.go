// Package launchtest is the conformance suite of launches: every box with
// live processes keeps a program alive through package launch the same way.
//
// A provider's test (or one table test over providers) calls Run with a
// running box and the launcher options for it:
//
//	launchtest.Run(t, launchtest.Harness{Box: box, Options: launch.Options{Facts: facts}})
//
// The subtests run in parallel on that one box, each with launches of its
// own names (and the spool checks in a TMPDIR of their own), and stop what
// they started when they end. The programs they launch need a POSIX sh,
// sleep, cat, head, od and sha256sum in the box (coreutils or BusyBox).
package launchtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/providers"
)

// Harness is a box to run the suite on.
type Harness struct {
	// Box runs the suite's launches; it must have live processes.
	Box providers.Box
	// Options make the suite's launchers (Facts at least).
	Options launch.Options
	// User is a user of the box other than the launcher's ("nobody"), for
	// the user= subtest; "" skips it.
	User string
}

// suite is one run of the suite.
type suite struct {
	h   Harness
	run string // this run's id, in every launch name
}

// Run runs the suite on h.
func Run(t *testing.T, h Harness) {
	require.NotNil(t, h.Box, "launchtest: no box")
	s := &suite{h: h, run: providers.NewID(3)}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"RestartOnCrash", s.restartOnCrash},
		{"GaveUp", s.gaveUp},
		{"TerminalExits", s.terminalExits},
		{"StopWithGrace", s.stopWithGrace},
		{"StopKillsAfterGrace", s.stopKillsAfterGrace},
		{"BeforeStop", s.beforeStop},
		{"ConcurrentStops", s.concurrentStops},
		{"StopDiedMidway", s.stopDiedMidway},
		{"RelaunchByName", s.relaunchByName},
		{"ConcurrentStarts", s.concurrentStarts},
		{"Restart", s.restart},
		{"WatchdogRevivesSupervisor", s.watchdogRevives},
		{"OwnerlessLockBroken", s.ownerlessLock},
		{"SecretsAndStdin", s.secretsAndStdin},
		{"SecretsLostWithSupervisor", s.secretsLost},
		{"Environment", s.environment},
		{"OutputBounded", s.outputBounded},
		{"SpoolChecks", s.spoolChecks},
		{"User", s.user},
		{"Refusals", s.refusals},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// launcher returns a launcher of the harness's box with opts changed by f.
func (s *suite) launcher(t *testing.T, f func(*launch.Options)) *launch.Launcher {
	t.Helper()
	opts := s.h.Options
	if f != nil {
		f(&opts)
	}
	l, err := launch.New(s.h.Box, opts)
	require.NoError(t, err)
	return l
}

// start starts a launch named after the test, and stops and removes it
// when the test ends.
func (s *suite) start(t *testing.T, l *launch.Launcher, tag string, spec launch.Spec) (string, launch.State) {
	t.Helper()
	name := s.name(t, tag)
	st, err := l.Start(ctx(t), name, spec)
	require.NoError(t, err, "start %s", name)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		zero := time.Duration(0)
		l.Stop(c, name, &zero)
		l.Remove(c, name)
	})
	return name, st
}

func (s *suite) name(t *testing.T, tag string) string {
	n := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if i := strings.LastIndexByte(n, '-'); i >= 0 {
		n = n[i+1:]
	}
	if len(n) > 30 {
		n = n[:30]
	}
	return fmt.Sprintf("lt-%s-%s%s", s.run, n, tag)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

// sh runs a command line in the box and returns its stdout; a failure
// fails the test.
func (s *suite) sh(t *testing.T, line string) string {
	t.Helper()
	out, code, err := s.shCode(t, line)
	require.NoError(t, err, "sh %q", line)
	require.Equal(t, 0, code, "sh %q: %s", line, out)
	return out
}

func (s *suite) shCode(t *testing.T, line string) (string, int, error) {
	t.Helper()
	exec := s.h.Options.Exec
	if exec == nil {
		exec = s.h.Box.Exec
	}
	var out bytes.Buffer
	p, err := exec(ctx(t), providers.ExecRequest{Argv: []string{"sh", "-c", line}, Dir: "/", Stdout: &out, Stderr: &out})
	if err != nil {
		return "", 0, err
	}
	code, err := p.Wait()
	return out.String(), code, err
}

// wait polls the launch's state until ok says so, within bound.
func wait(t *testing.T, l *launch.Launcher, name string, bound time.Duration, what string, ok func(launch.State) bool) launch.State {
	t.Helper()
	deadline := time.Now().Add(bound)
	var st launch.State
	var err error
	for {
		st, err = l.State(ctx(t), name)
		if err == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			require.Failf(t, "launch state", "%s: not %s within %v: last state %+v, err %v", name, what, bound, st, err)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

func phase(p launch.Phase) func(launch.State) bool {
	return func(st launch.State) bool { return st.Phase == p }
}

// readLog reads the launch's whole kept output.
func readLog(t *testing.T, l *launch.Launcher, name string) string {
	t.Helper()
	var out []byte
	off := int64(0)
	for {
		lg, err := l.ReadLog(ctx(t), name, off, launch.MaxLogRead)
		require.NoError(t, err)
		out = append(out, lg.Data...)
		off = max(off, lg.Base) + int64(len(lg.Data))
		if off >= lg.End || len(lg.Data) == 0 {
			return string(out)
		}
	}
}

// waitLog waits until the launch's output holds want.
func waitLog(t *testing.T, l *launch.Launcher, name, want string, bound time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		got := readLog(t, l, name)
		if strings.Contains(got, want) {
			return got
		}
		if time.Now().After(deadline) {
			require.Failf(t, "launch output", "%s: output has no %q within %v: %q", name, want, bound, got)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

func sh(script string) []string { return []string{"sh", "-c", script} }

func dur(d time.Duration) *time.Duration { return &d }

func (s *suite) restartOnCrash(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`echo "start $BOXFS_INCARNATION"; sleep 0.3; exit 3`), Burst: 100})
	st := wait(t, l, name, 30*time.Second, "restarted twice", func(st launch.State) bool { return st.Incarnation >= 3 })
	assert.Contains(t, []launch.Phase{launch.Running, launch.Restarting}, st.Phase)
	assert.GreaterOrEqual(t, st.Restarts, 2)
	require.NotNil(t, st.LastExit)
	assert.Equal(t, 3, *st.LastExit)
	out := readLog(t, l, name)
	assert.Contains(t, out, "start 1\n")
	assert.Contains(t, out, "start 2\n")
}

func (s *suite) gaveUp(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`echo run; exit 7`), Burst: 2, BurstWindow: time.Minute})
	st := wait(t, l, name, 30*time.Second, "gave_up", phase(launch.GaveUp))
	require.NotNil(t, st.LastExit)
	assert.Equal(t, 7, *st.LastExit, "gave_up keeps the last exit code")
	assert.Equal(t, 3, st.Incarnation, "two restarts, then the third exit gives up")
	assert.Equal(t, 2, st.Restarts)
	assert.NotEmpty(t, st.Reason)
	assert.Equal(t, 3, strings.Count(readLog(t, l, name), "run\n"))
	time.Sleep(time.Second)
	again, err := l.State(ctx(t), name)
	require.NoError(t, err)
	assert.Equal(t, 3, again.Incarnation, "nothing runs after gave_up")
}

func (s *suite) terminalExits(t *testing.T) {
	l := s.launcher(t, nil)
	cases := []struct {
		tag  string
		spec launch.Spec
		exit int
	}{
		{"-zero", launch.Spec{Argv: sh(`exit 0`)}, 0},
		{"-terminal", launch.Spec{Argv: sh(`exit 4`), Terminal: []int{3, 4}}, 4},
		{"-off", launch.Spec{Argv: sh(`exit 5`), NoRestart: true}, 5},
	}
	for _, c := range cases {
		name, _ := s.start(t, l, c.tag, c.spec)
		st := wait(t, l, name, 20*time.Second, "exited", phase(launch.Exited))
		require.NotNil(t, st.LastExit, c.tag)
		assert.Equal(t, c.exit, *st.LastExit, c.tag)
		assert.Equal(t, 1, st.Incarnation, "%s: ran once", c.tag)
		assert.Equal(t, 0, st.Restarts, c.tag)
	}
}

// graceful ends on TERM after a pause, saying so.
const graceful = `trap 'echo got-term; sleep 1; echo clean-exit; exit 0' TERM
echo ready
while :; do sleep 0.1; done`

func (s *suite) stopWithGrace(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(graceful), Grace: dur(10 * time.Second)})
	wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	waitLog(t, l, name, "ready", 10*time.Second)
	st, err := l.Stop(ctx(t), name, nil)
	require.NoError(t, err)
	assert.Equal(t, launch.Stopped, st.Phase)
	require.NotNil(t, st.LastExit)
	assert.Equal(t, 0, *st.LastExit, "the program ended itself within the grace")
	out := readLog(t, l, name)
	assert.Contains(t, out, "got-term")
	assert.Contains(t, out, "clean-exit", "the grace let it finish")
	s.assertGone(t, st.PID)
	time.Sleep(time.Second)
	again, err := l.State(ctx(t), name)
	require.NoError(t, err)
	assert.Equal(t, launch.Stopped, again.Phase, "a stopped launch stays stopped")
	assert.Equal(t, st.Incarnation, again.Incarnation)
}

// assertGone checks that no process of group pg is left in the box.
func (s *suite) assertGone(t *testing.T, pg int) {
	t.Helper()
	if pg == 0 {
		return
	}
	out := s.sh(t, fmt.Sprintf(`for p in /proc/[0-9]*; do read -r l 2>/dev/null < $p/stat || continue; l=${l##*) }; set -- $l; [ "$3" = %d ] && [ "$1" != Z ] && echo "${p#/proc/}"; done; true`, pg))
	assert.Empty(t, strings.TrimSpace(out), "processes of group %d still run", pg)
}

func (s *suite) stopKillsAfterGrace(t *testing.T) {
	l := s.launcher(t, nil)
	// It ignores TERM, and so does a child it leaves in its group.
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`trap '' TERM; sh -c 'trap "" TERM; sleep 300' & echo ready; while :; do sleep 0.1; done`)})
	wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	waitLog(t, l, name, "ready", 10*time.Second)
	start := time.Now()
	st, err := l.Stop(ctx(t), name, dur(time.Second))
	require.NoError(t, err)
	took := time.Since(start)
	assert.Equal(t, launch.Stopped, st.Phase)
	require.NotNil(t, st.LastExit)
	assert.Equal(t, 128+9, *st.LastExit, "killed after the grace")
	assert.GreaterOrEqual(t, took, time.Second, "the grace was waited")
	s.assertGone(t, st.PID)
}

func (s *suite) beforeStop(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "-ok", launch.Spec{
		Argv:       sh(`trap '' TERM; echo ready; while :; do sleep 0.1; done`),
		BeforeStop: sh(`echo "before-stop ran as $BOXFS_INCARNATION"; exit 9`),
	})
	waitLog(t, l, name, "ready", 20*time.Second)
	st, err := l.Stop(ctx(t), name, dur(0))
	require.NoError(t, err, "a failing before-stop never fails the stop")
	assert.Equal(t, launch.Stopped, st.Phase)
	require.NotNil(t, st.BeforeStopExit)
	assert.Equal(t, 9, *st.BeforeStopExit)
	out := readLog(t, l, name)
	assert.Equal(t, 1, strings.Count(out, "before-stop ran as 1"), "once: %q", out)
	assert.Contains(t, out, "before-stop exited 9")

	// A before-stop that hangs is ended at its bound.
	name, _ = s.start(t, l, "-hang", launch.Spec{
		Argv:          sh(`echo ready; exec sleep 300`),
		BeforeStop:    sh(`echo hanging; exec sleep 300`),
		BeforeStopMax: time.Second,
	})
	waitLog(t, l, name, "ready", 20*time.Second)
	start := time.Now()
	st, err = l.Stop(ctx(t), name, dur(0))
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 30*time.Second)
	assert.Equal(t, launch.Stopped, st.Phase)
	require.NotNil(t, st.BeforeStopExit)
	assert.Equal(t, 128+9, *st.BeforeStopExit, "killed at its bound")
	assert.Contains(t, readLog(t, l, name), "hanging")
}

func (s *suite) concurrentStops(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{
		Argv:       sh(`trap 'echo got-term; sleep 1; exit 0' TERM; echo ready; while :; do sleep 0.1; done`),
		BeforeStop: sh(`echo before-stop`),
		Grace:      dur(10 * time.Second),
	})
	waitLog(t, l, name, "ready", 20*time.Second)
	var wg sync.WaitGroup
	states := make([]launch.State, 3)
	errs := make([]error, 3)
	for i := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = l.Stop(ctx(t), name, nil)
		}()
	}
	wg.Wait()
	for i := range states {
		require.NoError(t, errs[i])
		assert.Equal(t, launch.Stopped, states[i].Phase, "stop %d", i)
		assert.Equal(t, states[0].Incarnation, states[i].Incarnation)
		assert.Equal(t, states[0].LastExit, states[i].LastExit)
	}
	out := readLog(t, l, name)
	assert.Equal(t, 1, strings.Count(out, "got-term"), "one stop signalled: %q", out)
	assert.Equal(t, 1, strings.Count(out, "before-stop\n"), "the before-stop ran once: %q", out)
}

// stopDiedMidway kills a stop in the middle of its grace (as the end of
// the host that ran it would): a later start or stop is not held up by it.
func (s *suite) stopDiedMidway(t *testing.T) {
	l := s.launcher(t, nil)
	spec := launch.Spec{Argv: sh(`trap '' TERM; echo ready; while :; do sleep 0.1; done`), Grace: dur(60 * time.Second)}
	for _, then := range []string{"start", "stop"} {
		name, first, pid := s.stoppingRun(t, l, "-"+then, spec)
		s.kill9(t, pid)
		began := time.Now()
		var st launch.State
		var err error
		if then == "start" {
			st, err = l.Start(ctx(t), name, spec)
			require.NoError(t, err)
			assert.NotEqual(t, first.PID, st.PID, "a new run")
			s.assertGone(t, first.PID)
		} else {
			st, err = l.Stop(ctx(t), name, dur(0))
			require.NoError(t, err)
			assert.Equal(t, launch.Stopped, st.Phase)
			s.assertGone(t, first.PID)
		}
		assert.Less(t, time.Since(began), 30*time.Second, "%s after a dead stop", then)
	}

	// A start that found the stop alive, and waits for it, goes on once
	// the stop dies.
	name, first, pid := s.stoppingRun(t, l, "-waiting", spec)
	type result struct {
		st  launch.State
		err error
	}
	started := make(chan result, 1)
	go func() {
		st, err := l.Start(ctx(t), name, spec)
		started <- result{st, err}
	}()
	select {
	case r := <-started:
		t.Fatalf("a start returned while the stop ran: %+v, %v", r.st, r.err)
	case <-time.After(2 * time.Second):
	}
	s.kill9(t, pid)
	select {
	case r := <-started:
		require.NoError(t, r.err)
		assert.NotEqual(t, first.PID, r.st.PID, "a new run")
		s.assertGone(t, first.PID)
	case <-time.After(30 * time.Second):
		t.Fatal("a start waiting for a stop did not go on within 30 s of the stop's death")
	}
}

// stoppingRun starts a launch of spec named after the test and suffix,
// and a stop of it in the background; it returns once the launch is
// stopping, with its running state and the pid of the stop that owns it.
func (s *suite) stoppingRun(t *testing.T, l *launch.Launcher, suffix string, spec launch.Spec) (string, launch.State, int) {
	t.Helper()
	name, _ := s.start(t, l, suffix, spec)
	first := wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	go l.Stop(context.Background(), name, nil)
	wait(t, l, name, 20*time.Second, "stopping", phase(launch.Stopping))
	owner := s.sh(t, fmt.Sprintf("cat %s/%s/stopping/owner", s.spool(t, ""), name))
	var pid int
	_, err := fmt.Sscan(owner, &pid)
	require.NoError(t, err, "stopping/owner: %q", owner)
	return name, first, pid
}

func (s *suite) relaunchByName(t *testing.T) {
	l := s.launcher(t, nil)
	spec := launch.Spec{Argv: sh(`echo "started $BOXFS_INCARNATION"; exec sleep 300`)}
	name, _ := s.start(t, l, "", spec)
	first := wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	again, err := l.Start(ctx(t), name, spec)
	require.NoError(t, err)
	assert.Equal(t, first.PID, again.PID, "launching a running name starts nothing")
	assert.Equal(t, first.Incarnation, again.Incarnation)
	_, err = l.Stop(ctx(t), name, dur(0))
	require.NoError(t, err)
	third, err := l.Start(ctx(t), name, spec)
	require.NoError(t, err)
	third = wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	assert.NotEqual(t, first.PID, third.PID, "an ended launch starts again")
	assert.Equal(t, 1, third.Incarnation)
	waitLog(t, l, name, "started 1\n", 10*time.Second)
	out := waitLog(t, l, name, "started 1\nstarted 1\n", 10*time.Second)
	assert.Equal(t, "started 1\nstarted 1\n", out, "out.log keeps the first run's output, has the second's, and nothing of the supervisor's own")
}

func (s *suite) concurrentStarts(t *testing.T) {
	l := s.launcher(t, nil)
	name := s.name(t, "")
	spec := launch.Spec{Argv: sh(`echo started; exec sleep 300`)}
	t.Cleanup(func() {
		l.Stop(context.Background(), name, dur(0))
		l.Remove(context.Background(), name)
	})
	var wg sync.WaitGroup
	states := make([]launch.State, 4)
	errs := make([]error, 4)
	for i := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = l.Start(ctx(t), name, spec)
		}()
	}
	wg.Wait()
	for i := range states {
		require.NoError(t, errs[i], "start %d", i)
	}
	st := wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	for i := range states {
		if states[i].Phase == launch.Running {
			assert.Equal(t, st.PID, states[i].PID, "start %d", i)
		}
	}
	time.Sleep(time.Second)
	assert.Equal(t, 1, strings.Count(readLog(t, l, name), "started"), "one program started")
}

func (s *suite) restart(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`echo "run $BOXFS_INCARNATION"; exec sleep 300`), Grace: dur(time.Second)})
	first := wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	st, err := l.Restart(ctx(t), name, launch.Input{})
	require.NoError(t, err)
	assert.Equal(t, launch.Running, st.Phase)
	assert.Equal(t, first.Incarnation+1, st.Incarnation)
	assert.NotEqual(t, first.PID, st.PID)
	s.assertGone(t, first.PID)
	waitLog(t, l, name, "run 2", 10*time.Second)
	_, err = l.Stop(ctx(t), name, dur(0))
	require.NoError(t, err)
	st, err = l.Restart(ctx(t), name, launch.Input{})
	require.NoError(t, err, "restarting a stopped launch starts it from its spec")
	assert.Contains(t, []launch.Phase{launch.Running, launch.Starting}, st.Phase)
	waitLog(t, l, name, "run 1", 10*time.Second)
}

// kill9 kills pid in the box.
func (s *suite) kill9(t *testing.T, pid int) {
	t.Helper()
	require.NotZero(t, pid)
	s.sh(t, fmt.Sprintf("kill -9 %d", pid))
}

func (s *suite) watchdogRevives(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`echo "run $BOXFS_INCARNATION"; exec sleep 300`)})
	first := wait(t, l, name, 20*time.Second, "running with a watchdog", func(st launch.State) bool {
		return st.Phase == launch.Running && st.Watchdog != 0
	})
	s.kill9(t, first.Supervisor)
	back := wait(t, l, name, 30*time.Second, "supervised again", func(st launch.State) bool {
		return st.Supervisor != 0 && st.Supervisor != first.Supervisor
	})
	assert.Equal(t, launch.Running, back.Phase)
	assert.Equal(t, first.PID, back.PID, "the program ran on")
	assert.Equal(t, first.Incarnation, back.Incarnation)
	// Still supervised: a crash is restarted.
	s.kill9(t, first.PID)
	st := wait(t, l, name, 30*time.Second, "restarted", func(st launch.State) bool {
		return st.Incarnation == first.Incarnation+1 && st.Phase == launch.Running
	})
	require.NotNil(t, st.LastExit)
	assert.Equal(t, 128+9, *st.LastExit)
	// And the watchdog is brought back by the supervisor.
	s.kill9(t, st.Watchdog)
	wait(t, l, name, 30*time.Second, "watched again", func(x launch.State) bool {
		return x.Watchdog != 0 && x.Watchdog != st.Watchdog
	})
}

// ownerlessLock: a supervisor killed between taking the launch's lock and
// naming itself its owner leaves a lock no one owns; the watchdog breaks
// it and brings a supervisor back all the same.
func (s *suite) ownerlessLock(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`exec sleep 300`)})
	first := wait(t, l, name, 20*time.Second, "running with a watchdog", func(st launch.State) bool {
		return st.Phase == launch.Running && st.Watchdog != 0
	})
	lock := fmt.Sprintf("%s/%s/lock", s.spool(t, ""), name)
	s.sh(t, fmt.Sprintf("i=0; until mkdir %s 2>/dev/null; do i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done; kill -9 %d", lock, first.Supervisor))
	back := wait(t, l, name, 60*time.Second, "supervised again", func(st launch.State) bool {
		return st.Supervisor != 0 && st.Supervisor != first.Supervisor
	})
	assert.Equal(t, launch.Running, back.Phase)
	assert.Equal(t, first.PID, back.PID, "the program ran on")
}

// secretProg prints the SHA-256 of its secrets (from BOXFS_SECRETS_FD) and
// of its stdin, then stays.
const secretProg = `s=$(eval "cat <&$BOXFS_SECRETS_FD" | sha256sum); i=$(sha256sum); echo "inc $BOXFS_INCARNATION secrets ${s%% *} stdin ${i%% *}"; exec sleep 300`

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (s *suite) secretsAndStdin(t *testing.T) {
	if !s.h.Options.Facts.TakesSecrets() {
		t.Skip("the box takes no secrets (see Refusals)")
	}
	l := s.launcher(t, nil)
	marker := "sekret-" + providers.NewID(8)
	in := launch.Input{Secrets: map[string]string{"API_KEY": marker, "OTHER": "a\nb c"}, Stdin: []byte("input " + marker + "\n")}
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(secretProg), Input: in})
	want := fmt.Sprintf("secrets %s stdin %s", sum([]byte("API_KEY="+marker+"\x00OTHER=a\nb c\x00")), sum(in.Stdin))
	waitLog(t, l, name, "inc 1 "+want, 20*time.Second)
	st, err := l.State(ctx(t), name)
	require.NoError(t, err)
	assert.True(t, st.Secrets)
	// Every incarnation gets them.
	s.kill9(t, st.PID)
	waitLog(t, l, name, "inc 2 "+want, 30*time.Second)
	// Nowhere in the box's files, argv or environments (the pattern is
	// not the marker's own text, so this command's argv does not hold it).
	pattern := strings.Replace(marker, "-", "[-]", 1)
	out := s.sh(t, fmt.Sprintf(`grep -rl '%s' %s /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null; true`, pattern, s.spool(t, "")))
	assert.Empty(t, strings.TrimSpace(out), "the secret is in these files")
}

// spool returns the box path of the launcher's spool for tmp ("" is the
// harness's TmpDir).
func (s *suite) spool(t *testing.T, tmp string) string {
	if tmp == "" {
		tmp = s.h.Options.Facts.TmpDir
	}
	if tmp == "" {
		tmp = "/tmp"
	}
	uid := strings.TrimSpace(s.sh(t, "id -u"))
	return strings.TrimSuffix(tmp, "/") + "/boxfs-launch-" + uid
}

func (s *suite) secretsLost(t *testing.T) {
	if !s.h.Options.Facts.TakesSecrets() {
		t.Skip("the box takes no secrets")
	}
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`exec sleep 300`), Input: launch.Input{Secrets: map[string]string{"K": "v"}}})
	st := wait(t, l, name, 20*time.Second, "running with a watchdog", func(st launch.State) bool {
		return st.Phase == launch.Running && st.Watchdog != 0
	})
	s.kill9(t, st.Supervisor)
	lost := wait(t, l, name, 30*time.Second, "lost", phase(launch.Lost))
	assert.NotEmpty(t, lost.Reason)
	// A start without the secrets again is refused...
	_, err := l.Restart(ctx(t), name, launch.Input{})
	assert.True(t, providers.IsCode(err, providers.Refused), "restart without the secrets: %v", err)
	// ...with them it starts, and the lost program is ended first.
	again, err := l.Restart(ctx(t), name, launch.Input{Secrets: map[string]string{"K": "v"}})
	require.NoError(t, err)
	assert.NotEqual(t, st.PID, again.PID)
	s.assertGone(t, st.PID)
}

func (s *suite) environment(t *testing.T) {
	l := s.launcher(t, nil)
	name, _ := s.start(t, l, "", launch.Spec{
		Argv: sh(`env; echo env-end; exec sleep 300`),
		Env:  map[string]string{"GREETING": "hi there", "MULTI": "a\nb"},
	})
	out := waitLog(t, l, name, "env-end", 20*time.Second)
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, " ") && k != "" && !strings.ContainsAny(k, " ") {
			names = append(names, k)
		}
	}
	assert.Contains(t, out, "GREETING=hi there\n")
	assert.Contains(t, out, "MULTI=a\nb\n")
	assert.Contains(t, out, "BOXFS_INCARNATION=1\n")
	for _, k := range names {
		switch {
		case k == "PATH" || k == "HOME" || k == "LANG" || k == "GREETING" || k == "MULTI" || k == "BOXFS_INCARNATION":
		case strings.HasPrefix(k, "BOXFS_"): // a provider's own marker
		case k == "PWD" || k == "SHLVL" || k == "_" || k == "OLDPWD": // sh's own
		default:
			t.Errorf("the program got %s from the box's environment", k)
		}
	}
}

func (s *suite) outputBounded(t *testing.T) {
	l := s.launcher(t, nil)
	const max = launch.MinLogMax
	// 1 MiB of numbered lines, then an end marker.
	name, _ := s.start(t, l, "", launch.Spec{
		Argv:   sh(`i=0; while [ $i -lt 16384 ]; do printf '%063d\n' $i; i=$((i+1)); done; echo the-end; exec sleep 300`),
		LogMax: max,
	})
	var lg launch.Log
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var err error
		lg, err = l.ReadLog(ctx(t), name, 0, launch.MaxLogRead)
		require.NoError(t, err)
		if bytes.HasSuffix(lg.Data, []byte("the-end\n")) {
			break
		}
		require.True(t, time.Now().Before(deadline), "no end of output: base %d end %d", lg.Base, lg.End)
		time.Sleep(300 * time.Millisecond)
	}
	assert.Equal(t, int64(16384*64+len("the-end\n")), lg.End, "offsets count every byte written")
	assert.Greater(t, lg.Base, int64(0), "the head was dropped")
	assert.LessOrEqual(t, len(lg.Data), max+1<<20, "the box keeps a bounded tail")
	assert.LessOrEqual(t, lg.End-lg.Base, int64(max+1<<20))
	// The kept tail is the output's own bytes, in order, at their offsets.
	first := lg.Base / 64
	line := fmt.Sprintf("%063d\n", first+1)
	at := (first+1)*64 - lg.Base
	require.Less(t, at+64, int64(len(lg.Data)))
	assert.Equal(t, line, string(lg.Data[at:at+64]))
	size := s.sh(t, fmt.Sprintf("wc -c < %s/%s/out.log", s.spool(t, ""), name))
	n, err := strconv.Atoi(strings.TrimSpace(size))
	require.NoError(t, err)
	assert.LessOrEqual(t, n, max+1<<20, "out.log in the box is bounded")
}

func (s *suite) spoolChecks(t *testing.T) {
	tmp := "/tmp/lt-spool-" + providers.NewID(6)
	s.sh(t, "mkdir -p "+tmp)
	t.Cleanup(func() { s.shCode(t, "rm -rf "+tmp) })
	l := s.launcher(t, func(o *launch.Options) { o.Facts.TmpDir = tmp })
	spool := s.spool(t, tmp)
	spec := launch.Spec{Argv: sh(`exec sleep 300`)}

	s.sh(t, fmt.Sprintf("mkdir %s/elsewhere && ln -s %s/elsewhere %s", tmp, tmp, spool))
	_, err := l.Start(ctx(t), s.name(t, "-link"), spec)
	require.Error(t, err)
	assert.True(t, providers.IsCode(err, providers.Unsafe), "a symlinked spool: %v", err)
	assert.Contains(t, err.Error(), spool, "the error names the directory")

	s.sh(t, fmt.Sprintf("rm %s && mkdir %s && chmod 770 %s", spool, spool, spool))
	_, err = l.Start(ctx(t), s.name(t, "-gw"), spec)
	require.Error(t, err)
	assert.True(t, providers.IsCode(err, providers.Unsafe), "a group-writable spool: %v", err)
	assert.Contains(t, err.Error(), spool)

	s.sh(t, fmt.Sprintf("chmod 700 %s && chmod 777 %s", spool, tmp))
	_, err = l.Start(ctx(t), s.name(t, "-up"), spec)
	assert.True(t, providers.IsCode(err, providers.Unsafe), "a world-writable directory above: %v", err)
	assert.Contains(t, err.Error(), tmp)

	s.sh(t, fmt.Sprintf("chmod 1777 %s", tmp))
	name := s.name(t, "-ok")
	st, err := l.Start(ctx(t), name, spec)
	require.NoError(t, err, "a sticky directory above is fine")
	t.Cleanup(func() { l.Stop(context.Background(), name, dur(0)) })
	assert.Contains(t, []launch.Phase{launch.Running, launch.Starting}, st.Phase)
}

func (s *suite) user(t *testing.T) {
	if s.h.User == "" {
		t.Skip("the harness names no other user")
	}
	l := s.launcher(t, nil)
	uid := strings.TrimSpace(s.sh(t, "id -u "+s.h.User))
	name, _ := s.start(t, l, "", launch.Spec{Argv: sh(`echo "uid $(id -u) home $HOME"; exec sleep 300`), User: s.h.User})
	out := waitLog(t, l, name, "uid ", 20*time.Second)
	assert.Contains(t, out, "uid "+uid+" ")
	if s.h.Options.Facts.TakesSecrets() && !s.h.Options.Facts.PtraceRestricted() {
		_, err := l.Start(ctx(t), s.name(t, "-sec"), launch.Spec{Argv: sh(`exec sleep 300`), User: s.h.User, Input: launch.Input{Secrets: map[string]string{"K": "v"}}})
		assert.True(t, providers.IsCode(err, providers.Refused), "secrets for a non-root program without ptrace_scope >= 1: %v", err)
	}
}

func (s *suite) refusals(t *testing.T) {
	l := s.launcher(t, nil)
	c := ctx(t)
	for _, k := range []string{"API_KEY", "GITHUB_TOKEN", "AWS_SECRET", "DB_PASSWORD", "MY_CREDENTIALS", "LD_PRELOAD", "BASH_ENV", "BOXFS_X"} {
		_, err := l.Start(c, s.name(t, ""), launch.Spec{Argv: []string{"true"}, Env: map[string]string{k: "x"}})
		assert.True(t, providers.IsCode(err, providers.Invalid), "env %s: %v", k, err)
	}
	_, err := l.Start(c, "../x", launch.Spec{Argv: []string{"true"}})
	assert.True(t, providers.IsCode(err, providers.Invalid), "a bad name: %v", err)
	_, err = l.State(c, s.name(t, "-none"))
	assert.True(t, providers.IsCode(err, providers.NotFound), "the state of no launch: %v", err)
	_, err = l.Stop(c, s.name(t, "-none"), nil)
	assert.True(t, providers.IsCode(err, providers.NotFound), "stopping no launch: %v", err)
	if !s.h.Options.Facts.TakesSecrets() {
		_, err = l.Start(c, s.name(t, "-sec"), launch.Spec{Argv: []string{"true"}, Input: launch.Input{Secrets: map[string]string{"K": "v"}}})
		assert.True(t, providers.IsCode(err, providers.Unsupported), "secrets on a box without a real stdin: %v", err)
	}

	// A start the box refuses changes nothing of the launch it names.
	name, _ := s.start(t, l, "-keep", launch.Spec{Argv: sh(`echo kept; exec sleep 300`)})
	wait(t, l, name, 20*time.Second, "running", phase(launch.Running))
	_, err = l.Stop(c, name, dur(0))
	require.NoError(t, err)
	_, err = l.Start(c, name, launch.Spec{Argv: []string{"true"}, User: "no-such-user"})
	assert.True(t, providers.IsCode(err, providers.NotFound), "an unknown user: %v", err)
	_, err = l.Restart(c, name, launch.Input{})
	require.NoError(t, err)
	waitLog(t, l, name, "kept\nkept\n", 20*time.Second)
}
