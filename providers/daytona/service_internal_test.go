package daytona

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest/spec"
)

// The tests here pin behaviours of the real service that a fake written
// from boxfs's own assumptions hid: each runs against the fake as the
// vendor's current spec and daemon describe it.

// TestStderrSeparate: the daemon strips the stream markers from the log
// of a client that does not ask for them, so stdout and stderr come apart
// only when every request (the log's WebSocket dial included) asks.
func TestStderrSeparate(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	var stdout, stderr bytes.Buffer
	pr, err := b.Exec(ctxFor(t, time.Minute), providers.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2"}, Stdout: &stdout, Stderr: &stderr})
	require.NoError(t, err)
	code, err := pr.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "out\n", stdout.String(), "stdout")
	assert.Equal(t, "err\n", stderr.String(), "stderr")
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r.Path, "/toolbox/") {
			assert.Equal(t, "true", r.Header.Get("X-Daytona-Split-Output"), "%s %s", r.Method, r.Path)
		}
	}
}

// TestSDKHeaders: every request, to the control plane and to the toolbox,
// says who calls and which SDK release its requests follow, in the form
// Daytona's SDK sends its own version.
func TestSDKHeaders(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	pr, err := b.Exec(ctxFor(t, time.Minute), providers.ExecRequest{Argv: []string{"true"}})
	require.NoError(t, err)
	_, err = pr.Wait()
	require.NoError(t, err)
	assert.Regexp(t, `^\d+\.\d+\.\d+$`, sdkVersion)
	saw := map[bool]bool{}
	for _, r := range srv.Requests() {
		saw[strings.HasPrefix(r.Path, "/toolbox/")] = true
		assert.Equal(t, "boxfs", r.Header.Get("X-Daytona-Source"), "%s %s", r.Method, r.Path)
		assert.Equal(t, sdkVersion, r.Header.Get("X-Daytona-SDK-Version"), "%s %s", r.Method, r.Path)
	}
	assert.True(t, saw[false] && saw[true], "requests to the control plane and the toolbox")
}

// TestUploads: WriteFile, PutArchive and an Exec with stdin upload through
// files/bulk-upload, which every daemon has (files/upload is gone from
// the current one); a failed upload says what the daemon said.
func TestUploads(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run("old="+strconv.FormatBool(old), func(t *testing.T) {
			srv, p, _ := fake(t, daytonatest.Options{OldDaemon: old})
			b := newBox(t, p, providers.Spec{})
			ctx := ctxFor(t, time.Minute)
			ws := b.workspace
			require.NoError(t, b.WriteFile(ctx, ws+"/f", strings.NewReader("file"), 0o640))
			got, err := os.ReadFile(ws + "/f")
			require.NoError(t, err)
			assert.Equal(t, "file", string(got))
			var out bytes.Buffer
			pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("stdin"), Stdout: &out})
			require.NoError(t, err)
			code, err := pr.Wait()
			require.NoError(t, err)
			assert.Equal(t, 0, code)
			assert.Equal(t, "stdin", out.String())
			rc, err := b.GetArchive(ctx, ws+"/f")
			require.NoError(t, err)
			require.NoError(t, os.Mkdir(ws+"/copy", 0o755))
			require.NoError(t, b.PutArchive(ctx, ws+"/copy", rc))
			rc.Close()
			got, err = os.ReadFile(ws + "/copy/f")
			require.NoError(t, err)
			assert.Equal(t, "file", string(got))
			for _, r := range srv.Requests() {
				assert.NotEqual(t, "upload", r.Path[strings.LastIndex(r.Path, "/")+1:], "%s %s", r.Method, r.Path)
			}

			err = b.upload(ctx, ws+"/f/under-a-file", func() (io.Reader, error) { return strings.NewReader("x"), nil })
			require.Error(t, err, "an upload under a regular file")
			assert.Contains(t, err.Error(), "not a directory", "the daemon's reason")
		})
	}
}

// TestDestroyWhilePending: Daytona refuses to delete a sandbox whose state
// is changing (409); Destroy waits for the change and deletes it then.
func TestDestroyWhilePending(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{StoppingFor: time.Second})
	b := newBox(t, p, providers.Spec{})
	srv.Stop(b.ID())
	require.Equal(t, "stopping", srv.State(b.ID()))
	require.NoError(t, b.Destroy(ctxFor(t, time.Minute)), "Destroy of a stopping box")
	assert.Empty(t, srv.SandboxIDs(), "the box was not deleted")
	assert.Positive(t, refusedDeletes(srv), "no delete was refused: the test did not see a stopping sandbox")
}

// TestDestroyedIsGone: after a delete Daytona still reads the sandbox's
// old state for a while, with desiredState destroyed; Attach, Status and
// another process's List take it as gone.
func TestDestroyedIsGone(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{DeleteLag: time.Minute})
	b := newBox(t, p, providers.Spec{Labels: map[string]string{"gone": "1"}})
	ctx := ctxFor(t, time.Minute)
	require.NoError(t, b.Destroy(ctx))
	require.Equal(t, "started", srv.State(b.ID()), "the fake's sandbox should still read started")
	_, err := p.Attach(ctx, b.ID())
	assert.True(t, providers.IsCode(err, providers.NotFound), "Attach after Destroy: %v, want NotFound", err)
	other, err := New(providers.Config{Options: map[string]string{"api_url": srv.APIURL(), "api_key": srv.APIKey()}})
	require.NoError(t, err)
	listed, err := other.List(ctx, map[string]string{"gone": "1"})
	require.NoError(t, err)
	assert.Empty(t, listed, "another process's List shows the deleted box")
	ob, err := other.newBox(b.dto)
	require.NoError(t, err)
	_, err = ob.Status(ctx)
	assert.True(t, providers.IsCode(err, providers.Gone), "another process's Status: %v, want Gone", err)
}

// TestAttachResumesPaused: a paused sandbox is resumed by Attach.
func TestAttachResumesPaused(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	p.createBound = 2 * time.Second
	id := newBoxRaw(t, srv)
	srv.Pause(id)
	require.Equal(t, "paused", srv.State(id))
	ctx := ctxFor(t, time.Minute)
	b, err := p.Attach(ctx, id)
	require.NoError(t, err, "Attach of a paused sandbox")
	st, err := b.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, providers.StateRunning, st.State)
	require.NoError(t, b.Destroy(ctx))
}

// TestBackgroundOutlivesExec: deleting an Exec's session terminates the
// session's process group, not the command's: what a command leaves
// running goes on, as on any machine.
func TestBackgroundOutlivesExec(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	var out bytes.Buffer
	pr, err := b.Exec(ctxFor(t, time.Minute), providers.ExecRequest{Argv: []string{"sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"}, Stdout: &out})
	require.NoError(t, err)
	_, err = pr.Wait()
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	require.NoError(t, err)
	defer syscall.Kill(pid, syscall.SIGKILL)
	require.Eventually(t, func() bool {
		for _, r := range srv.Requests() {
			if r.Method == http.MethodDelete && strings.Contains(r.Path, "/process/session/") && r.Status == http.StatusNoContent {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the Exec's session was never deleted")
	assert.True(t, daytonatest.Alive(pid), "the background process died with its Exec's session")
}

// TestHostileArgvOldDaemon: the command line survives the older daemon's
// naive split of process/execute as it does the current daemon's shell.
func TestHostileArgvOldDaemon(t *testing.T) {
	_, p, _ := fake(t, daytonatest.Options{OldDaemon: true})
	b := newBox(t, p, providers.Spec{})
	code, out, err := b.run(ctxFor(t, time.Minute), "test", `printf '%s\0' "$@" | base64`, hostileArgs, runOpts{encoded: true, dir: b.workspace})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, strings.Join(hostileArgs, "\x00")+"\x00", string(out))
}

// TestWaitsOutDelete: a sandbox read while its delete is carried out is
// gone to every wait loop: Create's wait does not wait for it to start.
func TestWaitsOutDelete(t *testing.T) {
	_, p, _ := fake(t, daytonatest.Options{DeleteLag: time.Minute})
	b := newBox(t, p, providers.Spec{})
	ctx := ctxFor(t, time.Minute)
	require.NoError(t, b.Destroy(ctx))
	dto, err := p.get(ctx, b.ID())
	require.NoError(t, err)
	_, err = p.waitStarted(ctx, "test", dto)
	assert.True(t, providers.IsCode(err, providers.Gone), "waitStarted of a deleted sandbox: %v, want Gone", err)
	_, err = p.wake(ctx, "test", dto)
	assert.True(t, providers.IsCode(err, providers.Gone), "wake of a deleted sandbox: %v, want Gone", err)
}

// refusedDeletes counts the DELETEs the fake refused (409).
func refusedDeletes(srv *daytonatest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if r.Method == http.MethodDelete && r.Status == http.StatusConflict {
			n++
		}
	}
	return n
}

// TestSpecCheckCatchesRename: the check every test on the fake runs fails
// when the spec no longer has a route the provider calls: here
// files/bulk-upload, renamed in a copy of the spec.
func TestSpecCheckCatchesRename(t *testing.T) {
	srv, p, _ := fake(t, daytonatest.Options{})
	b := newBox(t, p, providers.Spec{})
	require.NoError(t, b.WriteFile(ctxFor(t, time.Minute), b.workspace+"/f", strings.NewReader("x"), 0o644))
	sp, err := spec.Load()
	require.NoError(t, err)
	require.Empty(t, srv.CheckRequests(sp), "the calls against the pinned spec")
	renamed := sp.RenameRoute(spec.Toolbox, http.MethodPost, "/files/bulk-upload", "/files/bulk-upload-v3")
	errs := srv.CheckRequests(renamed)
	require.NotEmpty(t, errs, "the calls against a spec without files/bulk-upload")
	for _, err := range errs {
		assert.ErrorContains(t, err, "/files/bulk-upload: no such route")
	}
}
