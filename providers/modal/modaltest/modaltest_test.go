package modaltest_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// raw is a bare client of the fake: the generated stubs and metadata set
// by hand, no provider in between.
type raw struct {
	cp     pb.ModalClientClient
	rt     pb.TaskCommandRouterClient
	srv    *modaltest.Server
	cpMD   metadata.MD
	taskID string
	jwt    string
}

func dialRaw(t *testing.T, opts modaltest.Options) *raw {
	srv, err := modaltest.New(opts)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	conn, err := grpc.NewClient(srv.URL()[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	r := &raw{cp: pb.NewModalClientClient(conn), rt: pb.NewTaskCommandRouterClient(conn), srv: srv}
	r.cpMD = metadata.Pairs("x-modal-client-type", "9", "x-modal-client-version", "1.0.0",
		"x-modal-token-id", srv.TokenID(), "x-modal-token-secret", srv.TokenSecret())
	return r
}

func (r *raw) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return metadata.NewOutgoingContext(ctx, r.cpMD)
}

func (r *raw) router(ctx context.Context) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+r.jwt))
}

// sandbox logs in, makes an app, an image and a sandbox, and gets its
// router access.
func (r *raw) sandbox(t *testing.T) context.Context {
	ctx := r.ctx(t)
	tok, err := r.cp.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
	require.NoError(t, err)
	r.cpMD.Set("x-modal-auth-token", tok.GetToken())
	ctx = r.ctx(t)
	app, err := r.cp.AppGetOrCreate(ctx, &pb.AppGetOrCreateRequest{AppName: "t", ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING})
	require.NoError(t, err)
	img, err := r.cp.ImageGetOrCreate(ctx, &pb.ImageGetOrCreateRequest{AppId: app.GetAppId(), BuilderVersion: "2025.06", Image: &pb.Image{DockerfileCommands: []string{"FROM debian"}}})
	require.NoError(t, err)
	sb, err := r.cp.SandboxCreate(ctx, &pb.SandboxCreateRequest{AppId: app.GetAppId(), Definition: &pb.Sandbox{ImageId: img.GetImageId(), TimeoutSecs: 60}})
	require.NoError(t, err)
	task, err := r.cp.SandboxGetTaskId(ctx, &pb.SandboxGetTaskIdRequest{SandboxId: sb.GetSandboxId()})
	require.NoError(t, err)
	r.taskID = task.GetTaskId()
	acc, err := r.cp.TaskGetCommandRouterAccess(ctx, &pb.TaskGetCommandRouterAccessRequest{TaskId: r.taskID})
	require.NoError(t, err)
	assert.Regexp(t, `^https://127\.0\.0\.1:\d+$`, acc.GetUrl())
	r.jwt = acc.GetJwt()
	return ctx
}

func TestCredentials(t *testing.T) {
	r := dialRaw(t, modaltest.Options{})
	ctx := r.ctx(t)
	_, err := r.cp.AppGetOrCreate(ctx, &pb.AppGetOrCreateRequest{AppName: "t"})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "a call without an auth token")
	bad := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("x-modal-client-type", "9", "x-modal-client-version", "1.0.0", "x-modal-token-id", r.srv.TokenID(), "x-modal-token-secret", "wrong"))
	_, err = r.cp.AuthTokenGet(bad, &pb.AuthTokenGetRequest{})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "AuthTokenGet with a wrong secret")
	ctx = r.sandbox(t)
	_, err = r.rt.TaskExecPoll(ctx, &pb.TaskExecPollRequest{TaskId: r.taskID, ExecId: "x"})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "a router call without the task's JWT")
}

// TestStreamCredentials: a streaming control-plane call is authorized by
// the token pair alone, as Modal's own Go client sends it (its auth token
// goes on unary calls only); an auth token that is sent must be valid.
func TestStreamCredentials(t *testing.T) {
	r := dialRaw(t, modaltest.Options{BuildLog: []string{"step 1"}})
	ctx := r.ctx(t)
	tok, err := r.cp.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
	require.NoError(t, err)
	authed := metadata.AppendToOutgoingContext(ctx, "x-modal-auth-token", tok.GetToken())
	app, err := r.cp.AppGetOrCreate(authed, &pb.AppGetOrCreateRequest{AppName: "t", ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING})
	require.NoError(t, err)
	img, err := r.cp.ImageGetOrCreate(authed, &pb.ImageGetOrCreateRequest{AppId: app.GetAppId(), BuilderVersion: "2025.06", Image: &pb.Image{DockerfileCommands: []string{"FROM debian"}}})
	require.NoError(t, err)
	join := func(ctx context.Context) error {
		st, err := r.cp.ImageJoinStreaming(ctx, &pb.ImageJoinStreamingRequest{ImageId: img.GetImageId(), Timeout: 55})
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	assert.NoError(t, join(ctx), "a stream with the token pair alone")
	assert.NoError(t, join(authed), "a stream with an auth token too")
	bad := metadata.AppendToOutgoingContext(ctx, "x-modal-auth-token", "not-a-token")
	assert.Equal(t, codes.Unauthenticated, status.Code(join(bad)), "a stream with an invalid auth token")
	wrong := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("x-modal-client-type", "9", "x-modal-client-version", "1.0.0", "x-modal-token-id", r.srv.TokenID(), "x-modal-token-secret", "wrong"))
	assert.Equal(t, codes.Unauthenticated, status.Code(join(wrong)), "a stream with a wrong secret")
}

// TestExecOffsets: stdin writes are applied once however often they are
// sent and refused past a gap; output can be read again from any offset
// not yet passed; a wait past the limit is DeadlineExceeded.
func TestExecOffsets(t *testing.T) {
	r := dialRaw(t, modaltest.Options{WaitLimit: 200 * time.Millisecond})
	ctx := r.router(r.sandbox(t))
	exec := &pb.TaskExecStartRequest{TaskId: r.taskID, ExecId: "e1", CommandArgs: []string{"cat"},
		StdoutConfig: pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE, StderrConfig: pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE}
	_, err := r.rt.TaskExecStart(ctx, exec)
	require.NoError(t, err)
	_, err = r.rt.TaskExecStart(ctx, exec)
	require.NoError(t, err, "a retried start")

	_, err = r.rt.TaskExecWait(ctx, &pb.TaskExecWaitRequest{TaskId: r.taskID, ExecId: "e1"})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))

	write := func(off uint64, data string, eof bool) error {
		_, err := r.rt.TaskExecStdinWrite(ctx, &pb.TaskExecStdinWriteRequest{TaskId: r.taskID, ExecId: "e1", Offset: off, Data: []byte(data), Eof: eof})
		return err
	}
	require.NoError(t, write(0, "hello ", false))
	require.NoError(t, write(0, "hello ", false)) // the same write again: applied once
	require.NoError(t, write(3, "lo world", false))
	assert.Equal(t, codes.OutOfRange, status.Code(write(99, "gap", false)))
	require.NoError(t, write(11, "", true))

	read := func(off uint64) string {
		st, err := r.rt.TaskExecStdioRead(ctx, &pb.TaskExecStdioReadRequest{TaskId: r.taskID, ExecId: "e1", Offset: off})
		require.NoError(t, err)
		var got []byte
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return string(got)
			}
			require.NoError(t, err)
			got = append(got, m.GetData()...)
		}
	}
	assert.Equal(t, "hello world", read(0))
	assert.Equal(t, "world", read(6))
	w, err := r.rt.TaskExecWait(ctx, &pb.TaskExecWaitRequest{TaskId: r.taskID, ExecId: "e1"})
	require.NoError(t, err)
	assert.Equal(t, int32(0), w.GetCode())
}

// TestSignalAndTimeout: a command killed by a signal reports the signal;
// one past its timeout_secs is ended with exit 124.
func TestSignalAndTimeout(t *testing.T) {
	r := dialRaw(t, modaltest.Options{})
	ctx := r.router(r.sandbox(t))
	one := uint32(1)
	for id, c := range map[string]struct {
		args    []string
		timeout *uint32
		want    *pb.TaskExecWaitResponse
	}{
		"sig":     {[]string{"sh", "-c", "kill -TERM $$"}, nil, &pb.TaskExecWaitResponse{ExitStatus: &pb.TaskExecWaitResponse_Signal{Signal: 15}}},
		"timeout": {[]string{"sleep", "30"}, &one, &pb.TaskExecWaitResponse{ExitStatus: &pb.TaskExecWaitResponse_Code{Code: 124}}},
	} {
		_, err := r.rt.TaskExecStart(ctx, &pb.TaskExecStartRequest{TaskId: r.taskID, ExecId: id, CommandArgs: c.args, TimeoutSecs: c.timeout})
		require.NoError(t, err)
		w, err := r.rt.TaskExecWait(ctx, &pb.TaskExecWaitRequest{TaskId: r.taskID, ExecId: id})
		require.NoError(t, err, id)
		assert.Equal(t, c.want.GetSignal(), w.GetSignal(), id)
		assert.Equal(t, c.want.GetCode(), w.GetCode(), id)
	}
}
