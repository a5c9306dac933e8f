package archiltest

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMultipart drives the fake's multipart calls as the vendor's client
// does, and checks what S3 refuses: a part list out of order, a part
// whose ETag differs, a part under 5 MiB that is not the last, an
// unknown upload, a part without a length.
func TestMultipart(t *testing.T) {
	s := New(Options{})
	t.Cleanup(s.Close)
	do := func(method, path string, body io.Reader) (*http.Response, []byte) {
		req, err := http.NewRequest(method, s.URL()+path, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "key-"+s.APIKey())
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	resp, _ := do(http.MethodPost, "/api/disks", strings.NewReader(`{"name":"d"}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	disk := s.DiskIDs()[0]
	obj := "/" + disk + "/dir/obj"
	start := func() string {
		resp, b := do(http.MethodPost, obj+"?uploads", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		var r struct {
			UploadID string `xml:"UploadId"`
		}
		require.NoError(t, xml.Unmarshal(b, &r))
		return r.UploadID
	}
	part := func(id string, n int, data []byte) string {
		resp, b := do(http.MethodPut, fmt.Sprintf("%s?uploadId=%s&partNumber=%d", obj, id, n), bytes.NewReader(data))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		return resp.Header.Get("ETag")
	}
	complete := func(id string, parts ...any) (int, string) {
		var sb strings.Builder
		sb.WriteString("<CompleteMultipartUpload>")
		for i := 0; i < len(parts); i += 2 {
			fmt.Fprintf(&sb, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", parts[i], parts[i+1])
		}
		sb.WriteString("</CompleteMultipartUpload>")
		resp, b := do(http.MethodPost, obj+"?uploadId="+id, strings.NewReader(sb.String()))
		var e struct {
			Code string `xml:"Code"`
		}
		xml.Unmarshal(b, &e)
		return resp.StatusCode, e.Code
	}
	big := bytes.Repeat([]byte("a"), minPartSize)
	tail := []byte("tail")

	id := start()
	e1, e2 := part(id, 1, big), part(id, 2, tail)
	status, code := complete(id, 2, e2, 1, e1)
	assert.Equal(t, [2]any{http.StatusBadRequest, "InvalidPartOrder"}, [2]any{status, code})
	status, code = complete(id, 1, `"0"`, 2, e2)
	assert.Equal(t, [2]any{http.StatusBadRequest, "InvalidPart"}, [2]any{status, code})
	e3 := part(id, 3, tail)
	status, code = complete(id, 2, e2, 3, e3)
	assert.Equal(t, [2]any{http.StatusBadRequest, "EntityTooSmall"}, [2]any{status, code})
	status, _ = complete(id, 1, e1, 2, e2)
	require.Equal(t, http.StatusOK, status)
	got, err := os.ReadFile(filepath.Join(s.DiskDir(disk), "dir", "obj"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(append(append([]byte{}, big...), tail...), got), "the object is its parts in order")
	assert.Equal(t, []Upload{{Disk: disk, Key: "dir/obj", PartSizes: []int64{minPartSize, 4}}}, s.Uploads())
	status, code = complete(id, 1, e1, 2, e2)
	assert.Equal(t, [2]any{http.StatusNotFound, "NoSuchUpload"}, [2]any{status, code}, "a completed upload is gone")

	id = start()
	req, err := http.NewRequest(http.MethodPut, s.URL()+obj+"?uploadId="+id+"&partNumber=1", io.MultiReader(strings.NewReader("x")))
	require.NoError(t, err)
	req.Header.Set("Authorization", "key-"+s.APIKey())
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusLengthRequired, resp.StatusCode, "a part without a length")
	resp, _ = do(http.MethodDelete, obj+"?uploadId="+id, nil)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	status, code = complete(id, 1, e1)
	assert.Equal(t, [2]any{http.StatusNotFound, "NoSuchUpload"}, [2]any{status, code}, "an aborted upload is gone")
}
