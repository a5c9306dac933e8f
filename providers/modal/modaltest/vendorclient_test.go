package modaltest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// vendorStep is one line of the vendorcheck program's output.
type vendorStep struct {
	Step string         `json:"step"`
	OK   bool           `json:"ok"`
	Err  string         `json:"err"`
	Data map[string]any `json:"data"`
}

// vendorCheck builds ../vendorcheck, a program of its own module that
// drives Modal's own Go client (it cannot link into boxfs's test binary:
// both register Modal's protos). The module comes from the Go module
// proxy; when it cannot be fetched the test skips, or fails under
// BOXFS_REQUIRE_NPM=1 (CI), as the npm-based vendor checks do.
func vendorCheck(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir, err := filepath.Abs("../vendorcheck")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false")
	dl := exec.CommandContext(ctx, goTool, "mod", "download")
	dl.Dir, dl.Env = dir, env
	if out, err := dl.CombinedOutput(); err != nil {
		testbox.NPMUnavailable(t, "go mod download of Modal's Go client failed (no module proxy here?): %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "vendorcheck")
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".")
	build.Dir, build.Env = dir, env
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ../vendorcheck:\n%s", out)
	return bin
}

// runVendorCheck runs the program against srv and returns its steps by
// name, in the order they ran.
func runVendorCheck(t *testing.T, bin string, srv *modaltest.Server, run string) (map[string]vendorStep, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-run", run)
	cmd.Env = append(os.Environ(),
		"MODAL_SERVER_URL="+srv.URL(),
		"MODAL_TOKEN_ID="+srv.TokenID(),
		"MODAL_TOKEN_SECRET="+srv.TokenSecret(),
		"MODAL_CONFIG_PATH="+filepath.Join(t.TempDir(), "none.toml"),
		"MODAL_PROFILE=", "MODAL_ENVIRONMENT=", "MODAL_MAX_THROTTLE_WAIT=",
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "vendorcheck: %s", stderr.String())
	steps, order := map[string]vendorStep{}, []string(nil)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var s vendorStep
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), "line %q", sc.Text())
		steps[s.Step] = s
		order = append(order, s.Step)
	}
	t.Logf("vendorcheck -run %s:\n%s%s", run, out, stderr.String())
	return steps, order
}

// TestVendorClient runs Modal's own Go client (modal-go, at the release
// boxfs's wire format follows) against the fake, through every call
// boxfs's provider makes: each step answers as the vendor's client expects,
// and every method of boxfs's protocol subset that boxfs calls was called
// by the vendor's client and answered without error at least once.
func TestVendorClient(t *testing.T) {
	bin := vendorCheck(t)

	t.Run("calls", func(t *testing.T) {
		srv, err := modaltest.New(modaltest.Options{TaskIDPolls: 1, BuildLog: []string{"building alpine:3.20"}})
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		steps, order := runVendorCheck(t, bin, srv, "all")

		want := []string{"client", "app", "image_build", "image_from_id", "secret_from_map", "create",
			"tags_set", "tags_get", "poll_running", "exec", "exec_env", "file_write", "file_read", "tunnels",
			"list", "from_id_exec", "snapshot", "create_from_snapshot", "snapshot_file_read",
			"terminate_snapshot_box", "terminate", "poll_ended"}
		assert.Equal(t, want, order, "the steps that ran")
		for _, name := range want {
			assert.True(t, steps[name].OK, "step %s: %s", name, steps[name].Err)
		}
		assert.Equal(t, "0.11.1", steps["client"].Data["version"], "the client is the release boxfs's headers name")
		id, _ := steps["create"].Data["sandbox_id"].(string)
		assert.NotNil(t, srv.Definition(id), "the sandbox the client made")
		assert.Equal(t, map[string]any{"boxfs": "vendorcheck", "box": id}, steps["tags_get"].Data["tags"])
		assert.Nil(t, steps["poll_running"].Data["exit_code"], "a running sandbox has no exit code")
		assert.Equal(t, map[string]any{"stdout": "hello from stdin\n", "stderr": "to-stderr\n", "exit_code": 3.0}, steps["exec"].Data)
		assert.Equal(t, "s3cret/e1", steps["exec_env"].Data["stdout"], "the sandbox's secret and the exec's env")
		assert.Equal(t, "file body\n", steps["file_read"].Data["stdout"])
		assert.Equal(t, map[string]any{"8080": map[string]any{"host": "127.0.0.1", "port": 8080.0, "err": ""}}, steps["tunnels"].Data)
		assert.Equal(t, []any{id}, steps["list"].Data["sandbox_ids"], "listed by its tag")
		assert.Equal(t, "file body\n", steps["from_id_exec"].Data["stdout"], "a sandbox found by its id runs commands")
		assert.NotEmpty(t, steps["snapshot"].Data["image_id"])
		assert.Equal(t, "file body\n", steps["snapshot_file_read"].Data["stdout"], "a sandbox made from the snapshot has its files")
		assert.Equal(t, 137.0, steps["terminate"].Data["exit_code"], "a terminated sandbox's exit code, as the client reads TERMINATED")
		assert.Equal(t, 137.0, steps["poll_ended"].Data["exit_code"])

		// Every method boxfs calls was made by the vendor's client and
		// answered OK at least once.
		answered := map[string]bool{}
		for _, r := range srv.Requests() {
			if r.Code == codes.OK {
				answered[r.Method] = true
			}
		}
		notCalledByBoxfs := map[string]string{
			"/modal.task_command_router.TaskCommandRouter/TaskExecPoll": "boxfs waits on an exec (TaskExecWait), never polls it",
		}
		for _, fd := range []protoreflect.FileDescriptor{pb.File_modal_proto_api_proto, pb.File_modal_proto_task_command_router_proto} {
			svcs := fd.Services()
			for i := 0; i < svcs.Len(); i++ {
				ms := svcs.Get(i).Methods()
				for j := 0; j < ms.Len(); j++ {
					m := "/" + string(svcs.Get(i).FullName()) + "/" + string(ms.Get(j).Name())
					if why, ok := notCalledByBoxfs[m]; ok {
						t.Logf("not checked: %s: %s", m, why)
						continue
					}
					assert.True(t, answered[m], "the vendor's client never had %s answered OK", m)
				}
			}
		}
	})

	// The fake throttles as Modal does: the vendor's client reads the
	// delay from where the fake puts it, waits it out and succeeds.
	t.Run("throttle", func(t *testing.T) {
		const delay = 200 * time.Millisecond
		srv, err := modaltest.New(modaltest.Options{ThrottledCalls: 2, ThrottleDelay: delay})
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		steps, _ := runVendorCheck(t, bin, srv, "throttle")
		s := steps["throttled_app"]
		require.True(t, s.OK, "a throttled call: %s", s.Err)
		assert.NotEmpty(t, s.Data["app_id"])
		assert.GreaterOrEqual(t, s.Data["elapsed_ms"], float64(2*delay/time.Millisecond), "the client waited twice as asked")
		var attempts []string
		for _, r := range srv.Requests() {
			if r.Method == "/modal.client.ModalClient/AppGetOrCreate" {
				attempts = append(attempts, r.Code.String()+" "+first(r.MD.Get("x-throttle-retry-attempt")))
			}
		}
		assert.Equal(t, []string{"ResourceExhausted 0", "ResourceExhausted 1", "OK 2"}, attempts)
	})
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
