package spec_test

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest/spec"
)

// TestTableFollowsPinnedPacks packs the pinned versions again and checks
// that the committed table is what they define. It needs npm and its
// registry; without npm it is skipped (BOXFS_REQUIRE_NPM=1 makes that a
// failure, as CI sets it).
func TestTableFollowsPinnedPacks(t *testing.T) {
	testbox.RequireNPM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, warnings, err := spec.Generate(ctx, t.TempDir())
	require.NoError(t, err, "packing and reading the pinned versions")
	assert.Empty(t, warnings, "the packs define types the generator does not read")
	var got bytes.Buffer
	require.NoError(t, s.Format(&got))
	want, err := os.ReadFile("spec.txt")
	require.NoError(t, err)
	assert.Equal(t, string(want), got.String(), "spec.txt differs from what the pinned packs define: run go run ./providers/daytona/daytonatest/spec/specgen")
}

// TestTableIsTheVersions: the committed table was made from the versions
// pinned now (a bump must regenerate it), and reads back as written.
func TestTableIsTheVersions(t *testing.T) {
	s, err := spec.Load()
	require.NoError(t, err)
	v, err := spec.Versions()
	require.NoError(t, err)
	assert.Equal(t, v, s.Packs, "versions and spec.txt name different packs: regenerate spec.txt")
	var b bytes.Buffer
	require.NoError(t, s.Format(&b))
	want, err := os.ReadFile("spec.txt")
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String(), "the table does not read back as written")
	for _, plane := range []string{spec.API, spec.Toolbox, spec.ToolboxOld} {
		n := 0
		for _, r := range s.Routes {
			if r.Plane == plane {
				n++
			}
		}
		assert.Greater(t, n, 10, "plane %s has %d routes", plane, n)
	}
}

// TestMatch: literal segments beat parameters; parameters match one
// non-empty segment.
func TestMatch(t *testing.T) {
	s, err := spec.Load()
	require.NoError(t, err)
	for _, c := range []struct {
		method, path, op string
	}{
		{"GET", "/process/session/entrypoint", "getEntrypointSession"},
		{"GET", "/process/session/s1", "getSession"},
		{"GET", "/process/session/s1/command/c1/logs", "getSessionCommandLogs"},
		{"DELETE", "/files", "deleteFile"},
		{"POST", "/files/bulk-upload", "uploadFiles"},
	} {
		r, ok := s.Match(spec.Toolbox, c.method, c.path)
		if assert.True(t, ok, "%s %s", c.method, c.path) {
			assert.Equal(t, c.op, r.Op, "%s %s", c.method, c.path)
		}
	}
	for _, c := range [][2]string{{"GET", "/process/session//command/c/logs"}, {"POST", "/files/upload"}, {"PUT", "/files"}} {
		_, ok := s.Match(spec.Toolbox, c[0], c[1])
		assert.False(t, ok, "%s %s matched", c[0], c[1])
	}
	_, ok := s.Match(spec.ToolboxOld, "POST", "/files/upload")
	assert.True(t, ok, "the older toolbox has /files/upload")
}

// TestCheckRequest: a call the spec has passes; a route, a query
// parameter, a JSON field or a multipart field it lacks fails, and so does
// every call of a route renamed in a copy of the spec.
func TestCheckRequest(t *testing.T) {
	s, err := spec.Load()
	require.NoError(t, err)
	create := spec.Request{Plane: spec.API, Method: "POST", Path: "/sandbox", ContentType: "application/json",
		Body: []byte(`{"name":"n","labels":{"a":"b"},"ttlMinutes":5,"autoDeleteInterval":0}`)}
	require.NoError(t, s.CheckRequest(create))
	bad := create
	bad.Body = []byte(`{"name":"n","ttl":5}`)
	assert.ErrorContains(t, s.CheckRequest(bad), `field "ttl" is not in CreateSandbox`)
	bad.Body = []byte(`{"name":5}`)
	assert.ErrorContains(t, s.CheckRequest(bad), "number where a string is")

	list := spec.Request{Plane: spec.API, Method: "GET", Path: "/sandbox", Query: url.Values{"labels": {`{"x":"1"}`}, "cursor": {"c"}}}
	require.NoError(t, s.CheckRequest(list))
	list.Query.Set("page", "2")
	assert.ErrorContains(t, s.CheckRequest(list), `query parameter "page"`)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("files[0].path", "/tmp/x")
	fw, _ := mw.CreateFormFile("files[0].file", "/tmp/x")
	fw.Write([]byte("data"))
	mw.Close()
	up := spec.Request{Plane: spec.Toolbox, Method: "POST", Path: "/files/bulk-upload", ContentType: mw.FormDataContentType(), Body: body.Bytes()}
	require.NoError(t, s.CheckRequest(up))
	old := up
	old.Path = "/files/upload"
	assert.ErrorContains(t, s.CheckRequest(old), "no such route")

	body.Reset()
	mw = multipart.NewWriter(&body)
	fw, _ = mw.CreateFormFile("file", "x")
	fw.Write([]byte("data"))
	mw.Close()
	up.ContentType, up.Body = mw.FormDataContentType(), body.Bytes()
	assert.ErrorContains(t, s.CheckRequest(up), `multipart field "file"`)

	renamed := s.RenameRoute(spec.API, "POST", "/sandbox", "/sandboxes")
	assert.ErrorContains(t, renamed.CheckRequest(create), "no such route")
	assert.False(t, renamed.HasRoute(spec.API, "POST", "/sandbox"))
	assert.True(t, s.HasRoute(spec.API, "POST", "/sandbox"), "renaming changed the original")
}

// TestCheckResponse: an answer's fields and enum values must be the
// spec's.
func TestCheckResponse(t *testing.T) {
	s, err := spec.Load()
	require.NoError(t, err)
	require.NoError(t, s.CheckResponse(spec.API, "GET", "/sandbox/x", []byte(`{"id":"x","state":"started","desiredState":"destroyed","labels":{}}`)))
	assert.ErrorContains(t, s.CheckResponse(spec.API, "GET", "/sandbox/x", []byte(`{"id":"x","state":"running"}`)), "not a value of SandboxState")
	assert.ErrorContains(t, s.CheckResponse(spec.API, "GET", "/sandbox", []byte(`{"items":[{"id":"x","bogus":1}],"nextCursor":null}`)), `field "bogus" is not in SandboxListItem`)
	require.NoError(t, s.CheckResponse(spec.Toolbox, "POST", "/process/session/s/exec", []byte(`{"cmdId":"c"}`)))
	assert.ErrorContains(t, s.CheckResponse(spec.Toolbox, "POST", "/process/execute", []byte(`{"exitCode":0,"result":"","code":0}`)), `field "code"`)
}
