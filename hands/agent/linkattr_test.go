//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// lstatT is the host's own lstat of p: what the box sees, independent of
// the agent.
func lstatT(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func tsTime(ts unix.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }

// Lchown and Lutimes change a symbolic link itself, never its target, a
// dangling link included, each in one round trip; a missing name is ENOENT.
func TestLinkAttrs(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "link")
	dangling := filepath.Join(dir, "dangling")
	if err := os.WriteFile(target, []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2003, 3, 3, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(target, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing", dangling); err != nil {
		t.Fatal(err)
	}
	targetBefore := lstatT(t, target)

	trips := func(what string, fn func() error) {
		t.Helper()
		before := c.RoundTrips()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := c.RoundTrips() - before; got != 1 {
			t.Errorf("%s took %d round trips, want 1", what, got)
		}
	}

	at := time.Date(2001, 1, 1, 0, 0, 0, 500, time.UTC)
	mt := time.Date(2002, 2, 2, 2, 2, 2, 123456789, time.UTC)
	for _, p := range []string{link, dangling} {
		trips("Lutimes "+filepath.Base(p), func() error { return c.Lutimes(ctx, p, at, mt) })
		st := lstatT(t, p)
		if !tsTime(st.Atim).Equal(at) || !tsTime(st.Mtim).Equal(mt) {
			t.Errorf("%s after Lutimes: atime %v mtime %v, want %v %v", p, tsTime(st.Atim), tsTime(st.Mtim), at, mt)
		}
	}
	// A zero time keeps that one.
	mt2 := time.Date(2010, 10, 10, 0, 0, 0, 7, time.UTC)
	trips("Lutimes mtime only", func() error { return c.Lutimes(ctx, link, time.Time{}, mt2) })
	if st := lstatT(t, link); !tsTime(st.Atim).Equal(at) || !tsTime(st.Mtim).Equal(mt2) {
		t.Errorf("link after Lutimes of mtime alone: atime %v mtime %v, want %v %v", tsTime(st.Atim), tsTime(st.Mtim), at, mt2)
	}
	at2 := time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC) // before the epoch
	trips("Lutimes atime only", func() error { return c.Lutimes(ctx, link, at2, time.Time{}) })
	if st := lstatT(t, link); !tsTime(st.Atim).Equal(at2) || !tsTime(st.Mtim).Equal(mt2) {
		t.Errorf("link after Lutimes of atime alone: atime %v mtime %v, want %v %v", tsTime(st.Atim), tsTime(st.Mtim), at2, mt2)
	}
	trips("Lutimes of neither", func() error { return c.Lutimes(ctx, link, time.Time{}, time.Time{}) })
	if st := lstatT(t, link); !tsTime(st.Atim).Equal(at2) || !tsTime(st.Mtim).Equal(mt2) {
		t.Errorf("Lutimes of neither changed the link: atime %v mtime %v", tsTime(st.Atim), tsTime(st.Mtim))
	}
	// The agent's own Lstat says the same (it reads the link, which may
	// set the link's atime, so it comes last).
	if fi, err := c.Lstat(ctx, link); err != nil || !fi.Mtime.Equal(mt2) || !fi.IsSymlink() || fi.Target != "target" {
		t.Errorf("agent Lstat of the link: %v %+v", err, fi)
	}

	if os.Geteuid() == 0 {
		trips("Lchown uid", func() error { return c.Lchown(ctx, link, 4321, -1) })
		if st := lstatT(t, link); st.Uid != 4321 || st.Gid != targetBefore.Gid {
			t.Errorf("link after Lchown(4321, -1): %d:%d, want 4321:%d", st.Uid, st.Gid, targetBefore.Gid)
		}
		trips("Lchown gid of a dangling link", func() error { return c.Lchown(ctx, dangling, -1, 4322) })
		if st := lstatT(t, dangling); st.Gid != 4322 || st.Uid != targetBefore.Uid {
			t.Errorf("dangling after Lchown(-1, 4322): %d:%d", st.Uid, st.Gid)
		}
	} else {
		err := c.Lchown(ctx, link, 0, 0)
		if errnoString(err) != "errno EPERM" || !providers.IsCode(err, providers.Permission) {
			t.Errorf("Lchown to root as a user: %v, want EPERM", err)
		}
	}

	// The target is untouched: owner, times.
	targetAfter := lstatT(t, target)
	if targetAfter.Uid != targetBefore.Uid || targetAfter.Gid != targetBefore.Gid ||
		targetAfter.Mtim != targetBefore.Mtim || targetAfter.Atim != targetBefore.Atim {
		t.Errorf("the target changed: %d:%d mtime %v atime %v, was %d:%d %v %v",
			targetAfter.Uid, targetAfter.Gid, tsTime(targetAfter.Mtim), tsTime(targetAfter.Atim),
			targetBefore.Uid, targetBefore.Gid, tsTime(targetBefore.Mtim), tsTime(targetBefore.Atim))
	}

	missing := filepath.Join(dir, "nope")
	for what, err := range map[string]error{
		"Lchown":  c.Lchown(ctx, missing, 1, 1),
		"Lutimes": c.Lutimes(ctx, missing, at, mt),
	} {
		if !providers.IsCode(err, providers.NotFound) || errnoString(err) != "errno ENOENT" {
			t.Errorf("%s of a missing name: %v, want ENOENT", what, err)
		}
	}
	if err := c.Lutimes(ctx, ReservedDir+"/lutimes", at, mt); !providers.IsCode(err, providers.Unsupported) {
		t.Errorf("Lutimes under the reserved directory: %v, want Unsupported", err)
	}
	if err := c.Lchown(ctx, link, -2, 0); !providers.IsCode(err, providers.Invalid) {
		t.Errorf("Lchown to uid -2: %v, want Invalid (EINVAL)", err)
	}
}
