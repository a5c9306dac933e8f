package archil_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
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

	// A body of unknown length goes out chunked, which the fake refuses.
	put, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL()+"/"+srv.DiskIDs()[0]+"/chunked", io.MultiReader(strings.NewReader("no length")))
	require.NoError(t, err)
	put.Header.Set("Authorization", "key-"+srv.APIKey())
	resp, err := http.DefaultClient.Do(put)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusLengthRequired, resp.StatusCode, "an upload without a length")
}
