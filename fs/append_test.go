package fs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// appendTo is a shell's >>: an O_APPEND open and one write, no stat.
func appendTo(t *testing.T, name, data string) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, f.Close())
}

// An append through the mount right after a command in the box appended
// to the same file lands after the box's line: the kernel starts an
// O_APPEND write at the size it holds of the file, which the command made
// old.
func TestAppendAfterBoxAppend(t *testing.T) {
	mnt := mount(t)
	w := filepath.Join(newBox(t, mnt, "a"), "work")
	f := filepath.Join(w, "log")
	require.NoError(t, os.WriteFile(f, []byte("host 1\n"), 0o644))
	if _, err := os.Stat(f); err != nil { // the kernel holds the size: 7
		t.Fatal(err)
	}
	run(t, mnt, "a", "echo box >> log")
	appendTo(t, f, "host 2\n")
	want := "host 1\nbox\nhost 2\n"
	if got := readFile(t, f); got != want {
		t.Errorf("through the mount: %q, want %q", got, want)
	}
	if got := run(t, mnt, "a", "cat log"); got != want {
		t.Errorf("in the box: %q, want %q", got, want)
	}
}

// An append through one name of a hard link right after one through
// another: both stay.
func TestAppendThroughOtherLinkName(t *testing.T) {
	mnt := mount(t)
	w := filepath.Join(newBox(t, mnt, "a"), "work")
	h1, h2 := filepath.Join(w, "h1"), filepath.Join(w, "h2")
	require.NoError(t, os.WriteFile(h1, []byte("a\n"), 0o644))
	require.NoError(t, os.Link(h1, h2))
	if got := readFile(t, h2); got != "a\n" {
		t.Fatalf("h2: %q", got)
	}
	appendTo(t, h1, "b\n")
	appendTo(t, h2, "c\n")
	for _, n := range []string{h1, h2} {
		if got := readFile(t, n); got != "a\nb\nc\n" {
			t.Errorf("%s: %q", filepath.Base(n), got)
		}
	}
	if got := run(t, mnt, "a", "cat h1"); got != "a\nb\nc\n" {
		t.Errorf("in the box: %q", got)
	}
}

// A name taken (O_EXCL create, mkdir, rmdir of a full directory) is an
// answer, like a missing name: the box's err file keeps the last real error.
func TestErrFileKeepsRealErrors(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	w := filepath.Join(box, "work")
	if err := writeFile(t, filepath.Join(box, "ctl"), "frob\n"); err == nil {
		t.Fatal("ctl took frob")
	}
	want := readFile(t, filepath.Join(box, "err"))
	if want == "" {
		t.Fatal("err is empty after a refused ctl write")
	}
	os.MkdirAll(filepath.Join(w, "d"), 0o755)
	os.WriteFile(filepath.Join(w, "d", "f"), nil, 0o644)
	if err := os.Remove(filepath.Join(w, "d")); err == nil {
		t.Fatal("rmdir of a full directory worked")
	}
	if err := os.Mkdir(filepath.Join(w, "d"), 0o755); err == nil {
		t.Fatal("mkdir of an existing directory worked")
	}
	if _, err := os.OpenFile(filepath.Join(w, "d", "f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
		t.Fatal("O_EXCL create of an existing file worked")
	}
	if _, err := os.Stat(filepath.Join(w, "missing")); err == nil {
		t.Fatal("stat of a missing name worked")
	}
	if got := readFile(t, filepath.Join(box, "err")); got != want {
		t.Errorf("err after routine answers: %q, want %q", got, want)
	}
}

// A command that gives a name another kind of file (a directory becomes a
// file, a file a link): right after it, the mount shows the new kind.
func TestBoxChangesAKind(t *testing.T) {
	mnt := mount(t)
	w := filepath.Join(newBox(t, mnt, "a"), "work")
	x := filepath.Join(w, "x")
	require.NoError(t, os.WriteFile(x, []byte("data\n"), 0o644))
	steps := []struct {
		cmd  string
		kind os.FileMode
	}{
		{"rm x && mkdir x && echo in > x/y", os.ModeDir},
		{"rm -r x && echo file > x", 0},
		{"rm x && ln -s target x", os.ModeSymlink},
		{"rm x && echo again > x", 0},
	}
	for _, s := range steps {
		if _, err := os.Lstat(x); err != nil { // the kernel holds the old kind
			t.Fatal(err)
		}
		run(t, mnt, "a", s.cmd)
		fi, err := os.Lstat(x)
		if err != nil || fi.Mode().Type() != s.kind {
			t.Errorf("after %q: %v %v, want kind %v", s.cmd, fi.Mode(), err, s.kind)
		}
	}
	if got := readFile(t, x); got != "again\n" {
		t.Errorf("x reads %q", got)
	}
}
