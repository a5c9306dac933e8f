package archil_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/archil"
	"github.com/boxfs/boxfs/providers/archil/archiltest"
)

// TestLargeUpload writes a file bigger than what an upload keeps in
// memory (8 MiB; more is spooled to a temporary file, a body net/http
// cannot measure): it goes out with its length, which the object API
// requires, and reads back whole. The fake refuses an upload without a
// length, as S3 does.
func TestLargeUpload(t *testing.T) {
	srv := archiltest.New(archiltest.Options{})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)

	bx, err := open(t, srv, nil).Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { bx.Destroy(context.Background()) })
	b := bx.(*archil.Box)
	f, err := b.Facts(ctx)
	require.NoError(t, err)
	data := make([]byte, 9<<20)
	rand.Read(data)
	require.NoError(t, b.WriteFile(ctx, f.Workspace+"/big", bytes.NewReader(data), 0o644))
	rc, err := b.ReadFile(ctx, f.Workspace+"/big")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "ReadFile of a 9 MiB upload differs (%d bytes back)", len(got))
	assert.Empty(t, srv.Uploads(), "an upload of 16 MiB or less is one PUT")

	// A body of unknown length goes out chunked, which the fake refuses.
	put, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL()+"/"+srv.DiskIDs()[0]+"/chunked", io.MultiReader(strings.NewReader("no length")))
	require.NoError(t, err)
	put.Header.Set("Authorization", "key-"+srv.APIKey())
	resp, err := http.DefaultClient.Do(put)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusLengthRequired, resp.StatusCode, "an upload without a length")
}

// TestMultipartUpload writes a 20 MiB file: over 16 MiB, it goes up as
// the vendor's client sends it, a multipart upload of a 16 MiB part and a
// 4 MiB one, every request with its length, and arrives byte-exact.
func TestMultipartUpload(t *testing.T) {
	srv := archiltest.New(archiltest.Options{SharedMode: true})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)

	bx, err := open(t, srv, nil).Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { bx.Destroy(context.Background()) })
	b := bx.(*archil.Box)
	f, err := b.Facts(ctx)
	require.NoError(t, err)
	data := make([]byte, 20<<20)
	rand.Read(data)
	before := len(srv.Requests())
	require.NoError(t, b.WriteFile(ctx, f.Workspace+"/big", bytes.NewReader(data), 0o644))
	rc, err := b.ReadFile(ctx, f.Workspace+"/big")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "ReadFile of a 20 MiB upload differs (%d bytes back)", len(got))

	ups := srv.Uploads()
	require.Len(t, ups, 1, "one multipart upload")
	assert.Equal(t, []int64{16 << 20, 4 << 20}, ups[0].PartSizes)
	calls := map[string]int{}
	for _, r := range srv.Requests()[before:] {
		assert.GreaterOrEqual(t, r.Length, int64(0), "a request without a length: %s %s?%s", r.Method, r.Path, r.Query)
		q, _ := url.ParseQuery(r.Query)
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			calls["create"]++
		case r.Method == http.MethodPut && q.Has("partNumber"):
			calls["part"]++
			assert.Contains(t, []int64{16 << 20, 4 << 20}, r.Length, "part %s", q.Get("partNumber"))
		case r.Method == http.MethodPost && q.Has("uploadId"):
			calls["complete"]++
			assert.Positive(t, r.Length)
		case r.Method == http.MethodPut:
			calls["put"]++
		}
	}
	assert.Equal(t, map[string]int{"create": 1, "part": 2, "complete": 1}, calls, "the upload's object calls")
}

// TestMultipartLostAnswer loses the answer of a completion the fake
// carried out (a 503 after it was handled): the provider finds the object
// there, whole, instead of completing again (which would fail with
// NoSuchUpload), and a failed part aborts the upload.
func TestMultipartLostAnswer(t *testing.T) {
	srv := archiltest.New(archiltest.Options{})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	bx, err := open(t, srv, nil).Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { bx.Destroy(context.Background()) })
	b := bx.(*archil.Box)
	f, err := b.Facts(ctx)
	require.NoError(t, err)
	data := make([]byte, 17<<20)
	rand.Read(data)

	srv.SetFault(func(r *http.Request, n int) archiltest.Fault {
		if r.Method == http.MethodPost && r.URL.Query().Has("uploadId") {
			return archiltest.Fault{Status: http.StatusServiceUnavailable, After: true}
		}
		return archiltest.Fault{}
	})
	require.NoError(t, b.WriteFile(ctx, f.Workspace+"/big", bytes.NewReader(data), 0o644))
	srv.SetFault(nil)
	rc, err := b.ReadFile(ctx, f.Workspace+"/big")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the upload whose completion's answer was lost differs")
	completes := 0
	for _, r := range srv.Requests() {
		if r.Method == http.MethodPost && strings.Contains(r.Query, "uploadId") {
			completes++
		}
	}
	assert.Equal(t, 1, completes, "a completion that went through was sent again")

	// A part refused for good: the upload is aborted, the write fails.
	srv.SetFault(func(r *http.Request, n int) archiltest.Fault {
		if r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2" {
			return archiltest.Fault{Status: http.StatusForbidden}
		}
		return archiltest.Fault{}
	})
	before := len(srv.Requests())
	require.Error(t, b.WriteFile(ctx, f.Workspace+"/big2", bytes.NewReader(data), 0o644))
	srv.SetFault(nil)
	aborted := false
	for _, r := range srv.Requests()[before:] {
		aborted = aborted || r.Method == http.MethodDelete && strings.Contains(r.Query, "uploadId")
	}
	assert.True(t, aborted, "a failed upload was not aborted")
}
