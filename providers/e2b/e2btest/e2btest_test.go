package e2btest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers/e2b/e2btest"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/process"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/process/processconnect"
)

// create makes a sandbox through the REST API and returns its id and
// envd token.
func create(t *testing.T, srv *e2btest.Server) (string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.APIURL()+"/v2/sandboxes", bytes.NewReader([]byte(`{"templateID":"base","timeout":60}`)))
	require.NoError(t, err)
	req.Header.Set("X-API-KEY", srv.APIKey())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var sb struct{ SandboxID, EnvdAccessToken string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sb))
	return sb.SandboxID, sb.EnvdAccessToken
}

// TestOutputWithoutListener checks envd's multiplexing: once the only
// stream following a process is gone, its output is dropped and the
// process is not held up writing it.
func TestOutputWithoutListener(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	id, tok := create(t, srv)
	client := processconnect.NewProcessClient(http.DefaultClient, srv.SandboxURL())
	ctx, cancel := context.WithCancel(context.Background())
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{
		Cmd: "/bin/sh", Args: []string{"-c", "read -r _; head -c 50000000 /dev/zero; touch done"},
	}})
	req.Header().Set("X-Access-Token", tok)
	req.Header().Set("E2b-Sandbox-Id", id)
	stream, err := client.Start(ctx, req)
	require.NoError(t, err)
	require.True(t, stream.Receive(), "start event: %v", stream.Err())
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	require.NotZero(t, pid)
	cancel() // the only listener goes
	stream.Close()

	in := connect.NewRequest(&process.SendInputRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
		Input:   &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("go\n")}},
	})
	in.Header().Set("X-Access-Token", tok)
	in.Header().Set("E2b-Sandbox-Id", id)
	_, err = client.SendInput(context.Background(), in)
	require.NoError(t, err)
	home, ok := srv.Dir(id)
	require.True(t, ok)
	assert.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(home, "done"))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the process stayed blocked on output nobody listens to")
}

// TestEnvdAuth checks that envd refuses a request without the sandbox's
// token, and that a sandbox that is not running answers 502 as E2B's
// proxy does.
func TestEnvdAuth(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	id, _ := create(t, srv)
	client := processconnect.NewProcessClient(http.DefaultClient, srv.SandboxURL())
	req := connect.NewRequest(&process.ListRequest{})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("X-Access-Token", "wrong")
	_, err := client.List(context.Background(), req)
	assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
	srv.KillSandbox(id)
	_, err = client.List(context.Background(), req)
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
}

// TestListStates checks the listing's state filter: comma-separated
// states as the SDK sends them, running and paused when none is given, so
// a paused sandbox is left out only when running alone is asked for.
func TestListStates(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	running, _ := create(t, srv)
	paused, _ := create(t, srv)
	call := func(method, path string) *http.Response {
		req, err := http.NewRequest(method, srv.APIURL()+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-API-KEY", srv.APIKey())
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	require.Equal(t, http.StatusNoContent, call(http.MethodPost, "/sandboxes/"+paused+"/pause").StatusCode)
	for query, want := range map[string][]string{
		"state=running":              {running},
		"state=paused":               {paused},
		"state=running%2Cpaused":     {running, paused},
		"state=running&state=paused": {running, paused},
		"":                           {running, paused},
	} {
		resp := call(http.MethodGet, "/v2/sandboxes?"+query)
		require.Equal(t, http.StatusOK, resp.StatusCode, query)
		var page []struct{ SandboxID, State string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		var ids []string
		for _, sb := range page {
			ids = append(ids, sb.SandboxID)
		}
		assert.ElementsMatch(t, want, ids, "query %q", query)
	}
}
