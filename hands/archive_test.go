package hands_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// members lists a tar stream as "name type size content" lines.
func members(t *testing.T, rc io.ReadCloser) []string {
	t.Helper()
	defer rc.Close()
	tr := tar.NewReader(rc)
	var out []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading the tar: %v", err)
		}
		b, _ := io.ReadAll(tr)
		out = append(out, strings.Join([]string{hdr.Name, string(hdr.Typeflag), string(b)}, "|"))
	}
}

// TestArchives: the tar fallback (PutArchive, GetArchive) of a box without
// an archive API, and GetFiles, on hostile names.
func TestArchives(t *testing.T) {
	for _, tc := range []struct {
		name string
		box  func(*testing.T) providers.Box
	}{
		{"box=hostbox", func(t *testing.T) providers.Box { return newHostBox(t) }},
		{"box=docker", testbox.NewDocker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, root := openOn(t, tc.box(t), "", hands.Options{})
			ctx := context.Background()
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, m := range []struct{ name, body string }{
				{"top/", ""}, {"top/a", "A"}, {"top/-dash", "D"}, {"top/n\nl", "N"}, {"top/sub/", ""}, {"top/sub/\xff", "F"},
			} {
				hdr := &tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.body)), Typeflag: tar.TypeReg}
				if strings.HasSuffix(m.name, "/") {
					hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
				}
				tw.WriteHeader(hdr)
				tw.Write([]byte(m.body))
			}
			tw.Close()
			if err := h.PutArchive(ctx, root, &buf); err != nil {
				t.Fatalf("PutArchive: %v", err)
			}
			if err := h.PutArchive(ctx, root+"/missing", bytes.NewReader(nil)); !providers.IsCode(err, providers.NotFound) {
				t.Errorf("PutArchive into a missing dir: %v, want not_found", err)
			}
			rc, err := h.GetArchive(ctx, root+"/top/sub")
			if err != nil {
				t.Fatalf("GetArchive: %v", err)
			}
			got := members(t, rc)
			want := []string{"sub/|5|", "sub/\xff|0|F"}
			if !slices.Equal(got, want) {
				t.Errorf("GetArchive members %q, want %q", got, want)
			}
			if _, err := h.GetArchive(ctx, root+"/missing"); !providers.IsCode(err, providers.NotFound) {
				t.Errorf("GetArchive of a missing path: %v, want not_found", err)
			}

			rc, err = h.GetFiles(ctx, root, []string{"top/-dash", "top/n\nl", "top/sub"})
			if err != nil {
				t.Fatalf("GetFiles: %v", err)
			}
			got = members(t, rc)
			want = []string{"top/-dash|0|D", "top/n\nl|0|N", "top/sub/|5|"}
			if !slices.Equal(got, want) {
				t.Errorf("GetFiles members %q, want %q", got, want)
			}
			if _, err := h.GetFiles(ctx, root, []string{"../etc/passwd"}); !providers.IsCode(err, providers.Unsafe) {
				t.Errorf("GetFiles of ../etc/passwd: %v, want unsafe", err)
			}
		})
	}
}

// TestGetFilesWithoutGNUTar: a box whose tar is busybox's (no -T, no
// --null) still gives one tar of a set of paths when it has the agent: the
// agent makes the archive. Through scripts alone the same box cannot, and
// says so (unsupported) before any archive starts.
func TestGetFilesWithoutGNUTar(t *testing.T) {
	box := newBusyboxBox(t)
	h, root := openOn(t, box, hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)})
	ctx := context.Background()
	for name, body := range map[string]string{"a": "A", "-dash": "D", "n\nl": "N"} {
		if err := h.WriteFile(ctx, root+"/"+name, strings.NewReader(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Mkdir(ctx, root+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile(ctx, root+"/sub/inner", strings.NewReader("I"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Symlink(ctx, "a", root+"/ln"); err != nil {
		t.Fatal(err)
	}
	rc, err := h.GetFiles(ctx, root, []string{"-dash", "n\nl", "sub", "ln", "gone"})
	if err != nil {
		t.Fatalf("GetFiles through the agent: %v", err)
	}
	got := members(t, io.NopCloser(rc))
	want := []string{"-dash|0|D", "n\nl|0|N", "sub/|5|", "ln|2|"}
	if !slices.Equal(got, want) {
		t.Errorf("GetFiles members %q, want %q", got, want)
	}
	if err := rc.Close(); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Close after a path that was gone: %v, want an error naming it", err)
	}
	if _, err := h.GetFiles(ctx, root+"/missing", []string{"a"}); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("GetFiles under a missing root: %v, want not_found", err)
	}
	if _, err := h.GetFiles(ctx, root, []string{"../etc/passwd"}); !providers.IsCode(err, providers.Unsafe) {
		t.Errorf("GetFiles of ../etc/passwd: %v, want unsafe", err)
	}

	hs, err := hands.New(ctx, box, hands.Options{Force: hands.ViaScript})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	if _, err := hs.GetFiles(ctx, root, []string{"a"}); !providers.IsCode(err, providers.Unsupported) {
		t.Errorf("GetFiles through scripts with busybox's tar: %v, want unsupported", err)
	}
}
