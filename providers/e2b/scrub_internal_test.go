package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

func TestScrub(t *testing.T) {
	const key = "e2b_53ae1fed82754c17ad8077fbc8bcdd90"
	for _, c := range []struct{ name, in, want string }{
		{"key", "invalid API key " + key, "invalid API key <redacted>"},
		{"key-shaped", "key e2b_00000000000000000000 unknown", "key <redacted> unknown"},
		{"access-token", "bad token sk_e2b_abcdefgh1234", "bad token <redacted>"},
		{"header", "X-API-Key: abc123def missing", "X-API-Key: <redacted> missing"},
		{"json", `{"envdAccessToken":"tok-1234567","state":"running"}`, `{"envdAccessToken":<redacted>,"state":"running"}`},
		{"bearer", "Authorization: Bearer abc.def.ghi", "Authorization: Bearer <redacted>"},
		{"query", "GET /files?path=/a&access_token=qwerty12&x=1", "GET /files?path=/a&access_token=<redacted>&x=1"},
		{"env-vars", `bad request {"envVars":{"TOKEN":"s3cret","A":"b"},"timeout":3}`, `bad request {"envVars":{<redacted>},"timeout":3}`},
		{"quoted-name", `'token'='v a l'`, `'token'=<redacted>`},
		{"plain", "sandbox not found", "sandbox not found"},
	} {
		t.Run("case="+c.name, func(t *testing.T) {
			assert.Equal(t, c.want, scrub(c.in, key))
		})
	}
	assert.Equal(t, "env value <redacted> echoed, 1 kept", scrub("env value hunter22 echoed, 1 kept", "hunter22", "1"))
}

// A failed answer that repeats the API key, the environment a create
// carried, or anything shaped like a credential keeps none of them in the
// error (whose text reaches err and the log).
func TestAPIErrorScrubbed(t *testing.T) {
	const key = "e2b_0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	const secret = "pa55-word-xyz"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"code":400,"message":"bad sandbox for key %s: envVars TOKEN='%s' in 'env'.TOKEN=%s"}`, r.Header.Get("X-API-Key"), secret, secret)
	}))
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL)
	require.NoError(t, err)
	c := &apiClient{hc: srv.Client(), base: base, key: key}
	_, err = c.create(context.Background(), newSandbox{TemplateID: "base", EnvVars: map[string]string{"TOKEN": secret}})
	require.Error(t, err)
	e := wrap("e2b.Create", "", err)
	assert.Equal(t, providers.Invalid, e.Code)
	text := e.Error()
	assert.NotContains(t, text, key)
	assert.NotContains(t, text, secret)
	assert.True(t, strings.Contains(text, "bad sandbox for key <redacted>"), "error %q", text)
}

// TestEnvdErrorScrubbed: an envd answer (a Connect error's message comes
// from the sandbox) that repeats the API key, the box's access token or a
// named credential keeps none of them in the error, and keeps its code.
func TestEnvdErrorScrubbed(t *testing.T) {
	const key = "e2b_0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	const token = "tok-9a8b7c6d5e4f"
	b := &Box{p: &Provider{api: &apiClient{key: key}}, id: "sbx1", token: token}
	cerr := connect.NewError(connect.CodeNotFound, fmt.Errorf("no such file; request had key %s, token %s, PASSWORD=hunter2hunter", key, token))
	e := b.envdError(context.Background(), "e2b.Stat", cerr)
	assert.Equal(t, providers.NotFound, e.Code)
	text := e.Error()
	for _, s := range []string{key, token, "hunter2hunter"} {
		assert.NotContains(t, text, s)
	}
	assert.Contains(t, text, "no such file")
	assert.Equal(t, connect.CodeNotFound, connect.CodeOf(e), "the Connect error stays in the chain")
}
