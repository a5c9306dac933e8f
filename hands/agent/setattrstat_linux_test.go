package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pkg/sftp"

	"github.com/boxfs/boxfs/providers"
)

// sameAsLstat fails unless got is what the host's own Lstat of p says,
// change time and inode included: what the box's watch then reports.
func sameAsLstat(t *testing.T, c *Client, what string, got providers.FileInfo, p string) {
	t.Helper()
	want, err := c.Lstat(bg(t), p)
	if err != nil {
		t.Fatalf("%s: Lstat: %v", what, err)
	}
	if infoString(got) != infoString(want) || !got.Mtime.Equal(want.Mtime) || !got.Ctime.Equal(want.Ctime) || got.Ino != want.Ino {
		t.Errorf("%s answered\n  %s mtime=%v ctime=%v ino=%d\nLstat says\n  %s mtime=%v ctime=%v ino=%d",
			what, infoString(got), got.Mtime, got.Ctime, got.Ino, infoString(want), want.Mtime, want.Ctime, want.Ino)
	}
}

// oneTrip fails unless fn takes exactly one round trip.
func oneTrip(t *testing.T, c *Client, what string, fn func() error) {
	t.Helper()
	before := c.RoundTrips()
	if err := fn(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if n := c.RoundTrips() - before; n != 1 {
		t.Errorf("%s took %d round trips, want 1", what, n)
	}
}

// chmod, chown and utimes answer, in one round trip each, what Lstat then
// says of the file, its change time among them; a chmod of a symlink
// changes its target; errors are the system calls'.
func TestSetattrAnswersWithAttributes(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f, filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	var fi providers.FileInfo
	var err error

	oneTrip(t, c, "ChmodStat", func() error { fi, err = c.ChmodStat(ctx, f, 0o640|os.ModeSticky); return err })
	if fi.Name != "f" || fi.Mode.Perm() != 0o640 || fi.Mode&os.ModeSticky == 0 || fi.Nlink != 2 {
		t.Errorf("ChmodStat: %s", infoString(fi))
	}
	sameAsLstat(t, c, "ChmodStat", fi, f)

	oneTrip(t, c, "ChownStat", func() error { fi, err = c.ChownStat(ctx, f, -1, os.Getgid()); return err })
	sameAsLstat(t, c, "ChownStat", fi, f)
	if fi.Mode&os.ModeSticky == 0 {
		t.Errorf("ChownStat took the sticky bit: %s", infoString(fi))
	}

	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	before := lstatT(t, f)
	oneTrip(t, c, "UtimesStat", func() error { fi, err = c.UtimesStat(ctx, f, time.Time{}, old); return err })
	sameAsLstat(t, c, "UtimesStat", fi, f)
	if !fi.Mtime.Equal(old) || !fi.Atime.Equal(tsTime(before.Atim)) {
		t.Errorf("UtimesStat(zero, %v): mtime %v atime %v, want atime kept %v", old, fi.Mtime, fi.Atime, tsTime(before.Atim))
	}

	link := filepath.Join(dir, "link")
	if err := os.Symlink("f", link); err != nil {
		t.Fatal(err)
	}
	if fi, err = c.ChmodStat(ctx, link, 0o604); err != nil || !fi.IsSymlink() {
		t.Fatalf("ChmodStat of a symlink: %v %s", err, infoString(fi))
	}
	sameAsLstat(t, c, "ChmodStat of a symlink", fi, link)
	if m := lstatT(t, f).Mode & 0o7777; m != 0o604 {
		t.Errorf("ChmodStat of a symlink left its target %o, want 0604", m)
	}

	if _, err := c.ChmodStat(ctx, filepath.Join(dir, "missing"), 0o600); errnoString(err) != "errno ENOENT" {
		t.Errorf("ChmodStat of a missing name: %v, want ENOENT", err)
	}
	if _, err := c.ChownStat(ctx, f, -2, -1); errnoString(err) != "errno EINVAL" {
		t.Errorf("ChownStat to uid -2: %v, want EINVAL", err)
	}
}

// An unlink answers, in one round trip, the attributes of the file as its
// other names show them after it (one link fewer, the unlink's change
// time); of the last name, Nlink 0. A symlink goes, not its target; a
// directory is EISDIR and a missing name ENOENT, removing nothing.
func TestRemoveStatAnswersOtherNames(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	f, tmp := filepath.Join(dir, "f"), filepath.Join(dir, "tmp")
	if err := os.WriteFile(tmp, []byte("object"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(tmp, f); err != nil { // as git names each object
		t.Fatal(err)
	}
	var fi providers.FileInfo
	var err error
	oneTrip(t, c, "RemoveStat", func() error { fi, err = c.RemoveStat(ctx, tmp); return err })
	if fi.Name != "tmp" || fi.Nlink != 1 || fi.Size != 6 {
		t.Errorf("RemoveStat of one of two names: %s", infoString(fi))
	}
	if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
		t.Errorf("RemoveStat left the name: %v", err)
	}
	fi.Name = "f"
	sameAsLstat(t, c, "RemoveStat (the other name)", fi, f)

	link := filepath.Join(dir, "link")
	if err := os.Symlink("f", link); err != nil {
		t.Fatal(err)
	}
	if fi, err = c.RemoveStat(ctx, link); err != nil || !fi.IsSymlink() || fi.Nlink != 0 {
		t.Errorf("RemoveStat of a symlink: %v %s", err, infoString(fi))
	}
	if fi, err = c.RemoveStat(ctx, f); err != nil || fi.Nlink != 0 || !fi.IsRegular() {
		t.Errorf("RemoveStat of the last name: %v %s", err, infoString(fi))
	}
	if _, err := os.Lstat(f); !os.IsNotExist(err) {
		t.Errorf("RemoveStat left the last name: %v", err)
	}

	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveStat(ctx, sub); errnoString(err) != "errno EISDIR" {
		t.Errorf("RemoveStat of a directory: %v, want EISDIR", err)
	}
	if _, err := os.Lstat(sub); err != nil {
		t.Errorf("RemoveStat of a directory removed it: %v", err)
	}
	if _, err := c.RemoveStat(ctx, filepath.Join(dir, "missing")); errnoString(err) != "errno ENOENT" {
		t.Errorf("RemoveStat of a missing name: %v, want ENOENT", err)
	}
}

// olderAgent serves as an agent from before opSetattr and opUnlinkStat:
// it answers them as it answered any operation it did not know.
type olderAgent struct{ *handlers }

func (o olderAgent) Filecmd(r *sftp.Request) error {
	if op, _, ok, _ := parseSynthetic(r.Filepath); ok && (op == opSetattr || op == opUnlinkStat) {
		return fmt.Errorf("agent: no operation %q", op)
	}
	return o.handlers.Filecmd(r)
}

// An agent without the operations answers them Unsupported, having
// changed nothing, and the plain calls still work: the caller falls back.
func TestOlderAgentLacksStatAnswers(t *testing.T) {
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	h := &handlers{atomics: map[string]*atomicFile{}, batches: map[string]*batchFile{}}
	rs := sftp.NewRequestServer(stream{sr, sw},
		sftp.Handlers{FileGet: h, FilePut: h, FileCmd: olderAgent{h}, FileList: h},
		sftp.WithRSMaxTxPacket(maxPacket))
	go func() {
		rs.Serve()
		sw.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(ctx, cr, cw, ClientOptions{Box: "older"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); rs.Close() })

	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for what, fn := range map[string]func() error{
		"ChmodStat":  func() error { _, err := c.ChmodStat(ctx, f, 0o644); return err },
		"ChownStat":  func() error { _, err := c.ChownStat(ctx, f, -1, os.Getgid()); return err },
		"UtimesStat": func() error { _, err := c.UtimesStat(ctx, f, time.Time{}, time.Unix(1, 0)); return err },
		"RemoveStat": func() error { _, err := c.RemoveStat(ctx, f); return err },
	} {
		if err := fn(); !providers.IsCode(err, providers.Unsupported) {
			t.Errorf("%s of an older agent: %v, want Unsupported", what, err)
		}
	}
	st := lstatT(t, f)
	if st.Mode&0o7777 != 0o600 || st.Mtim.Sec == 1 {
		t.Errorf("the older agent's file changed: mode %o mtime %d", st.Mode&0o7777, st.Mtim.Sec)
	}
	if err := c.Chmod(ctx, f, 0o644); err != nil {
		t.Fatalf("Chmod of an older agent: %v", err)
	}
	if err := c.Remove(ctx, f); err != nil {
		t.Fatalf("Remove of an older agent: %v", err)
	}
}
