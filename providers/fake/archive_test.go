package fake_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

type member struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	mtime      time.Time
}

func tarOf(t *testing.T, ms ...member) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.typ, Mode: m.mode, Size: int64(len(m.body)), ModTime: m.mtime, Format: tar.FormatPAX}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, m.body)
	}
	tw.Close()
	return &buf
}

func listTar(t *testing.T, r io.Reader) string {
	t.Helper()
	var b strings.Builder
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		fmt.Fprintf(&b, "%c %s %o %s %q %d\n", h.Typeflag, h.Name, h.Mode, h.Linkname, body, h.ModTime.UnixNano())
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	_, b := newBox(t, providers.Spec{})
	ctx := context.Background()
	mt := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	in := tarOf(t,
		member{name: "./proj/", typ: tar.TypeDir, mode: 0o750, mtime: mt},
		member{name: "proj/a.txt", typ: tar.TypeReg, mode: 0o644, body: "alpha", mtime: mt},
		member{name: "proj/sub/b", typ: tar.TypeReg, mode: 0o4755, body: "beta", mtime: mt}, // parent made on the way
		member{name: "proj/link", typ: tar.TypeSymlink, link: "a.txt", mtime: mt},
		member{name: "proj/hard", typ: tar.TypeLink, link: "proj/a.txt"},
	)
	if err := b.PutArchive(ctx, "/work", in); err != nil {
		t.Fatal(err)
	}
	fi, err := b.Stat(ctx, "/work/proj/a.txt")
	if err != nil || fi.Nlink != 2 || !fi.Mtime.Equal(mt) || fi.Mode.Perm() != 0o644 {
		t.Errorf("a.txt: %+v, %v", fi, err)
	}
	if fi, _ := b.Stat(ctx, "/work/proj/sub/b"); fi.Mode&fs.ModeSetuid == 0 {
		t.Errorf("sub/b mode %v, want setuid kept", fi.Mode)
	}
	if target, err := b.Readlink(ctx, "/work/proj/link"); err != nil || target != "a.txt" {
		t.Errorf("link -> %q, %v", target, err)
	}

	rc, err := b.GetArchive(ctx, "/work/proj")
	if err != nil {
		t.Fatal(err)
	}
	got := listTar(t, rc)
	ns := mt.UnixNano()
	subMtime, _ := b.Stat(ctx, "/work/proj/sub")
	want := fmt.Sprintf(`5 proj/ 750  "" %d
0 proj/a.txt 644  "alpha" %d
0 proj/hard 644  "alpha" %d
2 proj/link 777 a.txt "" %d
5 proj/sub/ 755  "" %d
0 proj/sub/b 4755  "beta" %d
`, ns, ns, ns, ns, subMtime.Mtime.UnixNano(), ns)
	// proj/hard and proj/a.txt are one file: the second name comes as a
	// hard link to the first.
	want = strings.Replace(want, `0 proj/hard 644  "alpha"`, `1 proj/hard 644 proj/a.txt ""`, 1)
	if got != want {
		t.Errorf("GetArchive:\n%s\nwant:\n%s", got, want)
	}

	// One file: its member is its base name.
	rc, err = b.GetArchive(ctx, "/work/proj/sub/b")
	if err != nil {
		t.Fatal(err)
	}
	if got := listTar(t, rc); got != fmt.Sprintf("0 b 4755  \"beta\" %d\n", ns) {
		t.Errorf("GetArchive of a file: %s", got)
	}
}

func TestArchiveRefuses(t *testing.T) {
	tests := []struct {
		name string
		dir  string
		tar  func(t *testing.T) io.Reader
		want providers.Code
	}{
		{"absolute name", "/work", func(t *testing.T) io.Reader {
			return tarOf(t, member{name: "/etc/passwd", typ: tar.TypeReg, body: "x"})
		}, providers.Unsafe},
		{"dot-dot name", "/work", func(t *testing.T) io.Reader {
			return tarOf(t, member{name: "a/../../x", typ: tar.TypeReg, body: "x"})
		}, providers.Unsafe},
		{"through a symlink", "/work", func(t *testing.T) io.Reader {
			return tarOf(t, member{name: "l", typ: tar.TypeSymlink, link: "/tmp"}, member{name: "l/x", typ: tar.TypeReg, body: "x"})
		}, providers.Unsafe},
		{"hard link outside", "/work", func(t *testing.T) io.Reader {
			return tarOf(t, member{name: "h", typ: tar.TypeLink, link: "../etc/passwd"})
		}, providers.Unsafe},
		{"device", "/work", func(t *testing.T) io.Reader {
			return tarOf(t, member{name: "dev", typ: tar.TypeChar})
		}, providers.Unsupported},
		{"malformed", "/work", func(t *testing.T) io.Reader {
			return strings.NewReader(strings.Repeat("not a tar ", 100))
		}, providers.Invalid},
		{"truncated", "/work", func(t *testing.T) io.Reader {
			b := tarOf(t, member{name: "f", typ: tar.TypeReg, body: strings.Repeat("x", 2000)}).Bytes()
			return bytes.NewReader(b[:700])
		}, providers.Invalid},
		{"missing dir", "/nope", func(t *testing.T) io.Reader { return tarOf(t) }, providers.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, b := newBox(t, providers.Spec{})
			ctx := context.Background()
			err := b.PutArchive(ctx, tt.dir, tt.tar(t))
			if !providers.IsCode(err, tt.want) {
				t.Errorf("PutArchive = %v, want %v", err, tt.want)
			}
			if _, err := b.Stat(ctx, "/tmp/x"); err == nil {
				t.Error("extraction wrote outside its directory")
			}
		})
	}
}

func TestWalk(t *testing.T) {
	_, b := newBox(t, providers.Spec{})
	ctx := context.Background()
	for _, d := range []string{"/work/b", "/work/a", "/work/a/z"} {
		b.Mkdir(ctx, d, 0o755)
	}
	b.WriteFile(ctx, "/work/a/f", strings.NewReader("x"), 0o644)
	b.Symlink(ctx, "/tmp", "/work/a/l")
	fis, err := b.Walk(ctx, "/work")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fi := range fis {
		got = append(got, fi.Name+":"+fi.Target)
	}
	if want := "a: a/f: a/l:/tmp a/z: b:"; strings.Join(got, " ") != want {
		t.Errorf("Walk = %q, want %q", strings.Join(got, " "), want)
	}
	if _, err := b.Walk(ctx, "/work/a/f"); !providers.IsCode(err, providers.Invalid) {
		t.Errorf("Walk of a file = %v, want ENOTDIR (invalid)", err)
	}
}
