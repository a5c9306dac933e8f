//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

func lstatHost(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func tsTime(ts unix.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }

// Lchown and Lutimes change a symbolic link itself, never its target (one
// outside the box included), a dangling link too; a missing name is
// ENOENT, and a path through a symlink out of the box is Unsafe.
func TestLinkAttrs(t *testing.T) {
	ctx := context.Background()
	p := New(t.TempDir())
	b := newBox(t, p, providers.Spec{})
	ws := b.Workspace()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(ws, "target")
	if err := os.WriteFile(target, []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2003, 3, 3, 0, 0, 0, 0, time.UTC)
	for _, f := range []string{target, secret} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	links := map[string]string{
		"link":         "target",
		"sub/dangling": "missing",
		"out":          secret, // a link pointing out of the box
		"outdir":       outside,
	}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]unix.Stat_t{target: lstatHost(t, target), secret: lstatHost(t, secret)}

	at := time.Date(2001, 1, 1, 0, 0, 0, 500, time.UTC)
	mt := time.Date(2002, 2, 2, 2, 2, 2, 123456789, time.UTC)
	for _, name := range []string{"link", "sub/dangling", "out"} {
		p := filepath.Join(ws, name)
		if err := b.Lutimes(ctx, p, at, mt); err != nil {
			t.Fatalf("Lutimes %s: %v", name, err)
		}
		if st := lstatHost(t, p); !tsTime(st.Atim).Equal(at) || !tsTime(st.Mtim).Equal(mt) || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Errorf("%s after Lutimes: atime %v mtime %v, want %v %v", name, tsTime(st.Atim), tsTime(st.Mtim), at, mt)
		}
	}
	mt2 := time.Date(2010, 10, 10, 0, 0, 0, 7, time.UTC)
	if err := b.Lutimes(ctx, filepath.Join(ws, "link"), time.Time{}, mt2); err != nil {
		t.Fatal(err)
	}
	if st := lstatHost(t, filepath.Join(ws, "link")); !tsTime(st.Atim).Equal(at) || !tsTime(st.Mtim).Equal(mt2) {
		t.Errorf("link after Lutimes of mtime alone: atime %v mtime %v, want %v %v", tsTime(st.Atim), tsTime(st.Mtim), at, mt2)
	}
	// The workspace itself (no parent inside the root).
	if err := b.Lutimes(ctx, ws, time.Time{}, mt); err != nil {
		t.Errorf("Lutimes of the workspace: %v", err)
	} else if st := lstatHost(t, ws); !tsTime(st.Mtim).Equal(mt) {
		t.Errorf("workspace mtime %v, want %v", tsTime(st.Mtim), mt)
	}

	if os.Geteuid() == 0 {
		if err := b.Lchown(ctx, filepath.Join(ws, "link"), 4321, -1); err != nil {
			t.Fatal(err)
		}
		if st := lstatHost(t, filepath.Join(ws, "link")); st.Uid != 4321 || st.Gid != before[target].Gid {
			t.Errorf("link after Lchown(4321, -1): %d:%d", st.Uid, st.Gid)
		}
		for _, name := range []string{"sub/dangling", "out"} {
			if err := b.Lchown(ctx, filepath.Join(ws, name), -1, 4322); err != nil {
				t.Fatalf("Lchown %s: %v", name, err)
			}
			if st := lstatHost(t, filepath.Join(ws, name)); st.Gid != 4322 {
				t.Errorf("%s after Lchown(-1, 4322): gid %d", name, st.Gid)
			}
		}
	} else if err := b.Lchown(ctx, filepath.Join(ws, "link"), 0, 0); !providers.IsCode(err, providers.Permission) {
		t.Errorf("Lchown to root as a user: %v, want EPERM", err)
	}

	for f, st := range before {
		now := lstatHost(t, f)
		if now.Uid != st.Uid || now.Gid != st.Gid || now.Mtim != st.Mtim || now.Atim != st.Atim {
			t.Errorf("%s changed: %d:%d mtime %v, was %d:%d %v", f, now.Uid, now.Gid, tsTime(now.Mtim), st.Uid, st.Gid, tsTime(st.Mtim))
		}
	}

	missing := filepath.Join(ws, "nope")
	if err := b.Lutimes(ctx, missing, at, mt); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Lutimes of a missing name: %v, want ENOENT", err)
	}
	if err := b.Lchown(ctx, missing, -1, -1); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Lchown of a missing name: %v, want ENOENT", err)
	}
	// Through a symlink that leads out, or a path outside: refused.
	for what, p := range map[string]string{
		"through a symlink out": filepath.Join(ws, "outdir", "secret"),
		"outside the box":       secret,
	} {
		if err := b.Lutimes(ctx, p, at, mt); !providers.IsCode(err, providers.Unsafe) {
			t.Errorf("Lutimes %s: %v, want Unsafe", what, err)
		}
		if err := b.Lchown(ctx, p, -1, 4323); !providers.IsCode(err, providers.Unsafe) {
			t.Errorf("Lchown %s: %v, want Unsafe", what, err)
		}
	}
	if st := lstatHost(t, secret); st.Mtim != before[secret].Mtim || st.Gid != before[secret].Gid {
		t.Errorf("a file outside the box changed: gid %d mtime %v", st.Gid, tsTime(st.Mtim))
	}
}
