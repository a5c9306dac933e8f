package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The mutations that answer with attributes take one round trip each and
// answer exactly what Lstat then says; WriteFileStat's attributes are set.
func TestMutationsAnswerWithAttributes(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()

	same := func(what string, got providers.FileInfo, p string) {
		t.Helper()
		want, err := c.Lstat(ctx, p)
		if err != nil {
			t.Fatalf("%s: Lstat: %v", what, err)
		}
		if infoString(got) != infoString(want) || !got.Mtime.Equal(want.Mtime) || got.Ino != want.Ino || !got.Ctime.Equal(want.Ctime) {
			t.Fatalf("%s answered\n  %s mtime=%v ino=%d\nLstat says\n  %s mtime=%v ino=%d",
				what, infoString(got), got.Mtime, got.Ino, infoString(want), want.Mtime, want.Ino)
		}
	}
	trips := func(what string, want int64, fn func()) {
		t.Helper()
		before := c.RoundTrips()
		fn()
		if got := c.RoundTrips() - before; got != want {
			t.Errorf("%s took %d round trips, want %d", what, got, want)
		}
	}

	d := filepath.Join(dir, "d")
	var fi providers.FileInfo
	var err error
	trips("MkdirStat", 1, func() { fi, err = c.MkdirStat(ctx, d, 0o750) })
	if err != nil || !fi.IsDir() || fi.Name != "d" {
		t.Fatalf("MkdirStat: %v %+v", err, fi)
	}
	same("MkdirStat", fi, d)
	if _, err := c.MkdirStat(ctx, d, 0o750); errnoString(err) != "errno EEXIST" {
		t.Fatalf("MkdirStat over a directory: %v, want EEXIST", err)
	}

	f := filepath.Join(d, "f")
	trips("CreateStat", 1, func() { fi, err = c.CreateStat(ctx, f, 0o640, true) })
	if err != nil || !fi.IsRegular() || fi.Size != 0 {
		t.Fatalf("CreateStat: %v %+v", err, fi)
	}
	same("CreateStat", fi, f)
	if _, err := c.CreateStat(ctx, f, 0o640, true); errnoString(err) != "errno EEXIST" {
		t.Fatalf("exclusive CreateStat of an existing file: %v, want EEXIST", err)
	}

	mtime := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	atime := time.Date(2002, 2, 3, 4, 5, 6, 123456789, time.UTC)
	for _, size := range []int{4096, inlineMax + 1000} {
		data := bytes.Repeat([]byte{'x'}, size)
		o := providers.WriteOptions{Perm: 0o711 | os.ModeSetuid, ForceMode: true, Chown: true, UID: os.Getuid(), GID: os.Getgid(), Atime: atime, Mtime: mtime}
		want := int64(1)
		if size > inlineMax {
			want = 4 // OPEN, WRITE, CLOSE answering the attributes, and a FSTAT pkg/sftp's ReadFrom asks
		}
		trips("WriteFileStat", want, func() { fi, err = c.WriteFileStat(ctx, f, bytes.NewReader(data), o) })
		if err != nil {
			t.Fatalf("WriteFileStat of %d bytes: %v", size, err)
		}
		same("WriteFileStat", fi, f)
		if fi.Size != int64(size) || !fi.Mtime.Equal(mtime) || !fi.Atime.Equal(atime) {
			t.Errorf("size %d: answered size=%d mtime=%v atime=%v", size, fi.Size, fi.Mtime, fi.Atime)
		}
		if fi.Mode != 0o711|os.ModeSetuid {
			t.Errorf("size %d: mode %v, want -rwx--x--x with setuid forced over the file's 0640", size, fi.Mode)
		}
		os.Chmod(f, 0o640)
	}
	// Without ForceMode an existing file keeps its mode, as WriteFile.
	fi, err = c.WriteFileStat(ctx, f, bytes.NewReader([]byte("k")), providers.WriteOptions{Perm: 0o777})
	if err != nil || fi.Mode != 0o640 || fi.Size != 1 {
		t.Fatalf("WriteFileStat without ForceMode: %v mode=%v size=%d, want 0640 kept", err, fi.Mode, fi.Size)
	}
	if ents, _ := os.ReadDir(d); len(ents) != 1 {
		t.Errorf("debris left: %v", ents)
	}
}

// An exclusive WriteFileStat takes only a free name: over a file it is
// EEXIST and the file is left as it was, inline or streamed.
func TestWriteFileStatExclusive(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	for _, size := range []int{10, inlineMax + 1000} {
		f := filepath.Join(dir, "f")
		data := bytes.Repeat([]byte{'a'}, size)
		o := providers.WriteOptions{Perm: 0o644, Exclusive: true}
		if _, err := c.WriteFileStat(ctx, f, bytes.NewReader(data), o); err != nil {
			t.Fatalf("exclusive write of a new file, %d bytes: %v", size, err)
		}
		_, err := c.WriteFileStat(ctx, f, bytes.NewReader(bytes.Repeat([]byte{'b'}, size)), o)
		if errnoString(err) != "errno EEXIST" {
			t.Errorf("exclusive write over a file, %d bytes: %v, want EEXIST", size, err)
		}
		if b, _ := os.ReadFile(f); !bytes.Equal(b, data) {
			t.Errorf("%d bytes: the refused write changed the file", size)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("%d bytes: %d names left in the directory", size, len(ents))
		}
		os.Remove(f)
	}
}

// A rename answers, in one round trip, what Lstat then says of the new
// name and of the directories it changed: the new name's, and the old
// name's when it is another; its errors are rename(2)'s.
func TestRenameAnswersWithAttributes(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "g"), []byte("yy"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got providers.FileInfo, p string) {
		t.Helper()
		want, err := c.Lstat(ctx, p)
		if err != nil {
			t.Fatalf("%s: Lstat: %v", what, err)
		}
		if infoString(got) != infoString(want) || !got.Mtime.Equal(want.Mtime) || !got.Ctime.Equal(want.Ctime) || got.Ino != want.Ino {
			t.Errorf("%s answered %s ctime=%v, Lstat says %s ctime=%v", what, infoString(got), got.Ctime, infoString(want), want.Ctime)
		}
	}

	before := c.RoundTrips()
	fi, dirs, err := c.RenameStat(ctx, filepath.Join(a, "f"), filepath.Join(a, "h"))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.RoundTrips() - before; n != 1 {
		t.Errorf("a rename took %d round trips", n)
	}
	if fi.Name != "h" || len(dirs) != 1 {
		t.Fatalf("rename in one directory: %+v, %d directories", fi, len(dirs))
	}
	check("the new name", fi, filepath.Join(a, "h"))
	check("its directory", dirs[0], a)

	fi, dirs, err = c.RenameStat(ctx, filepath.Join(a, "g"), filepath.Join(b, "h"))
	if err != nil || len(dirs) != 2 {
		t.Fatalf("rename across directories: %v, %d directories", err, len(dirs))
	}
	check("the new name", fi, filepath.Join(b, "h"))
	check("the new name's directory", dirs[0], b)
	check("the old name's directory", dirs[1], a)

	if _, _, err := c.RenameStat(ctx, filepath.Join(a, "missing"), filepath.Join(a, "x")); errnoString(err) != "errno ENOENT" {
		t.Errorf("rename of a missing name: %v, want ENOENT", err)
	}
	if _, _, err := c.RenameStat(ctx, a, filepath.Join(a, "inside")); errnoString(err) != "errno EINVAL" {
		t.Errorf("rename of a directory into itself: %v, want EINVAL", err)
	}
}
