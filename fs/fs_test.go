package fs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/boxes"
	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve mounts, through the kernel on a temporary mount point, a fresh
// namespace over a Manager opened with opts (on a temporary state
// directory, quiet unless -v), and returns the mount point and the
// Manager. The boxes are pushed and the mount ended with the test.
func serve(t *testing.T, opts boxes.Options) (string, *boxes.Manager) {
	t.Helper()
	return serveWith(t, opts, boxfs.MountOptions{})
}

// serveWith is serve with the kernel-facing options mo.
func serveWith(t *testing.T, opts boxes.Options, mo boxfs.MountOptions) (string, *boxes.Manager) {
	t.Helper()
	mnt, m, _ := serveFS(t, opts, mo)
	return mnt, m
}

// serveFS is serveWith that also returns the namespace served.
func serveFS(t *testing.T, opts boxes.Options, mo boxfs.MountOptions) (string, *boxes.Manager, *boxfs.FS) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			opts.Logger = slog.Default()
		}
	}
	m, err := boxes.New(opts)
	require.NoError(t, err)
	mnt := t.TempDir()
	mo.Debug = mo.Debug || testing.Verbose() && os.Getenv("BOXFS_FUSE_DEBUG") != ""
	f := boxfs.New(m)
	server, err := f.Mount(mnt, mo)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		assert.NoError(t, server.Unmount())
	})
	return mnt, m, f
}

// mount serves a fresh namespace over the local provider and returns the
// mount point.
func mount(t *testing.T) string {
	t.Helper()
	return mountWith(t, boxfs.MountOptions{})
}

// mountWith is mount with the kernel-facing options mo.
func mountWith(t *testing.T, mo boxfs.MountOptions) string {
	t.Helper()
	mnt, _ := mountFS(t, mo)
	return mnt
}

// mountFS is mountWith that also returns the namespace served.
func mountFS(t *testing.T, mo boxfs.MountOptions) (string, *boxfs.FS) {
	t.Helper()
	lp := local.New(t.TempDir())
	mnt, _, f := serveFS(t, boxes.Options{
		DefaultProvider: "local",
		OpenProvider: func(name string) (providers.Provider, error) {
			if name != "local" {
				return nil, providers.Errorf(providers.NotFound, "test", "no provider %q", name)
			}
			return lp, nil
		},
		AttrTimeout: time.Second,
		OpTimeout:   10 * time.Second,
	}, mo)
	t.Cleanup(func() {
		// Destroy what the test made (local boxes run watchdogs).
		bs, _ := lp.List(context.Background(), nil)
		for _, b := range bs {
			b.Destroy(context.Background())
		}
	})
	return mnt, f
}

func writeFile(t *testing.T, name, data string) error {
	t.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(data))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err, "read %s", name)
	return string(b)
}

// run writes a command line to NAME/exec and reads its output to the end,
// on the same open file.
func run(t *testing.T, mnt, box, line string) string {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(mnt, box, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write([]byte(line + "\n"))
	require.NoError(t, err, "exec %q", line)
	out, err := io.ReadAll(f)
	require.NoError(t, err, "exec %q: read", line)
	return string(out)
}

// readErr is the text of the root's err file, for a failure's message.
func readErr(mnt string) string {
	b, _ := os.ReadFile(filepath.Join(mnt, "err"))
	return string(b)
}

func newBox(t *testing.T, mnt, name string) string {
	t.Helper()
	err := writeFile(t, filepath.Join(mnt, "ctl"), "new "+name+"\n")
	require.NoError(t, err, "new %s (err: %s)", name, readErr(mnt))
	return filepath.Join(mnt, name)
}

func TestRootCtl(t *testing.T) {
	mnt := mount(t)
	newBox(t, mnt, "a")
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "b"), 0o755), "mkdir b")
	listing := readFile(t, filepath.Join(mnt, "ctl"))
	lines := strings.Split(strings.TrimSpace(listing), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "a local ") || !strings.HasSuffix(lines[0], " ready") || !strings.HasPrefix(lines[1], "b local ") {
		t.Errorf("root ctl reads %q", listing)
	}
	ents, err := os.ReadDir(mnt)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "a b ctl err" {
		t.Errorf("root lists %v", names)
	}
	// A bad verb fails the whole write with EINVAL, and says why in err.
	err = writeFile(t, filepath.Join(mnt, "ctl"), "new c\nfrobnicate d\n")
	if !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad verb: %v, want EINVAL", err)
	}
	if e := readFile(t, filepath.Join(mnt, "err")); !strings.Contains(e, "frobnicate") {
		t.Errorf("err reads %q", e)
	}
	if _, err := os.Stat(filepath.Join(mnt, "c")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("c was made by a write that failed: %v", err)
	}
	// A taken name is EEXIST; a field the provider refuses is ENOTSUP.
	if err := writeFile(t, filepath.Join(mnt, "ctl"), "new a\n"); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("taken name: %v, want EEXIST", err)
	}
	if err := writeFile(t, filepath.Join(mnt, "ctl"), "new g gpu=h100\n"); !errors.Is(err, syscall.ENOTSUP) {
		t.Errorf("gpu on local: %v, want ENOTSUP", err)
	}
	if err := os.Mkdir(filepath.Join(mnt, ".hidden"), 0o755); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("mkdir .hidden: %v, want EINVAL", err)
	}
	// forget drops the name and leaves the box alone.
	require.NoError(t, writeFile(t, filepath.Join(mnt, "ctl"), "forget b\n"))
	if _, err := os.Stat(filepath.Join(mnt, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b still there after forget: %v", err)
	}
}

func TestExecConversation(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	out := run(t, mnt, "a", `echo to-out; echo to-err >&2; printf 'made\n' > made.txt; exit 3`)
	if out != "to-out\nto-err\n" {
		t.Errorf("exec output %q", out)
	}
	if st := readFile(t, filepath.Join(box, "cmds", "1", "status")); st != "exit 3\n" {
		t.Errorf("status %q", st)
	}
	if c := readFile(t, filepath.Join(box, "cmds", "1", "cmd")); !strings.HasPrefix(c, "echo to-out") {
		t.Errorf("cmd %q", c)
	}
	if o := readFile(t, filepath.Join(box, "cmds", "1", "out")); o != out {
		t.Errorf("cmds/1/out %q", o)
	}
	if l, err := os.Readlink(filepath.Join(box, "cmds", "last")); err != nil || l != "1" {
		t.Errorf("cmds/last -> %q, %v", l, err)
	}
	// What the command wrote is there at the next open.
	if got := readFile(t, filepath.Join(box, "work", "made.txt")); got != "made\n" {
		t.Errorf("work/made.txt %q", got)
	}
	// A file written through work/ is in the box once closed.
	require.NoError(t, os.WriteFile(filepath.Join(box, "work", "host.txt"), []byte("from host\n"), 0o644))
	if out := run(t, mnt, "a", "cat host.txt"); out != "from host\n" {
		t.Errorf("box sees %q", out)
	}
	// Changing a file in the box shows at the next open, also when the
	// kernel had it cached.
	if got := readFile(t, filepath.Join(box, "work", "host.txt")); got != "from host\n" {
		t.Fatal(got)
	}
	run(t, mnt, "a", "echo changed in box >> host.txt; rm made.txt")
	if got := readFile(t, filepath.Join(box, "work", "host.txt")); got != "from host\nchanged in box\n" {
		t.Errorf("after box change: %q", got)
	}
	if _, err := os.Stat(filepath.Join(box, "work", "made.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed in box, still seen: %v", err)
	}
	// The box's ctl says how the last command ended.
	if st := readFile(t, filepath.Join(box, "ctl")); !strings.Contains(st, "state=ready") || !strings.Contains(st, "last_cmd=3") || !strings.Contains(st, "last_status=exit_0") {
		t.Errorf("ctl reads %q", st)
	}
	// Bad box ctl verb: EINVAL with the text in err.
	if err := writeFile(t, filepath.Join(box, "ctl"), "explode\n"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad verb: %v", err)
	}
	if e := readFile(t, filepath.Join(box, "err")); !strings.Contains(e, "explode") {
		t.Errorf("err %q", e)
	}
	var facts map[string]any
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(box, "facts.json"))), &facts), "facts.json")
	if facts["provider"] != "local" || facts["health"] != "ok" {
		t.Errorf("facts %v", facts)
	}
}

func TestExecKillAndEarlyClose(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	// Closing exec early does not kill the command.
	f, err := os.OpenFile(filepath.Join(box, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	if _, err := f.Write([]byte("sleep 1; echo done > after.txt\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	deadline := time.Now().Add(20 * time.Second)
	for readFile(t, filepath.Join(box, "cmds", "1", "status")) == "running\n" {
		if time.Now().After(deadline) {
			t.Fatal("command never ended")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := readFile(t, filepath.Join(box, "work", "after.txt")); got != "done\n" {
		t.Errorf("after.txt %q", got)
	}
	// A kill through cmds/N/ctl ends a long command.
	f, err = os.OpenFile(filepath.Join(box, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	if _, err := f.Write([]byte("sleep 300\n")); err != nil {
		t.Fatal(err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 2 {
		t.Errorf("fstat of exec after a write: size %d, %v; want the command's number 2", fi.Size(), err)
	}
	require.NoError(t, writeFile(t, filepath.Join(box, "cmds", "2", "ctl"), "kill\n"))
	if _, err := io.ReadAll(f); err != nil {
		t.Fatal(err)
	}
	if st := readFile(t, filepath.Join(box, "cmds", "2", "status")); st != "killed\n" {
		t.Errorf("status after kill %q", st)
	}
}

func TestWorkTree(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	w := filepath.Join(box, "work")

	// Create, write, read back, stat.
	require.NoError(t, os.WriteFile(filepath.Join(w, "a.txt"), []byte("hello"), 0o640))
	fi, err := os.Stat(filepath.Join(w, "a.txt"))
	if err != nil || fi.Size() != 5 || fi.Mode().Perm() != 0o640 {
		t.Errorf("stat a.txt: %v %v", fi, err)
	}
	// Append from two opens.
	for _, s := range []string{" one", " two"} {
		af, err := os.OpenFile(filepath.Join(w, "a.txt"), os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		if _, err := af.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		require.NoError(t, af.Close())
	}
	if got := readFile(t, filepath.Join(w, "a.txt")); got != "hello one two" {
		t.Errorf("after appends %q", got)
	}
	// Truncate by path and through a handle.
	require.NoError(t, os.Truncate(filepath.Join(w, "a.txt"), 5))
	if got := readFile(t, filepath.Join(w, "a.txt")); got != "hello" {
		t.Errorf("after truncate %q", got)
	}
	// An editor's atomic save: temp, fsync, rename over.
	tmp, err := os.Create(filepath.Join(w, ".a.txt.swp"))
	require.NoError(t, err)
	tmp.Write([]byte("saved"))
	require.NoError(t, tmp.Sync())
	tmp.Close()
	require.NoError(t, os.Rename(filepath.Join(w, ".a.txt.swp"), filepath.Join(w, "a.txt")))
	if got := readFile(t, filepath.Join(w, "a.txt")); got != "saved" {
		t.Errorf("after save %q", got)
	}
	if out := run(t, mnt, "a", "cat a.txt; ls -a"); out != "saved.\n..\na.txt\n" {
		t.Errorf("box sees %q", out)
	}
	// Directories, symlinks, hard links, chmod +x then run it in the box.
	require.NoError(t, os.MkdirAll(filepath.Join(w, "d", "e"), 0o755))
	require.NoError(t, os.Symlink("../a.txt", filepath.Join(w, "d", "link")))
	if target, err := os.Readlink(filepath.Join(w, "d", "link")); err != nil || target != "../a.txt" {
		t.Errorf("readlink %q %v", target, err)
	}
	if got := readFile(t, filepath.Join(w, "d", "link")); got != "saved" {
		t.Errorf("through link %q", got)
	}
	require.NoError(t, os.Link(filepath.Join(w, "a.txt"), filepath.Join(w, "d", "hard")))
	if fi, err := os.Stat(filepath.Join(w, "d", "hard")); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("hard link: %v %v", fi, err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(w, "run.sh"), []byte("#!/bin/sh\necho ran $1\n"), 0o644))
	require.NoError(t, os.Chmod(filepath.Join(w, "run.sh"), 0o755))
	if out := run(t, mnt, "a", "./run.sh ok"); out != "ran ok\n" {
		t.Errorf("run.sh: %q", out)
	}
	// Errors carry the box's errno.
	if err := os.Remove(filepath.Join(w, "d")); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Errorf("rmdir non-empty: %v", err)
	}
	if _, err := os.Stat(filepath.Join(w, "nope")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat missing: %v", err)
	}
	if err := os.Mkdir(filepath.Join(w, "d"), 0o755); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("mkdir existing: %v", err)
	}
	// Times to the nanosecond.
	mt := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(w, "a.txt"), mt, mt))
	if fi, err := os.Stat(filepath.Join(w, "a.txt")); err != nil || !fi.ModTime().Equal(mt) {
		t.Errorf("mtime %v, want %v (%v)", fi.ModTime(), mt, err)
	}
	// Inode numbers stay for a path; a renamed file keeps its own.
	st1, _ := os.Stat(filepath.Join(w, "run.sh"))
	st2, _ := os.Stat(filepath.Join(w, "run.sh"))
	if st1.Sys().(*syscall.Stat_t).Ino != st2.Sys().(*syscall.Stat_t).Ino {
		t.Error("inode number changed between stats")
	}
	require.NoError(t, os.Rename(filepath.Join(w, "run.sh"), filepath.Join(w, "d", "run2.sh")))
	st3, _ := os.Stat(filepath.Join(w, "d", "run2.sh"))
	if st3.Sys().(*syscall.Stat_t).Ino != st1.Sys().(*syscall.Stat_t).Ino {
		t.Error("rename changed the inode number")
	}
	// Listing.
	ents, err := os.ReadDir(w)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "a.txt d" {
		t.Errorf("work lists %v", names)
	}
	// xattrs answer at once and honestly.
	if _, err := getxattr(filepath.Join(w, "a.txt"), "user.x"); !errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, syscall.ENODATA) {
		t.Errorf("getxattr: %v", err)
	}
	// Random writes keep the rest of the file.
	rw, err := os.OpenFile(filepath.Join(w, "a.txt"), os.O_RDWR, 0)
	require.NoError(t, err)
	rw.WriteAt([]byte("V"), 2)
	rw.Close()
	if got := readFile(t, filepath.Join(w, "a.txt")); got != "saVed" {
		t.Errorf("random write: %q", got)
	}
}

func getxattr(path, name string) (int, error) {
	buf := make([]byte, 64)
	return syscall.Getxattr(path, name, buf)
}

func TestDestroyedBox(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	require.NoError(t, os.WriteFile(filepath.Join(box, "work", "f"), []byte("x"), 0o644))
	require.NoError(t, writeFile(t, filepath.Join(box, "ctl"), "destroy\n"))
	if st := readFile(t, filepath.Join(box, "ctl")); !strings.Contains(st, "state=gone") {
		t.Errorf("ctl after destroy %q", st)
	}
	start := time.Now()
	_, err := os.ReadFile(filepath.Join(box, "work", "f"))
	if err == nil || !errors.Is(err, syscall.ENODEV) {
		t.Errorf("read from a destroyed box: %v, want ENODEV", err)
	}
	if f, err := os.OpenFile(filepath.Join(box, "exec"), os.O_RDWR, 0); err == nil {
		_, werr := f.Write([]byte("true\n"))
		f.Close()
		if !errors.Is(werr, syscall.ENODEV) {
			t.Errorf("exec in a destroyed box: %v", werr)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("errors took %v", d)
	}
}

func TestMmapShared(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	name := filepath.Join(box, "work", "m")
	require.NoError(t, os.WriteFile(name, bytes.Repeat([]byte{'a'}, 8192), 0o644))
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	require.NoError(t, err)
	data, err := syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	require.NoError(t, err, "mmap")
	copy(data[100:], "mapped")
	require.NoError(t, msync(data), "msync")
	syscall.Munmap(data)
	require.NoError(t, f.Close())
	if out := run(t, mnt, "a", "dd if=m bs=1 skip=100 count=6 2>/dev/null"); out != "mapped" {
		t.Errorf("box sees %q", out)
	}
}

func msync(b []byte) error { return unix.Msync(b, unix.MS_SYNC) }
