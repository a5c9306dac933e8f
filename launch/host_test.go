package launch_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
	"github.com/boxfs/boxfs/providers/local"
)

// The host helper is this test binary run again: it makes a box, starts
// a launch in it through hands (as the box manager does) and reports, then
// waits to be killed.
const (
	helperEnv   = "BOXFS_LAUNCH_HOST_HELPER" // the provider: local or docker
	helperRoot  = "BOXFS_LAUNCH_HOST_ROOT"   // the local provider's root
	helperAgent = "BOXFS_LAUNCH_HOST_AGENT"  // the agent binary, "" for none
)

func TestMain(m *testing.M) {
	if p := os.Getenv(helperEnv); p != "" {
		os.Exit(hostHelper(p))
	}
	os.Exit(m.Run())
}

// helperReport is what the host helper prints, one JSON line.
type helperReport struct {
	Box   string
	State launch.State
}

func hostHelper(provider string) int {
	ctx := context.Background()
	var p providers.Provider
	switch provider {
	case "local":
		p = local.New(os.Getenv(helperRoot))
	case "docker":
		dp, err := docker.New(providers.Config{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		p = dp
	}
	b, err := p.Create(ctx, providers.Spec{Lifetime: 30 * time.Minute, Labels: map[string]string{testbox.Label: "launch-host"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("{\"Box\":%q}\n", b.ID())
	h, err := hands.New(ctx, b, hands.Options{AgentBinary: os.Getenv(helperAgent)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := launch.New(b, launch.Options{Facts: h.Facts(), Exec: h.Exec, Agent: h.AgentPath()})
	if err == nil {
		var st launch.State
		st, err = l.Start(ctx, "web", launch.Spec{Argv: []string{"sh", "-c", `echo "run $BOXFS_INCARNATION"; exec sleep 600`}})
		if err == nil {
			out, _ := json.Marshal(helperReport{Box: b.ID(), State: st})
			fmt.Println(string(out))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	time.Sleep(10 * time.Minute) // the test kills us long before
	return 3
}

// TestHostKilled starts a launch from a host process, kills that process
// (-9), and finds the program still running and supervised: a crash of it
// is restarted with no host at all.
func TestHostKilled(t *testing.T) {
	cases := []struct {
		name, provider string
		agent          bool
	}{
		{"provider=local/via=sh", "local", false},
		{"provider=docker/via=sh", "docker", false},
		{"provider=docker/via=agent", "docker", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var attach func(id string) providers.Box
			env := []string{helperEnv + "=" + c.provider}
			switch c.provider {
			case "local":
				root := t.TempDir()
				env = append(env, helperRoot+"="+root)
				attach = func(id string) providers.Box { return attachTo(t, local.New(root), id) }
			case "docker":
				p := testbox.Docker(t)
				attach = func(id string) providers.Box { return attachTo(t, p, id) }
			}
			if c.agent {
				env = append(env, helperAgent+"="+boxfsbin.Path(t))
			}
			hostKilled(t, env, attach, c.agent)
		})
	}
}

func attachTo(t *testing.T, p providers.Provider, id string) providers.Box {
	b, err := p.Attach(context.Background(), id)
	require.NoError(t, err)
	return b
}

func hostKilled(t *testing.T, env []string, attach func(string) providers.Box, agent bool) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	reports := make(chan helperReport)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r helperReport
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				reports <- r
			}
		}
		close(reports)
	}()
	var rep helperReport
	for rep.State.PID == 0 {
		select {
		case r, ok := <-reports:
			require.True(t, ok, "the host helper ended: %s", stderr.String())
			if rep.Box == "" {
				box := attach(r.Box)
				t.Cleanup(func() { box.Destroy(context.Background()) })
			}
			rep = r
		case <-time.After(2 * time.Minute):
			require.FailNow(t, "the host helper did not start its launch", stderr.String())
		}
	}
	if agent {
		assert.Equal(t, launch.ViaAgent, rep.State.Via)
	}
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()

	// A new host finds the program running, and supervised.
	b := attach(rep.Box)
	f, err := b.Facts(context.Background())
	require.NoError(t, err)
	l, err := launch.New(b, launch.Options{Facts: f})
	require.NoError(t, err)
	st, err := l.State(context.Background(), "web")
	require.NoError(t, err)
	assert.Equal(t, launch.Running, st.Phase)
	assert.Equal(t, rep.State.PID, st.PID, "the program the killed host started runs on")
	assert.Equal(t, 1, st.Incarnation)
	run(t, b, fmt.Sprintf("kill -9 %d", st.PID))
	deadline := time.Now().Add(30 * time.Second)
	for st.Incarnation < 2 || st.Phase != launch.Running {
		require.True(t, time.Now().Before(deadline), "not restarted: %+v", st)
		time.Sleep(200 * time.Millisecond)
		st, err = l.State(context.Background(), "web")
		require.NoError(t, err)
	}
	assert.NotEqual(t, rep.State.PID, st.PID)
	lg, err := l.ReadLog(context.Background(), "web", 0, launch.MaxLogRead)
	require.NoError(t, err)
	assert.Contains(t, string(lg.Data), "run 1\n")
	stopped, err := l.Stop(context.Background(), "web", nil)
	require.NoError(t, err)
	assert.Equal(t, launch.Stopped, stopped.Phase)
}

// run runs a command line in the box, which must succeed.
func run(t *testing.T, b providers.Box, line string) string {
	var out bytes.Buffer
	p, err := b.Exec(context.Background(), providers.ExecRequest{Argv: []string{"sh", "-c", line}, Dir: "/", Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	code, err := p.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code, "%s: %s", line, out.String())
	return strings.TrimSpace(out.String())
}
