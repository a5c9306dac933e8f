package modal

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
	"github.com/boxfs/boxfs/providers/modal/internal/sdkwire"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

func TestCheckSpec(t *testing.T) {
	p := &Provider{tunnels: "tls"}
	tests := []struct {
		name string
		spec providers.Spec
		code providers.Code
		want func(t *testing.T, pl plan)
	}{
		{"defaults", providers.Spec{}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, uint32(2*3600), pl.lifetimeSecs)
			assert.Equal(t, DefaultWorkspace, pl.workspace)
			assert.Equal(t, "gvisor", pl.runtime)
			assert.Equal(t, pb.NetworkAccess_OPEN, pl.network.GetNetworkAccessType())
		}},
		{"lifetime rounds up", providers.Spec{Lifetime: 1500 * time.Millisecond}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, uint32(2), pl.lifetimeSecs)
		}},
		{"lifetime 24h", providers.Spec{Lifetime: 24 * time.Hour}, 0, nil},
		{"lifetime over 24h", providers.Spec{Lifetime: 24*time.Hour + time.Second}, providers.Unsupported, nil},
		{"microvm", providers.Spec{Isolation: providers.IsolationMicroVM}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, "vm", pl.runtime)
		}},
		{"gvisor", providers.Spec{Isolation: providers.IsolationGVisor}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, "gvisor", pl.runtime)
		}},
		{"container", providers.Spec{Isolation: providers.IsolationContainer}, providers.Unsupported, nil},
		{"cpus too small", providers.Spec{CPUs: 0.0004}, providers.Invalid, nil},
		{"gpu any", providers.Spec{GPU: "any"}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, "T4", pl.gpu.GetGpuType())
			assert.Equal(t, uint32(1), pl.gpu.GetCount())
		}},
		{"gpu count", providers.Spec{GPU: "h100:2"}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, "H100", pl.gpu.GetGpuType())
			assert.Equal(t, uint32(2), pl.gpu.GetCount())
		}},
		{"gpu bad count", providers.Spec{GPU: "T4:0"}, providers.Invalid, nil},
		{"gpu with vm", providers.Spec{GPU: "T4", Isolation: providers.IsolationMicroVM}, providers.Invalid, nil},
		{"network none", providers.Spec{Network: providers.Network{Mode: providers.NetworkNone}}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, pb.NetworkAccess_BLOCKED, pl.network.GetNetworkAccessType())
		}},
		{"allowlist", providers.Spec{Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"10.1.2.3/8", "192.0.2.1", "PyPI.org", "*.github.com"}}}, 0, func(t *testing.T, pl plan) {
			assert.Equal(t, pb.NetworkAccess_ALLOWLIST, pl.network.GetNetworkAccessType())
			assert.Equal(t, []string{"10.0.0.0/8", "192.0.2.1/32"}, pl.network.GetAllowedCidrs())
			assert.Equal(t, []string{"pypi.org", "*.github.com"}, pl.network.GetAllowedDomains())
		}},
		{"allowlist junk", providers.Spec{Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"not a host"}}}, providers.Invalid, nil},
		{"ports", providers.Spec{Ports: []int{80, 443}}, 0, func(t *testing.T, pl plan) {
			require.Len(t, pl.ports, 2)
			assert.False(t, pl.ports[0].GetUnencrypted())
		}},
		{"mounts", providers.Spec{Mounts: []providers.Mount{{Source: "/a", Target: "/b"}}}, providers.Unsupported, nil},
		{"user", providers.Spec{User: "1:1"}, providers.Unsupported, nil},
		{"capabilities", providers.Spec{Capabilities: providers.Capabilities{Drop: []string{"ALL"}}}, providers.Unsupported, nil},
		{"snapshot", providers.Spec{Snapshot: "im-1"}, 0, nil},
		{"snapshot not an image", providers.Spec{Snapshot: "s"}, providers.NotFound, nil},
		{"snapshot and image", providers.Spec{Snapshot: "im-1", Image: "debian"}, providers.Invalid, nil},
		{"reserved label", providers.Spec{Labels: map[string]string{"boxfs.x": "1"}}, providers.Invalid, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl, err := p.check("test", tt.spec)
			assert.Equal(t, tt.code, providers.CodeOf(err), "%v", err)
			if err == nil && tt.want != nil {
				tt.want(t, pl)
			}
		})
	}
}

// TestHardwareTag: what a box measured survives its hardware tag.
func TestHardwareTag(t *testing.T) {
	f := providers.Facts{CPUs: 1.5, MemoryMB: 4096, GPU: "NVIDIA A100-SXM4-40GB", Arch: "arm64", FUSE: providers.Bool(true)}
	var h providers.Facts
	decodeHardware(encodeHardware(f), &h)
	assert.Equal(t, f.CPUs, h.CPUs)
	assert.Equal(t, f.MemoryMB, h.MemoryMB)
	assert.Equal(t, f.GPU, h.GPU)
	assert.Equal(t, f.Arch, h.Arch)
	assert.Equal(t, f.FUSE, h.FUSE)
}

func TestErrorCode(t *testing.T) {
	for c, want := range map[codes.Code]providers.Code{
		codes.NotFound: providers.NotFound, codes.AlreadyExists: providers.Exists, codes.InvalidArgument: providers.Invalid,
		codes.FailedPrecondition: providers.Refused, codes.ResourceExhausted: providers.Refused,
		codes.PermissionDenied: providers.Permission, codes.Unauthenticated: providers.Auth,
		codes.Unavailable: providers.Unavailable, codes.DeadlineExceeded: providers.Timeout,
		codes.Canceled: providers.Aborted, codes.Unimplemented: providers.Unsupported, codes.Internal: providers.Unknown,
	} {
		assert.Equal(t, want, errorCode(status.Error(c, "x")), c.String())
	}
	assert.Equal(t, providers.NotFound, errorCode(status.Error(codes.FailedPrecondition, "Could not find image with ID im-1")), "an unknown image")
	assert.Equal(t, providers.Refused, errorCode(status.Error(codes.FailedPrecondition, "sandbox sb-1 has finished")), "another precondition")
	assert.Equal(t, providers.Aborted, errorCode(context.Canceled))
	assert.Equal(t, providers.Gone, errorCode(providers.Errorf(providers.Gone, "op", "x")))
	throttled, err := status.New(codes.ResourceExhausted, "x").WithDetails(&pb.RPCRetryPolicy{RetryAfterSecs: 1.5})
	require.NoError(t, err)
	assert.Equal(t, providers.Unavailable, errorCode(throttled.Err()), "ResourceExhausted with a delay to wait")
	// google.rpc.RetryInfo is not Modal's signal: its clients ignore it.
	other, err := status.New(codes.ResourceExhausted, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	require.NoError(t, err)
	assert.Equal(t, providers.Refused, errorCode(other.Err()), "ResourceExhausted with a google.rpc.RetryInfo")
	assert.True(t, retryable(status.Error(codes.Unavailable, "")))
	assert.False(t, retryable(status.Error(codes.NotFound, "")))
}

// TestClientVersion: the libmodal release boxfs says it follows is the
// one its wire subset is checked against, and it claims the protocol level
// every libmodal client claims.
func TestClientVersion(t *testing.T) {
	_, checked, ok := strings.Cut(sdkwire.Package, "@")
	require.True(t, ok, sdkwire.Package)
	assert.Equal(t, "modal-go/"+checked+"+boxfs", libmodalVersion)
	assert.Equal(t, "1.0.0", clientVersion)
	assert.Equal(t, "9", clientType, "CLIENT_TYPE_LIBMODAL_GO")
}

func TestJWTExpiry(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	exp, ok := jwtExpiry(enc([]byte(`{}`)) + "." + enc([]byte(`{"exp":1900000000}`)) + ".sig")
	assert.True(t, ok)
	assert.Equal(t, time.Unix(1900000000, 0), exp)
	for _, bad := range []string{"", "a.b", "a.!!.c", enc([]byte("{}")) + "." + enc([]byte(`{"sub":"x"}`)) + ".s"} {
		_, ok := jwtExpiry(bad)
		assert.False(t, ok, bad)
	}
}

func TestServerTarget(t *testing.T) {
	for raw, want := range map[string]string{
		"https://api.modal.com:443": "api.modal.com:443", "https://api.modal.com": "api.modal.com:443",
		"http://127.0.0.1:9000": "127.0.0.1:9000", "http://localhost:1": "localhost:1",
	} {
		got, _, err := serverTarget("t", raw)
		assert.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
	}
	for _, raw := range []string{"http://api.modal.com", "ftp://x", "not a url", "http://10.0.0.1:80"} {
		_, _, err := serverTarget("t", raw)
		assert.True(t, providers.IsCode(err, providers.Invalid), "%s: %v", raw, err)
	}
}

// TestProfile: options win over the environment, which wins over the
// profile file; the active profile is taken unless one is named.
func TestProfile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "modal.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
[default]
token_id = "ak-default"
token_secret = "as-default"

[work]
token_id = "ak-work"
token_secret = "as-work"
environment = "dev"
server_url = "https://modal.example:8443"
active = true
`), 0o600))
	t.Setenv("MODAL_CONFIG_PATH", cfg)
	for _, k := range []string{"MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE", "MODAL_SERVER_URL", "MODAL_ENVIRONMENT", "MODAL_IMAGE_BUILDER_VERSION", "MODAL_MAX_THROTTLE_WAIT"} {
		t.Setenv(k, "")
	}
	p, err := resolveProfile("t", nil)
	require.NoError(t, err)
	assert.Equal(t, profile{tokenID: "ak-work", tokenSecret: "as-work", serverURL: "https://modal.example:8443", environment: "dev", maxThrottleWait: throttleBudget}, p)

	t.Setenv("MODAL_PROFILE", "default")
	p, err = resolveProfile("t", nil)
	require.NoError(t, err)
	assert.Equal(t, "ak-default", p.tokenID)
	assert.Equal(t, DefaultServerURL, p.serverURL)

	t.Setenv("MODAL_TOKEN_ID", "ak-env")
	p, err = resolveProfile("t", map[string]string{"token_secret": "as-opt"})
	require.NoError(t, err)
	assert.Equal(t, "ak-env", p.tokenID)
	assert.Equal(t, "as-opt", p.tokenSecret)

	_, err = resolveProfile("t", map[string]string{"profile": "nope"})
	assert.True(t, providers.IsCode(err, providers.Invalid), "%v", err)

	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(dir, "missing.toml"))
	t.Setenv("MODAL_PROFILE", "")
	t.Setenv("MODAL_TOKEN_ID", "")
	_, err = resolveProfile("t", nil)
	assert.True(t, providers.IsCode(err, providers.Auth), "%v", err)
}

func TestPrintfEscape(t *testing.T) {
	// \0 and three octal digits each; the digit after is literal again.
	assert.Equal(t, `a b\0134\0377\00122`, printfEscape("a b\\\xff\n2"))
}

// TestDeadService: when Modal stops answering altogether, a running
// command's Wait returns an error within the provider's bound instead of
// waiting for ever.
func TestDeadService(t *testing.T) {
	srv, err := modaltest.New(modaltest.Options{})
	require.NoError(t, err)
	defer srv.Close()
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	p, err := New(providers.Config{Options: map[string]string{"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}})
	require.NoError(t, err)
	defer p.Close()
	p.deadBound = 2 * time.Second
	ctx := context.Background()
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	require.NoError(t, err)
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sleep", "600"}})
	require.NoError(t, err)
	srv.Unreachable()
	done := make(chan error, 1)
	go func() { _, err := pr.Wait(); done <- err }()
	select {
	case err := <-done:
		c := providers.CodeOf(err)
		assert.True(t, c == providers.TransportLost || c == providers.Gone, "Wait after Modal went away: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("Wait did not return after Modal stopped answering")
	}
}
