package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The calls that resolve their path with openat2 keep os.Root's
// confinement: through a symlink that leads out (absolute, or up past
// the workspace, in the middle of the path or as the parent) every one is
// Unsafe and nothing outside changes; a symlink within the box is
// followed; and the fast path is on where the kernel has openat2. The
// same holds with openat2 off (a kernel before 5.6, a seccomp filter).
func TestBeneathConfined(t *testing.T) {
	t.Run("openat2", testBeneathConfined)
	t.Run("os.Root", func(t *testing.T) {
		was := openat2Off.Swap(true)
		defer openat2Off.Store(was)
		testBeneathConfined(t)
	})
}

func testBeneathConfined(t *testing.T) {
	ctx := context.Background()
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	outside := t.TempDir()
	ws := b.Workspace()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(outside, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(ws, outside)
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": outside, "rel": rel, "deep": "d/../" + rel, "back": "../work/d"} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(ws, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(ws, "in")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if b.rootDir() == nil && !openat2Off.Load() {
		t.Fatal("no directory for openat2, yet openat2 is not off")
	}
	if openat2Off.Load() {
		t.Log("openat2 is off here: os.Root resolves every path")
	}

	for _, l := range []string{"abs", "rel", "deep", "back"} {
		want := func(what string, err error) {
			t.Helper()
			if !providers.IsCode(err, providers.Unsafe) {
				t.Errorf("%s through %s: %v, want Unsafe", what, l, err)
			}
		}
		in := func(n string) string { return filepath.Join(ws, l, n) }
		_, err := b.Lstat(ctx, in("secret"))
		want("Lstat", err)
		_, err = b.Stat(ctx, in("secret"))
		want("Stat", err)
		want("Create", b.Create(ctx, in("planted"), 0o644, true))
		want("Create over", b.Create(ctx, in("secret"), 0o644, false))
		_, err = b.CreateStat(ctx, in("planted"), 0o644, true)
		want("CreateStat", err)
		want("Mkdir", b.Mkdir(ctx, in("newdir"), 0o755))
		want("Remove", b.Remove(ctx, in("secret")))
		want("Rmdir", b.Rmdir(ctx, in("dir")))
		want("Rename from", b.Rename(ctx, in("secret"), filepath.Join(ws, "stolen")))
		want("Rename to", b.Rename(ctx, filepath.Join(ws, "d"), in("moved")))
		want("Lutimes", b.Lutimes(ctx, in("secret"), time.Unix(1, 0), time.Unix(1, 0)))
		want("Chmod", b.Chmod(ctx, in("secret"), 0o777))
		want("Chown", b.Chown(ctx, in("secret"), -1, -1))
		want("Utimes", b.Utimes(ctx, in("secret"), time.Unix(1, 0), time.Unix(1, 0)))
		want("Lchown", b.Lchown(ctx, in("secret"), -1, -1))
		want("Truncate", b.Truncate(ctx, in("secret"), 0))
		_, err = b.WriteAt(ctx, in("secret"), []byte("x"), 0)
		want("WriteAt", err)
		_, err = b.ReadDir(ctx, filepath.Join(ws, l))
		want("ReadDir", err)
		_, err = b.ReadFile(ctx, in("secret"))
		want("ReadFile", err)
		_, err = b.OpenHost(ctx, in("secret"))
		want("OpenHost", err)
		_, _, err = b.OpenHostWrite(ctx, in("secret"), os.O_RDWR, 0)
		want("OpenHostWrite", err)
		_, _, err = b.OpenHostWrite(ctx, in("planted"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		want("OpenHostWrite O_CREAT", err)
		_, err = b.WriteFileStat(ctx, in("planted"), strings.NewReader("x"), providers.WriteOptions{Perm: 0o644})
		want("WriteFileStat", err)
		// The link itself is the box's: its own attributes are no escape.
		if fi, err := b.Lstat(ctx, filepath.Join(ws, l)); err != nil || !fi.IsSymlink() {
			t.Errorf("Lstat of the link %s: %+v, %v", l, fi, err)
		}
	}
	ents, _ := os.ReadDir(outside)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "dir,secret" {
		t.Errorf("outside now holds %v", names)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "secret")); string(data) != "host" {
		t.Errorf("outside secret now %q", data)
	}
	if fi, _ := os.Stat(filepath.Join(outside, "secret")); fi.Mode().Perm() != 0o644 {
		t.Errorf("outside secret's mode now %v", fi.Mode())
	}

	// Within the box a symlink is followed, to the middle of a path too.
	if err := b.Create(ctx, filepath.Join(ws, "in", "f"), 0o640, true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "d", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("create through in/: %v %v", fi, err)
	}
	if err := b.Mkdir(ctx, filepath.Join(ws, "in", "sub"), 0o705); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "d", "sub")); err != nil || fi.Mode().Perm() != 0o705 {
		t.Errorf("mkdir through in/ (mode exactly, no umask): %v %v", fi, err)
	}
	if fi, err := b.Stat(ctx, filepath.Join(ws, "in")); err != nil || !fi.IsDir() {
		t.Errorf("Stat of in: %+v %v", fi, err)
	}
	if err := b.Rename(ctx, filepath.Join(ws, "in", "f"), filepath.Join(ws, "in", "g")); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, filepath.Join(ws, "in", "g")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lstat(ctx, filepath.Join(ws, "in", "g")); !providers.IsCode(err, providers.NotFound) {
		if e, ok := providers.ErrnoOf(err); !ok || e != syscall.ENOENT {
			t.Errorf("Lstat after Remove: %v, want ENOENT", err)
		}
	}
}

// Chmod, Chown and Utimes take the three-call path (changeBeneath) for a
// name that is neither a symlink nor a file with other names, and change
// it as the os.Root would: the mode's special bits, a zero time left
// alone, a missing name NotFound. A symlink within the box and a file
// with another name go through the os.Root, which follows the one and
// judges the other.
func TestChangeBeneath(t *testing.T) {
	ctx := context.Background()
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	ws := b.Workspace()
	if err := os.MkdirAll(filepath.Join(ws, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(ws, "d", "e", "f")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("e/f", filepath.Join(ws, "d", "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(ws, "a"), filepath.Join(ws, "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if b.rootDir() == nil {
		t.Skip("no openat2 here: every change goes through the os.Root")
	}
	noop := func(int, string) error { return nil }
	for rel, fast := range map[string]bool{"d/e/f": true, "d/e": true, "d/l": false, "b": false} {
		if ok, err := b.changeBeneath("test", filepath.Join(ws, rel), rel, noop); ok != fast || err != nil {
			t.Errorf("changeBeneath(%s): ok %v, %v; want ok %v", rel, ok, err, fast)
		}
	}

	lstat := func(name string) *syscall.Stat_t {
		t.Helper()
		fi, err := os.Lstat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t)
	}
	if err := b.Chmod(ctx, f, 0o640|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if m := lstat(f).Mode & 0o7777; m != 0o3640 {
		t.Errorf("mode after Chmod: %o, want 3640", m)
	}
	if err := b.Chmod(ctx, filepath.Join(ws, "d", "l"), 0o604); err != nil {
		t.Fatal(err)
	}
	if m := lstat(f).Mode & 0o7777; m != 0o604 {
		t.Errorf("mode after Chmod through the link: %o, want 604", m)
	}
	if m := lstat(filepath.Join(ws, "d", "l")).Mode; m&syscall.S_IFMT != syscall.S_IFLNK {
		t.Errorf("the link is now %o", m)
	}
	atime := time.Unix(lstat(f).Atim.Unix())
	if err := b.Utimes(ctx, f, time.Time{}, time.Unix(1000, 5)); err != nil {
		t.Fatal(err)
	}
	st := lstat(f)
	if st.Mtim.Sec != 1000 || st.Mtim.Nsec != 5 || !time.Unix(st.Atim.Unix()).Equal(atime) {
		t.Errorf("times after Utimes(zero, 1000.000000005): atime %v mtime %v, want atime %v", time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix()), atime)
	}
	uid, gid := -1, 4321
	if os.Geteuid() != 0 {
		gid = -1
	}
	if err := b.Chown(ctx, f, uid, gid); err != nil {
		t.Fatal(err)
	}
	if st := lstat(f); gid >= 0 && st.Gid != uint32(gid) {
		t.Errorf("gid after Chown: %d, want %d", st.Gid, gid)
	}
	if err := b.Chmod(ctx, filepath.Join(ws, "b"), 0o644); err != nil {
		t.Errorf("Chmod of a file with another name in the box: %v", err)
	}
	if m := lstat(filepath.Join(ws, "a")).Mode & 0o7777; m != 0o644 {
		t.Errorf("the other name's mode: %o, want 644", m)
	}
	missing := filepath.Join(ws, "d", "missing")
	for what, err := range map[string]error{
		"Chmod":  b.Chmod(ctx, missing, 0o644),
		"Chown":  b.Chown(ctx, missing, -1, -1),
		"Utimes": b.Utimes(ctx, missing, time.Unix(1, 0), time.Unix(1, 0)),
		"Lchown": b.Lchown(ctx, missing, -1, -1),
	} {
		if !providers.IsCode(err, providers.NotFound) {
			t.Errorf("%s of a missing name: %v, want NotFound", what, err)
		}
	}
}
