//go:build linux

package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWriteTar: the agent's tar of a list of names is what GNU tar's
// --no-recursion --hard-dereference --null -T - gives, keeps nanosecond
// times, never leaves the root, and leaves out (and tells of) the names it
// cannot archive while keeping the archive whole.
func TestWriteTar(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	must(os.MkdirAll(filepath.Join(root, "d", "sub"), 0o750))
	must(os.WriteFile(filepath.Join(root, "d", "a"), []byte("alpha"), 0o640))
	must(os.WriteFile(filepath.Join(root, "d", "sub", "deep"), []byte("not listed"), 0o644))
	must(os.Link(filepath.Join(root, "d", "a"), filepath.Join(root, "hard")))
	must(os.Symlink("d/a", filepath.Join(root, "ln")))
	must(os.Symlink(outside, filepath.Join(root, "out")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	must(os.WriteFile(filepath.Join(root, "-dash\nnl \xff"), []byte("odd"), 0o755))
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	must(err)
	defer l.Close()
	mt := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	must(os.Chtimes(filepath.Join(root, "d", "a"), mt, mt))

	names := []string{"d", "d/a", "hard", "ln", "fifo", "-dash\nnl \xff", "sock", "gone", "out/secret", "../x", "d/sub"}
	var in bytes.Buffer
	for _, n := range names {
		in.WriteString(n + "\x00")
	}
	var out, warn bytes.Buffer
	err = WriteTar(&in, &out, root, &warn)
	if !errors.Is(err, errPartial) {
		t.Errorf("WriteTar = %v, want the partial error for sock, gone, out/secret and ../x", err)
	}
	for _, n := range []string{"sock", "gone", "out/secret", "../x"} {
		if !strings.Contains(warn.String(), n+":") {
			t.Errorf("no warning names %q: %s", n, warn.String())
		}
	}
	if b := out.Bytes(); len(b) == 0 || b[0] != 'K' {
		t.Fatalf("the archive does not start with K")
	}
	type member struct {
		typ  byte
		mode int64
		body string
		link string
	}
	got := map[string]member{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(out.Bytes()[1:]))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		b, _ := io.ReadAll(tr)
		got[hdr.Name] = member{hdr.Typeflag, hdr.Mode & 0o7777, string(b), hdr.Linkname}
		order = append(order, hdr.Name)
		if hdr.Name == "d/a" && !hdr.ModTime.Equal(mt) {
			t.Errorf("d/a mtime %v, want %v", hdr.ModTime, mt)
		}
	}
	want := map[string]member{
		"d/":             {tar.TypeDir, 0o750, "", ""},
		"d/a":            {tar.TypeReg, 0o640, "alpha", ""},
		"hard":           {tar.TypeReg, 0o640, "alpha", ""},
		"ln":             {tar.TypeSymlink, 0o777, "", "d/a"},
		"fifo":           {tar.TypeFifo, 0o600, "", ""},
		"-dash\nnl \xff": {tar.TypeReg, 0o755, "odd", ""},
		"d/sub/":         {tar.TypeDir, 0o750, "", ""},
	}
	if len(got) != len(want) {
		t.Errorf("members %q, want %d of them", order, len(want))
	}
	for n, w := range want {
		if g, ok := got[n]; !ok || g != w {
			t.Errorf("member %q = %+v (present %v), want %+v", n, g, ok, w)
		}
	}

	// A root that is missing or not a directory is an error before any
	// output.
	out.Reset()
	if err := WriteTar(strings.NewReader("a\x00"), &out, filepath.Join(root, "nope"), io.Discard); !errors.Is(err, syscall.ENOENT) || out.Len() != 0 {
		t.Errorf("missing root: %v, %d bytes out; want ENOENT and nothing", err, out.Len())
	}
	if err := WriteTar(strings.NewReader("a\x00"), &out, filepath.Join(root, "d", "a"), io.Discard); !errors.Is(err, syscall.ENOTDIR) || out.Len() != 0 {
		t.Errorf("file root: %v, %d bytes out; want ENOTDIR and nothing", err, out.Len())
	}
}
