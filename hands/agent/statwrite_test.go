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
