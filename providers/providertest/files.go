package providertest

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// filesT carries one Files subtest's state.
type filesT struct {
	t   *testing.T
	ctx context.Context
	b   providers.Box
	fs  providers.Files
	dir string
}

func (f *filesT) p(name string) string { return path.Join(f.dir, name) }

func (f *filesT) ok(err error, what string) {
	f.t.Helper()
	if err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
}

// errno checks that err is the box-side errno want, kept as the cause, with
// the code that errno maps to.
func (f *filesT) errno(err error, want syscall.Errno, what string) {
	f.t.Helper()
	if err == nil {
		f.t.Errorf("%s: no error, want %v", what, want)
		return
	}
	got, ok := providers.ErrnoOf(err)
	if !ok || got != want {
		f.t.Errorf("%s: %v (errno %v), want errno %v (%s)", what, err, got, want, want.Error())
	}
	if c := providers.CodeOf(err); c != providers.CodeOfErrno(want) {
		f.t.Errorf("%s: code %v, want %v", what, c, providers.CodeOfErrno(want))
	}
}

func (f *filesT) stat(name string) providers.FileInfo {
	f.t.Helper()
	fi, err := f.fs.Stat(f.ctx, name)
	f.ok(err, "Stat "+name)
	return fi
}

func (f *filesT) read(name string) string {
	f.t.Helper()
	rc, err := f.fs.ReadFile(f.ctx, name)
	f.ok(err, "ReadFile "+name)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	f.ok(err, "reading "+name)
	return string(b)
}

func (f *filesT) write(name, content string, perm fs.FileMode) {
	f.t.Helper()
	f.ok(f.fs.WriteFile(f.ctx, name, strings.NewReader(content), perm), "WriteFile "+name)
}

func (f *filesT) wantFile(name, content string, perm fs.FileMode) {
	f.t.Helper()
	if got := f.read(name); got != content {
		f.t.Errorf("%s holds %q, want %q", name, got, content)
	}
	fi := f.stat(name)
	if !fi.IsRegular() || fi.Size != int64(len(content)) || fi.Mode.Perm() != perm {
		f.t.Errorf("Stat %s = mode %v size %d, want a regular file, mode %v, size %d", name, fi.Mode, fi.Size, perm, len(content))
	}
}

func testFiles(t *testing.T, s *suite) {
	b := s.box(t, nil)
	files, ok := b.(providers.Files)
	if !ok {
		t.Skip("the box does not implement providers.Files")
	}
	ctx := testCtx(t)
	facts, err := b.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts: %v", err)
	}
	f := &filesT{t: t, ctx: ctx, b: b, fs: files, dir: path.Join(facts.Workspace, "conformance files")}

	f.ok(files.Mkdir(ctx, f.dir, 0o750), "Mkdir")
	if fi := f.stat(f.dir); !fi.IsDir() || fi.Mode.Perm() != 0o750 {
		t.Errorf("Stat of a new directory: mode %v, want a directory with 0750", fi.Mode)
	}
	f.errno(files.Mkdir(ctx, f.dir, 0o755), syscall.EEXIST, "Mkdir of an existing directory")

	f.contents()
	f.inPlace()
	f.create()
	f.times()
	f.links()
	f.errnos()
	f.listings()
	f.removal()
}

// contents writes and reads a file, and a command in the box sees it.
func (f *filesT) contents() {
	files, ctx, b, t := f.fs, f.ctx, f.b, f.t
	a := f.p("a.txt")
	f.write(a, "hello, box\n", 0o640)
	f.wantFile(a, "hello, box\n", 0o640)
	if out := mustRun(t, ctx, b, providers.ExecRequest{Argv: []string{"cat", a}}); string(out) != "hello, box\n" {
		t.Errorf("cat in the box of a file written through Files printed %q", out)
	}
	buf := make([]byte, 3)
	if n, err := files.ReadAt(ctx, a, buf, 7); n != 3 || err != nil || string(buf) != "box" {
		t.Errorf("ReadAt(7, 3) = %d %q, %v; want 3 \"box\"", n, buf[:n], err)
	}
	buf = make([]byte, 100)
	if n, err := files.ReadAt(ctx, a, buf, 7); n != 4 || err != io.EOF || string(buf[:n]) != "box\n" {
		t.Errorf("ReadAt(7, 100) = %d %q, %v; want 4 \"box\\n\", io.EOF", n, buf[:n], err)
	}
}

// inPlace: an existing file keeps its mode; WriteAt and Truncate change
// it in place.
func (f *filesT) inPlace() {
	files, ctx, t := f.fs, f.ctx, f.t
	a := f.p("a.txt")
	f.ok(files.Chmod(ctx, a, 0o600), "Chmod")
	f.write(a, "replaced", 0o644)
	f.wantFile(a, "replaced", 0o600)
	if n, err := files.WriteAt(ctx, a, []byte("R"), 0); n != 1 || err != nil {
		t.Errorf("WriteAt = %d, %v", n, err)
	}
	f.ok(files.Truncate(ctx, a, 3), "Truncate")
	f.wantFile(a, "Rep", 0o600)
}

// create makes empty files, exclusively or not.
func (f *filesT) create() {
	files, ctx := f.fs, f.ctx
	c := f.p("created")
	f.ok(files.Create(ctx, c, 0o604, true), "Create")
	f.wantFile(c, "", 0o604)
	f.errno(files.Create(ctx, c, 0o644, true), syscall.EEXIST, "exclusive Create of an existing file")
	f.write(c, "some bytes", 0o644)
	f.ok(files.Create(ctx, c, 0o644, false), "Create of an existing file")
	f.wantFile(c, "", 0o604)
}

// times sets times to the nanosecond; a zero time is left alone.
func (f *filesT) times() {
	files, ctx, t := f.fs, f.ctx, f.t
	a := f.p("a.txt")
	at, mt := time.Unix(1500000000, 987654321), time.Unix(1600000000, 123456789)
	f.ok(files.Utimes(ctx, a, at, mt), "Utimes")
	if fi := f.stat(a); !fi.Mtime.Equal(mt) || !fi.Atime.Equal(at) {
		t.Errorf("after Utimes(%v, %v): atime %v, mtime %v", at, mt, fi.Atime, fi.Mtime)
	}
	mt2 := time.Unix(1700000000, 1)
	f.ok(files.Utimes(ctx, a, time.Time{}, mt2), "Utimes with a zero atime")
	if fi := f.stat(a); !fi.Mtime.Equal(mt2) || !fi.Atime.Equal(at) {
		t.Errorf("after Utimes(zero, %v): atime %v (want it unchanged at %v), mtime %v", mt2, fi.Atime, at, fi.Mtime)
	}
	f.ok(files.Chown(ctx, a, -1, -1), "Chown(-1, -1)")
	f.ok(files.Fsync(ctx, a), "Fsync")
}

// links makes symbolic and hard links, and renames.
func (f *filesT) links() {
	files, ctx, t := f.fs, f.ctx, f.t
	a, c := f.p("a.txt"), f.p("created")
	link := f.p("link")
	f.ok(files.Symlink(ctx, "a.txt", link), "Symlink")
	if got, err := files.Readlink(ctx, link); err != nil || got != "a.txt" {
		t.Errorf("Readlink = %q, %v; want a.txt", got, err)
	}
	if fi, err := files.Lstat(ctx, link); err != nil || !fi.IsSymlink() || (fi.Target != "" && fi.Target != "a.txt") {
		t.Errorf("Lstat of a symlink = %+v, %v", fi, err)
	}
	if fi := f.stat(link); !fi.IsRegular() || fi.Size != 3 {
		t.Errorf("Stat through a symlink = mode %v size %d, want the regular file of 3 bytes", fi.Mode, fi.Size)
	}
	_, err := files.Readlink(ctx, a)
	f.errno(err, syscall.EINVAL, "Readlink of a regular file")
	hard := f.p("hard")
	f.ok(files.Link(ctx, a, hard), "Link")
	if fa, fh := f.stat(a), f.stat(hard); fh.Nlink != 2 || fa.Ino != fh.Ino {
		t.Errorf("after Link: nlink %d, inodes %d and %d; want 2 links to one inode", fh.Nlink, fa.Ino, fh.Ino)
	}
	moved := f.p("moved \xff name")
	f.ok(files.Rename(ctx, hard, moved), "Rename")
	_, err = files.Stat(ctx, hard)
	f.errno(err, syscall.ENOENT, "Stat of a renamed file's old name")
	f.wantFile(moved, "Rep", 0o600)
	f.write(c, "new", 0o644)
	f.ok(files.Rename(ctx, c, moved), "Rename over an existing file")
	f.wantFile(moved, "new", 0o604)
}

// errnos: the box's errnos are kept.
func (f *filesT) errnos() {
	files, ctx := f.fs, f.ctx
	a, sub := f.p("a.txt"), f.p("sub")
	f.ok(files.Mkdir(ctx, sub, 0o755), "Mkdir sub")
	f.write(path.Join(sub, "f"), "in sub", 0o644)
	_, err := files.Stat(ctx, f.p("missing"))
	f.errno(err, syscall.ENOENT, "Stat of a missing file")
	_, err = files.Stat(ctx, path.Join(a, "x"))
	f.errno(err, syscall.ENOTDIR, "Stat below a regular file")
	f.errno(files.Remove(ctx, sub), syscall.EISDIR, "Remove of a directory")
	f.errno(files.Rmdir(ctx, sub), syscall.ENOTEMPTY, "Rmdir of a non-empty directory")
	f.errno(files.Rmdir(ctx, a), syscall.ENOTDIR, "Rmdir of a file")
	f.errno(files.Remove(ctx, f.p("missing")), syscall.ENOENT, "Remove of a missing file")
	f.errno(files.Create(ctx, sub, 0o644, true), syscall.EEXIST, "exclusive Create over a directory")
	f.errno(files.WriteFile(ctx, sub, strings.NewReader("x"), 0o644), syscall.EISDIR, "WriteFile over a directory")
	if rc, err := files.ReadFile(ctx, sub); err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
		f.errno(err, syscall.EISDIR, "ReadFile of a directory")
	} else {
		f.errno(err, syscall.EISDIR, "ReadFile of a directory")
	}
}

// listings: ReadDir is sorted by name; Walk lists parents first,
// siblings by name.
func (f *filesT) listings() {
	files, ctx, b, t := f.fs, f.ctx, f.b, f.t
	// "sub" and its child come before "sub-x" and "sub.txt".
	f.write(f.p("sub-x"), "", 0o644)
	f.write(f.p("sub.txt"), "", 0o644)
	ents, err := files.ReadDir(ctx, f.dir)
	f.ok(err, "ReadDir")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if want := []string{"a.txt", "link", "moved \xff name", "sub", "sub-x", "sub.txt"}; !slices.Equal(names, want) {
		t.Errorf("ReadDir = %q, want %q", names, want)
	}
	if w, ok := b.(providers.Walker); ok {
		got, err := w.Walk(ctx, f.dir)
		f.ok(err, "Walk")
		var names []string
		for _, e := range got {
			names = append(names, e.Name)
			if e.Name == "link" && (!e.IsSymlink() || e.Target != "a.txt") {
				t.Errorf("Walk: link is %v with target %q, want a symlink to a.txt", e.Mode, e.Target)
			}
			if e.Name == "sub/f" && (e.Size != 6 || !e.IsRegular()) {
				t.Errorf("Walk: sub/f has mode %v size %d", e.Mode, e.Size)
			}
		}
		if want := []string{"a.txt", "link", "moved \xff name", "sub", "sub/f", "sub-x", "sub.txt"}; !slices.Equal(names, want) {
			t.Errorf("Walk = %q, want %q", names, want)
		}
	}
	st, err := files.Statfs(ctx, f.dir)
	if err != nil || st.Bsize == 0 || st.Blocks == 0 {
		t.Errorf("Statfs = %+v, %v", st, err)
	}
}

// removal removes everything made, the directory last.
func (f *filesT) removal() {
	files, ctx, t := f.fs, f.ctx, f.t
	for _, n := range []string{"a.txt", "link", "moved \xff name", "sub/f", "sub-x", "sub.txt"} {
		f.ok(files.Remove(ctx, f.p(n)), "Remove "+n)
	}
	f.ok(files.Rmdir(ctx, f.p("sub")), "Rmdir sub")
	f.ok(files.Rmdir(ctx, f.dir), "Rmdir")
	_, err := files.Lstat(ctx, f.dir)
	f.errno(err, syscall.ENOENT, "Lstat of a removed directory")
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) is false", err)
	}
}
