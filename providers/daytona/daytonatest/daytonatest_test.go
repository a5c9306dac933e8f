package daytonatest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest/spec"
)

// TestParseCommand pins the older daemon's split: spaces separate, ' and "
// group (the other quote is kept), no escapes, empty words vanish, bytes
// that are not UTF-8 become U+FFFD.
func TestParseCommand(t *testing.T) {
	for in, want := range map[string][]string{
		`a b`:             {"a", "b"},
		`a   b `:          {"a", "b"},
		`'b c' "d e"`:     {"b c", "d e"},
		`'it"s'`:          {`it"s`},
		`"it's"`:          {"it's"},
		`a\ b`:            {`a\`, "b"},
		`x'y z'w`:         {"xy zw"},
		`'' ""`:           nil,
		"tab\there":       {"tab\there"},
		"\xff":            {"\ufffd"},
		`sh -c 'echo $0'`: {"sh", "-c", "echo $0"},
	} {
		assert.Equal(t, want, daytonatest.ParseCommand(in), "ParseCommand(%q)", in)
	}
}

// client calls a fake's API with its key.
type client struct {
	t   *testing.T
	srv *daytonatest.Server
}

// call sends a request and decodes a JSON answer into a map (nil when the
// answer is not an object).
func (c client) call(method, path, body string, h ...string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.srv.URL()+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.srv.APIKey())
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// started makes a sandbox and returns its id once it is started.
func (c client) started(body string) string {
	c.t.Helper()
	st, sb := c.call("POST", "/api/sandbox", body)
	require.Equal(c.t, http.StatusOK, st, "create: %v", sb)
	id, _ := sb["id"].(string)
	require.Eventually(c.t, func() bool {
		_, got := c.call("GET", "/api/sandbox/"+id, "")
		return got["state"] == "started"
	}, 10*time.Second, 10*time.Millisecond)
	return id
}

// TestAuthAndRecord: a request without the key is 401 and recorded; the
// key is found where it is.
func TestAuthAndRecord(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{})
	defer srv.Close()
	resp, err := http.Get(srv.APIURL() + "/sandbox")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req, _ := http.NewRequest(http.MethodPost, srv.APIURL()+"/sandbox?x="+srv.APIKey(), bytes.NewReader([]byte(`{"name":"`+srv.APIKey()+`"}`)))
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	req.Header.Set("X-Other", srv.APIKey())
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Len(t, srv.Leaks(srv.APIKey()), 3, "query, header, body: %v", srv.Leaks(srv.APIKey()))
	got := srv.Requests()
	require.Len(t, got, 2)
	assert.Equal(t, []int{401, 200}, []int{got[0].Status, got[1].Status})
	assert.Contains(t, string(got[1].Response), `"state":"started"`, "the answer is recorded")
}

// TestCreatingPolls: a new sandbox is creating for the configured number
// of reads, then started; a second one of the same name is 409.
func TestCreatingPolls(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{CreatingPolls: 2})
	defer srv.Close()
	c := client{t, srv}
	_, sb := c.call("POST", "/api/sandbox", `{"name":"n"}`)
	id, _ := sb["id"].(string)
	states := []any{sb["state"]}
	for range 3 {
		_, got := c.call("GET", "/api/sandbox/"+id, "")
		states = append(states, got["state"])
	}
	assert.Equal(t, []any{"creating", "creating", "creating", "started"}, states)
	st, _ := c.call("POST", "/api/sandbox", `{"name":"n"}`)
	assert.Equal(t, http.StatusConflict, st, "a second sandbox named n")
}

// TestDeleteWhilePending: DELETE of a sandbox whose state is changing is
// 409; an accepted DELETE leaves the state for the lag, desiredState
// destroyed and the toolbox answering, then reads answer 404.
func TestDeleteWhilePending(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{CreatingPolls: 1, DeleteLag: 300 * time.Millisecond, StoppingFor: time.Hour})
	defer srv.Close()
	c := client{t, srv}
	_, sb := c.call("POST", "/api/sandbox", `{"name":"p"}`)
	id, _ := sb["id"].(string)
	st, body := c.call("DELETE", "/api/sandbox/"+id, "")
	assert.Equal(t, http.StatusConflict, st, "DELETE while creating")
	assert.Equal(t, "Sandbox state change in progress", body["message"])
	for range 2 { // the last creating read, then the one that sees it started
		c.call("GET", "/api/sandbox/"+id, "")
	}
	st, body = c.call("DELETE", "/api/sandbox/"+id, "")
	require.Equal(t, http.StatusOK, st, "DELETE of a started sandbox: %v", body)
	assert.Equal(t, []any{"started", "destroyed"}, []any{body["state"], body["desiredState"]})
	st, body = c.call("GET", "/api/sandbox/"+id, "")
	assert.Equal(t, http.StatusOK, st, "a read right after the DELETE")
	assert.Equal(t, []any{"started", "destroyed"}, []any{body["state"], body["desiredState"]})
	st, _ = c.call("GET", "/toolbox/"+id+"/version", "")
	assert.Equal(t, http.StatusOK, st, "the toolbox right after the DELETE")
	st, _ = c.call("DELETE", "/api/sandbox/"+id, "")
	assert.Equal(t, http.StatusConflict, st, "a second DELETE while the first is carried out")
	assert.Eventually(t, func() bool { st, _ := c.call("GET", "/api/sandbox/"+id, ""); return st == http.StatusNotFound },
		5*time.Second, 10*time.Millisecond, "the deleted sandbox is never gone")

	id = c.started(`{"name":"s"}`)
	srv.Stop(id)
	assert.Equal(t, "stopping", srv.State(id))
	st, _ = c.call("DELETE", "/api/sandbox/"+id, "")
	assert.Equal(t, http.StatusConflict, st, "DELETE while stopping")
}

// TestFastFailure: a sandbox that fails before the create answers makes
// it 400 "Sandbox failed to start: <reason>", and stays, in its error
// state, until it is deleted.
func TestFastFailure(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{FailState: "error", ErrorReason: "no capacity"})
	defer srv.Close()
	c := client{t, srv}
	st, body := c.call("POST", "/api/sandbox", `{"name":"f"}`)
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Equal(t, "Sandbox failed to start: no capacity", body["message"])
	st, body = c.call("GET", "/api/sandbox/f", "")
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, []any{"error", "no capacity"}, []any{body["state"], body["errorReason"]})
	st, _ = c.call("DELETE", "/api/sandbox/f", "")
	assert.Equal(t, http.StatusOK, st, "DELETE of a failed sandbox")
}

// TestPauseResume: start resumes a paused sandbox.
func TestPauseResume(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{})
	defer srv.Close()
	c := client{t, srv}
	id := c.started(`{"name":"z"}`)
	srv.Pause(id)
	st, _ := c.call("GET", "/toolbox/"+id+"/version", "")
	assert.Equal(t, http.StatusBadRequest, st, "the toolbox of a paused sandbox")
	st, body := c.call("POST", "/api/sandbox/"+id+"/start", "")
	assert.Equal(t, http.StatusOK, st)
	assert.Equal(t, "started", body["state"])
}

// TestExecuteRunsShell: process/execute runs the command through sh (the
// older daemon: split on spaces, no shell), with cwd and envs.
func TestExecuteRunsShell(t *testing.T) {
	for _, old := range []bool{false, true} {
		srv := daytonatest.New(daytonatest.Options{OldDaemon: old})
		defer srv.Close()
		c := client{t, srv}
		id := c.started(`{"name":"x"}`)
		dir := t.TempDir()
		body, _ := json.Marshal(map[string]any{"command": `echo "$V" | tr a b; pwd`, "cwd": dir, "envs": map[string]string{"V": "aaa"}, "timeout": 10})
		st, out := c.call("POST", "/toolbox/"+id+"/process/execute", string(body))
		require.Equal(t, http.StatusOK, st, "old=%v: %v", old, out)
		want := map[string]any{"exitCode": float64(0), "result": "bbb\n" + dir + "\n"}
		if old {
			want = map[string]any{"exitCode": float64(0), "result": "$V | tr a b; pwd\n"} // echo, the rest its words
		}
		assert.Equal(t, want, out, "old=%v", old)
		st, out = c.call("POST", "/toolbox/"+id+"/process/execute", `{"command":"sleep 5","timeout":1}`)
		assert.Equal(t, http.StatusRequestTimeout, st, "old=%v: past the timeout: %v", old, out)
	}
}

// TestSessionLog: a session command's log labels each line of each stream
// (a last line without a newline gets one), arrives in binary frames of at
// most 1 KiB, and keeps its markers only for a client that asks for them.
func TestSessionLog(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{})
	defer srv.Close()
	c := client{t, srv}
	id := c.started(`{"name":"l"}`)
	st, _ := c.call("POST", "/toolbox/"+id+"/process/session", `{"sessionId":"s"}`)
	require.Equal(t, http.StatusCreated, st)
	long := strings.Repeat("y", 3000)
	cmd, _ := json.Marshal(map[string]any{"command": "echo out; sleep 0.2; echo err >&2; sleep 0.2; echo " + long + "; printf last", "runAsync": true})
	st, body := c.call("POST", "/toolbox/"+id+"/process/session/s/exec", string(cmd))
	require.Equal(t, http.StatusAccepted, st)
	cid, _ := body["cmdId"].(string)
	want := "\x01\x01\x01out\n\x02\x02\x02err\n\x01\x01\x01" + long + "\n\x01\x01\x01last\n"
	for _, h := range [][]string{{"X-Daytona-Split-Output", "true"}, {"X-Daytona-SDK-Version", "0.218.0"}, {"X-Daytona-SDK-Version", "0.26.1"}, nil} {
		split := len(h) > 0 && h[1] != "0.26.1"
		frames, log := follow(t, srv, "/toolbox/"+id+"/process/session/s/command/"+cid+"/logs?follow=true", h...)
		if split {
			assert.Equal(t, want, log, "headers %v", h)
		} else {
			assert.Equal(t, strings.NewReplacer("\x01\x01\x01", "", "\x02\x02\x02", "").Replace(want), log, "headers %v", h)
		}
		for _, f := range frames {
			assert.LessOrEqual(t, f, 1024, "a frame of %d bytes", f)
		}
	}
	_, body = c.call("GET", "/toolbox/"+id+"/process/session/s/command/"+cid, "")
	assert.Equal(t, float64(0), body["exitCode"])
}

// follow reads a log over the WebSocket until the fake closes it.
func follow(t *testing.T, srv *daytonatest.Server, path string, h ...string) (frames []int, log string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hdr := http.Header{"Authorization": {"Bearer " + srv.APIKey()}}
	for i := 0; i+1 < len(h); i += 2 {
		hdr.Set(h[i], h[i+1])
	}
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL(), "http")+path, &websocket.DialOptions{HTTPHeader: hdr})
	require.NoError(t, err)
	defer conn.CloseNow()
	var b strings.Builder
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err), "the stream ended with %v", err)
			return frames, b.String()
		}
		assert.Equal(t, websocket.MessageBinary, typ)
		frames = append(frames, len(msg))
		b.Write(msg)
	}
}

// TestSessionDeleteKillsGroup: deleting a session terminates what runs in
// its shell's process group.
func TestSessionDeleteKillsGroup(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{})
	defer srv.Close()
	c := client{t, srv}
	id := c.started(`{"name":"k"}`)
	c.call("POST", "/toolbox/"+id+"/process/session", `{"sessionId":"s"}`)
	pidFile := t.TempDir() + "/pid"
	cmd, _ := json.Marshal(map[string]any{"command": "sleep 60 & echo $! >" + pidFile + "; wait", "runAsync": true})
	st, _ := c.call("POST", "/toolbox/"+id+"/process/session/s/exec", string(cmd))
	require.Equal(t, http.StatusAccepted, st)
	var pid int
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	}, 5*time.Second, 10*time.Millisecond)
	st, _ = c.call("DELETE", "/toolbox/"+id+"/process/session/s", "")
	assert.Equal(t, http.StatusNoContent, st)
	assert.Eventually(t, func() bool { return !daytonatest.Alive(pid) }, 5*time.Second, 10*time.Millisecond, "pid %d outlived its session", pid)
}

// TestRoutesFollowSpec: what the fake serves, current daemon or old, is
// in the vendor's spec; a copy of the spec with a served route renamed
// makes the check fail, as it would for a route the vendor dropped.
func TestRoutesFollowSpec(t *testing.T) {
	sp, err := spec.Load()
	require.NoError(t, err)
	for _, old := range []bool{false, true} {
		srv := daytonatest.New(daytonatest.Options{OldDaemon: old})
		assert.Empty(t, srv.CheckRoutes(sp), "old=%v", old)
		routes := srv.Routes()
		srv.Close()
		assert.Equal(t, old, slices.Contains(routes, daytonatest.Route{Plane: "toolbox-old", Method: "POST", Path: "/files/upload"}), "old=%v: files/upload", old)
	}
	srv := daytonatest.New(daytonatest.Options{})
	defer srv.Close()
	renamed := sp.RenameRoute(spec.Toolbox, "POST", "/files/bulk-upload", "/files/bulk-upload-v2")
	errs := srv.CheckRoutes(renamed)
	require.Len(t, errs, 1)
	assert.ErrorContains(t, errors.Join(errs...), "POST /files/bulk-upload")
}

// TestAnswersFollowSpec: the fake's answers to calls of every kind have
// only the spec's fields and enum values.
func TestAnswersFollowSpec(t *testing.T) {
	sp, err := spec.Load()
	require.NoError(t, err)
	srv := daytonatest.New(daytonatest.Options{})
	defer srv.Close()
	c := client{t, srv}
	id := c.started(`{"name":"a","labels":{"k":"v"}}`)
	c.call("GET", "/api/sandbox?labels="+`%7B%22k%22%3A%22v%22%7D`, "")
	c.call("POST", "/api/sandbox/"+id+"/autostop/5", "")
	c.call("GET", "/api/sandbox/"+id+"/toolbox-proxy-url", "")
	c.call("POST", "/toolbox/"+id+"/process/execute", `{"command":"true"}`)
	c.call("POST", "/toolbox/"+id+"/process/session", `{"sessionId":"s"}`)
	_, body := c.call("POST", "/toolbox/"+id+"/process/session/s/exec", `{"command":"echo hi"}`)
	c.call("GET", "/toolbox/"+id+"/process/session/s", "")
	c.call("GET", "/toolbox/"+id+"/process/session/s/command/"+body["cmdId"].(string)+"/logs", "")
	c.call("GET", "/toolbox/"+id+"/files/info?path=/", "")
	c.call("GET", "/toolbox/"+id+"/files?path=/", "")
	c.call("DELETE", "/api/sandbox/"+id, "")
	errs := srv.CheckRequests(sp)
	assert.Empty(t, errs)
	n := 0
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r.ContentType, "application/json") && r.Status/100 == 2 {
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 11, "answers checked")
}
