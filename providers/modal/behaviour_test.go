package modal_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// open makes a provider on srv, with extra options.
func open(t *testing.T, srv *modaltest.Server, extra map[string]string, log *slog.Logger) *modal.Provider {
	t.Helper()
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	opts := map[string]string{"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}
	for k, v := range extra {
		opts[k] = v
	}
	p, err := modal.New(providers.Config{Options: opts, Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func newFake(t *testing.T, opts modaltest.Options) *modaltest.Server {
	t.Helper()
	srv, err := modaltest.New(opts)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestMetadata checks what every call carries, as Modal's clients send it:
// the client's type and versions and the token pair on the control plane,
// the auth token on every call but AuthTokenGet, one idempotency key per
// call, and the router's JWT as a bearer token.
func TestMetadata(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	require.NoError(t, err)
	defer b.Destroy(ctx)
	sawRouter := false
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r.Method, "/modal.task_command_router.") {
			sawRouter = true
			assert.True(t, strings.HasPrefix(strings.Join(r.MD.Get("authorization"), ""), "Bearer "), r.Method)
			assert.Empty(t, r.MD.Get("x-modal-token-secret"), "%s: the token secret went to the router", r.Method)
			continue
		}
		assert.Equal(t, []string{"9"}, r.MD.Get("x-modal-client-type"), r.Method)
		assert.Equal(t, []string{"1.0.0"}, r.MD.Get("x-modal-client-version"), r.Method)
		assert.Equal(t, []string{"modal-go/0.11.1+boxfs"}, r.MD.Get("x-modal-libmodal-version"), r.Method)
		assert.Equal(t, []string{srv.TokenID()}, r.MD.Get("x-modal-token-id"), r.Method)
		assert.Equal(t, []string{"127.0.0.1"}, r.MD.Get("x-modal-host"), r.Method)
		if !strings.HasSuffix(r.Method, "/AuthTokenGet") {
			assert.Len(t, r.MD.Get("x-modal-auth-token"), 1, r.Method)
		}
		if !strings.HasSuffix(r.Method, "/ImageJoinStreaming") && !strings.HasSuffix(r.Method, "/AuthTokenGet") {
			assert.Len(t, r.MD.Get("x-idempotency-key"), 1, r.Method)
		}
	}
	assert.True(t, sawRouter)
}

// TestAuth: wrong credentials are Auth; a short-lived auth token is renewed
// before it expires, so calls keep working.
func TestAuth(t *testing.T) {
	srv := newFake(t, modaltest.Options{AuthTokenTTL: 2 * time.Second})
	bad := open(t, srv, map[string]string{"token_secret": "wrong"}, nil)
	_, err := bad.List(ctxT(t), nil)
	assert.True(t, providers.IsCode(err, providers.Auth), "List with a wrong secret: %v", err)

	p := open(t, srv, nil, nil)
	for range 4 {
		_, err := p.List(ctxT(t), nil)
		require.NoError(t, err)
		time.Sleep(700 * time.Millisecond)
	}
	n := 0
	for _, r := range srv.Requests() {
		if strings.HasSuffix(r.Method, "/AuthTokenGet") && r.Code == 0 {
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 2, "a token of 2 s was not renewed over 2.8 s of calls")
}

// TestRouterJWT: a router that refuses a task's first JWT makes the
// client fetch a new one and go on.
func TestRouterJWT(t *testing.T) {
	srv := newFake(t, modaltest.Options{RouterUnauthenticatedOnce: true})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	require.NoError(t, err)
	defer b.Destroy(ctx)
	n := 0
	for _, r := range srv.Requests() {
		if strings.HasSuffix(r.Method, "/TaskGetCommandRouterAccess") {
			n++
		}
	}
	assert.Equal(t, 2, n, "router access fetched once at first and once after Unauthenticated")
}

// TestCreateRefused: Modal's ResourceExhausted is Refused; a create whose
// every answer was lost is OutcomeUnknown and leaves no sandbox running.
func TestCreateRefused(t *testing.T) {
	srv := newFake(t, modaltest.Options{ExhaustedCreates: 1})
	p := open(t, srv, nil, nil)
	_, err := p.Create(ctxT(t), providers.Spec{Workspace: t.TempDir()})
	assert.True(t, providers.IsCode(err, providers.Refused), "create without capacity: %v", err)

	srv = newFake(t, modaltest.Options{LostCreates: 4})
	p = open(t, srv, nil, nil)
	_, err = p.Create(ctxT(t), providers.Spec{Workspace: t.TempDir(), Labels: map[string]string{"k": "v"}})
	assert.True(t, providers.IsCode(err, providers.OutcomeUnknown), "create with every answer lost: %v", err)
	assert.Empty(t, srv.SandboxIDs(), "the lost create's sandbox was not ended")
}

// TestGPUMissing: a box that asked for a GPU and whose nvidia-smi reports
// none (the fake has none) fails its create and is ended.
func TestGPUMissing(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	p := open(t, srv, nil, nil)
	_, err := p.Create(ctxT(t), providers.Spec{Workspace: t.TempDir(), GPU: "T4"})
	assert.True(t, providers.IsCode(err, providers.Unavailable), "create asking a GPU: %v", err)
	assert.Empty(t, srv.SandboxIDs())
	_, err = p.Create(ctxT(t), providers.Spec{GPU: "A100", Isolation: providers.IsolationMicroVM})
	assert.True(t, providers.IsCode(err, providers.Invalid), "gpu with microvm: %v", err)
}

// TestImageBuild: a registry image is built by Modal, its log followed to
// the end.
func TestImageBuild(t *testing.T) {
	srv := newFake(t, modaltest.Options{BuildLog: []string{"Step 1/1 : FROM alpine:3.20", "Built"}})
	var logs bytes.Buffer
	p := open(t, srv, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := ctxT(t)
	b, err := p.Create(ctx, providers.Spec{Image: "alpine:3.20", Workspace: t.TempDir()})
	require.NoError(t, err)
	defer b.Destroy(ctx)
	assert.Contains(t, logs.String(), "Step 1/1")
}

// TestUnknownImage: an image id Modal does not have, given as the image or
// as a snapshot, is not_found. Modal answers it FailedPrecondition ("Could
// not find image with ID ..."), as the fake does, and no sandbox is made.
func TestUnknownImage(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	for _, spec := range []providers.Spec{{Image: "im-doesnotexist"}, {Snapshot: "im-doesnotexist"}} {
		spec.Workspace = t.TempDir()
		_, err := p.Create(ctx, spec)
		require.Error(t, err)
		assert.Equal(t, providers.NotFound, providers.CodeOf(err), "image %q snapshot %q: %v", spec.Image, spec.Snapshot, err)
		assert.Contains(t, err.Error(), "not_found")
	}
	looked := false
	for _, r := range srv.Requests() {
		if strings.HasSuffix(r.Method, "/ImageFromId") {
			looked = true
			assert.Equal(t, codes.FailedPrecondition, r.Code, "the fake answers an unknown image as Modal does")
		}
	}
	assert.True(t, looked)
	assert.Empty(t, srv.SandboxIDs())
}

// TestRuntime: every box names its runtime to Modal: gvisor for a gVisor
// box, the default, as well as vm for a microVM one; none leaves it to
// Modal's default.
func TestRuntime(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	for iso, want := range map[providers.Isolation]string{
		"": "gvisor", providers.IsolationGVisor: "gvisor", providers.IsolationMicroVM: "vm",
	} {
		b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir(), Isolation: iso})
		require.NoError(t, err, "isolation %q", iso)
		def := srv.Definition(b.ID())
		require.NotNil(t, def)
		assert.Equal(t, want, def.GetRuntime(), "isolation %q", iso)
		require.NoError(t, b.Destroy(ctx))
	}
}

// TestEndpoint: a spec port has a tunnel; another port has none.
func TestEndpoint(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	ctx := ctxT(t)
	for tunnels, want := range map[string]string{"tls": "tls://127.0.0.1:8080", "tcp": "tcp://127.0.0.1:8080"} {
		p := open(t, srv, map[string]string{"tunnels": tunnels}, nil)
		b, err := p.Create(ctx, providers.Spec{Ports: []int{8080}, Workspace: t.TempDir()})
		require.NoError(t, err)
		got, err := b.(providers.Endpointer).Endpoint(ctx, 8080)
		assert.NoError(t, err)
		assert.Equal(t, want, got)
		_, err = b.(providers.Endpointer).Endpoint(ctx, 9090)
		assert.True(t, providers.IsCode(err, providers.NotFound), "a port without a tunnel: %v", err)
		f, err := b.Facts(ctx)
		require.NoError(t, err)
		assert.Equal(t, []int{8080}, f.Ports)
		require.NoError(t, b.Destroy(ctx))
	}
}

// TestAttachFacts: an attached box is measured again, and its security
// facts are unknown rather than read from a tag.
func TestAttachFacts(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir(), Network: providers.Network{Mode: providers.NetworkNone}})
	require.NoError(t, err)
	defer b.Destroy(ctx)
	made, err := b.Facts(ctx)
	require.NoError(t, err)
	assert.Equal(t, providers.NetworkNone, made.Network)
	assert.Equal(t, providers.IsolationGVisor, made.Isolation)
	assert.NotEmpty(t, b.Labels()["boxfs.hw"], "the measured hardware tag")

	again, err := p.Attach(ctx, b.ID())
	require.NoError(t, err)
	f, err := again.Facts(ctx)
	require.NoError(t, err)
	assert.Empty(t, f.Network)
	assert.Nil(t, f.Ports)
	assert.Nil(t, f.PtraceScope)
	assert.Equal(t, made.CPUs, f.CPUs)
	assert.Equal(t, made.Arch, f.Arch)
	assert.Equal(t, made.Workspace, f.Workspace)
	assert.True(t, f.HasStdin() && f.HasLiveProcesses())
}

// TestLifetimeEnd: a box whose Modal timeout passes is ended, with the
// reason said; Exec is then Gone.
func TestLifetimeEnd(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	require.NoError(t, err)
	defer b.Destroy(ctx)
	srv.Expire(b.ID())
	st, err := b.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, providers.StateEnded, st.State)
	assert.Equal(t, "lifetime passed", st.Reason)
	_, err = b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
	assert.True(t, providers.IsCode(err, providers.Gone), "Exec in an ended box: %v", err)
	_, err = p.Attach(ctx, b.ID())
	assert.True(t, providers.IsCode(err, providers.NotFound), "Attach of an ended box: %v", err)
}

// TestArchive: a tree goes in and comes back as tar over exec; a missing
// path is NotFound.
func TestArchive(t *testing.T) {
	srv := newFake(t, modaltest.Options{DropStreamAfter: 10 << 10})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	ws := t.TempDir()
	b, err := p.Create(ctx, providers.Spec{Workspace: ws})
	require.NoError(t, err)
	defer b.Destroy(ctx)
	ar := b.(providers.Archiver)

	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	body := bytes.Repeat([]byte("x"), 100<<10)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o640, Size: int64(len(body))}))
	_, err = tw.Write(body)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, ar.PutArchive(ctx, ws, &in))

	rc, err := ar.GetArchive(ctx, ws+"/d")
	require.NoError(t, err)
	tr := tar.NewReader(rc)
	got := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got[h.Name] = h.Size
	}
	require.NoError(t, rc.Close())
	assert.Equal(t, map[string]int64{"d/": 0, "d/f": int64(len(body))}, got)

	_, err = ar.GetArchive(ctx, ws+"/missing")
	assert.True(t, providers.IsCode(err, providers.NotFound), "GetArchive of a missing path: %v", err)
	err = ar.PutArchive(ctx, ws+"/missing", strings.NewReader(""))
	assert.True(t, providers.IsCode(err, providers.NotFound), "PutArchive into a missing dir: %v", err)
}

// TestJoinedOutput: one writer for stdout and stderr gets them in the
// order the command wrote them (Modal joins stderr to stdout).
func TestJoinedOutput(t *testing.T) {
	srv := newFake(t, modaltest.Options{})
	p := open(t, srv, nil, nil)
	ctx := ctxT(t)
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	require.NoError(t, err)
	defer b.Destroy(ctx)
	var out bytes.Buffer
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", "for i in 1 2 3; do echo out$i; echo err$i >&2; done"}, Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	code, err := pr.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "out1\nerr1\nout2\nerr2\nout3\nerr3\n", out.String())
}
