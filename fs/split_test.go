package fs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// echoTo writes text and a newline to name with bash's echo (stdio, which
// writes in st_blksize pieces), and returns what bash said.
func echoTo(t *testing.T, name, text string) (string, error) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "text")
	require.NoError(t, os.WriteFile(src, []byte(text), 0o600))
	cmd := exec.Command("bash", "-c", `text=$(cat "$1"); echo "$text" > "$2"`, "bash", src, name)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// writeOnce writes text to name with one write(2) from a buffer that starts
// skew bytes after a page boundary (the rest after a short count, as any
// writer would), and returns the write's error or else close's.
func writeOnce(t *testing.T, name, text string, skew int) error {
	t.Helper()
	_, werr, cerr := writeSkewed(t, name, text, skew, true)
	if werr != nil {
		return werr
	}
	return cerr
}

// writeShort is writeOnce for a writer that takes a short count as the
// end: one write(2), then close; it returns both answers.
func writeShort(t *testing.T, name, text string, skew int) (n int, werr, cerr error) {
	t.Helper()
	return writeSkewed(t, name, text, skew, false)
}

// writeSkewed writes text to name from a buffer skew bytes after a page
// boundary, again after a short count when retry says so, then closes.
func writeSkewed(t *testing.T, name, text string, skew int, retry bool) (n int, werr, cerr error) {
	t.Helper()
	buf, err := unix.Mmap(-1, 0, len(text)+skew+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer unix.Munmap(buf)
	p := buf[skew : skew+len(text)]
	copy(p, text)
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_TRUNC, 0)
	require.NoError(t, err)
	n, werr = unix.Write(fd, p)
	for retry && werr == nil && n < len(p) {
		p = p[n:]
		n, werr = unix.Write(fd, p)
	}
	return n, werr, unix.Close(fd)
}

// waitStatus waits for command n of box to end and returns its status.
func waitStatus(t *testing.T, box string, n string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(filepath.Join(box, "cmds", n, "status"))
		if err == nil && strings.TrimSpace(string(b)) != "running" {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("command %s never ended", n)
	return ""
}

// A command line longer than a stdio buffer, or than one page of an
// unaligned buffer, runs whole, however the kernel splits its write.
func TestExecLongLine(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	line := "echo " + strings.Repeat("a", 5000) + " | wc -c"
	writes := map[string]func() error{
		"echo": func() error {
			out, err := echoTo(t, filepath.Join(box, "exec"), line)
			assert.Empty(t, out)
			return err
		},
		"write":           func() error { return writeOnce(t, filepath.Join(box, "exec"), line+"\n", 0) },
		"write-unaligned": func() error { return writeOnce(t, filepath.Join(box, "exec"), line+"\n", 100) },
	}
	n := 0
	for _, how := range []string{"echo", "write", "write-unaligned"} {
		n++
		require.NoError(t, writes[how](), "%s: err: %s", how, readFile(t, filepath.Join(box, "err")))
		num := strconv.Itoa(n)
		assert.Equal(t, "exit 0", waitStatus(t, box, num), how)
		assert.Equal(t, line+"\n", readFile(t, filepath.Join(box, "cmds", num, "cmd")), how)
		assert.Equal(t, "5001\n", readFile(t, filepath.Join(box, "cmds", num, "out")), how)
	}
	ents, _ := os.ReadDir(filepath.Join(box, "cmds"))
	assert.Len(t, ents, n+1, "one command per write, and last")
}

// A command line past the limit is refused whole (E2BIG): nothing runs,
// not its first piece.
func TestExecLineTooLong(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	line := "echo " + strings.Repeat("b", 1<<20) + " | wc -c"
	out, err := echoTo(t, filepath.Join(box, "exec"), line)
	assert.Error(t, err)
	assert.Contains(t, out, "too long")
	assert.ErrorIs(t, writeOnce(t, filepath.Join(box, "exec"), line+"\n", 0), syscall.E2BIG)
	time.Sleep(200 * time.Millisecond)
	ents, err := os.ReadDir(filepath.Join(box, "cmds"))
	require.NoError(t, err)
	assert.Empty(t, ents, "no command ran")
	assert.Contains(t, readFile(t, filepath.Join(box, "err")), "longer than")
}

// A 1 MiB write to the root ctl, by echo or by one write(2), is taken
// message by message, whole: the box made is the one the message names.
func TestCtlLongWrite(t *testing.T) {
	mnt := mount(t)
	pad := "# " + strings.Repeat("p", 1<<20-64) + "\n"
	out, err := echoTo(t, filepath.Join(mnt, "ctl"), pad+"new splitbox")
	require.NoError(t, err, "%s %s", out, readErr(mnt))
	require.NoError(t, writeOnce(t, filepath.Join(mnt, "ctl"), pad+"new splitwrite\n", 0), readErr(mnt))
	require.NoError(t, writeOnce(t, filepath.Join(mnt, "ctl"), pad+"new splitodd\n", 100), readErr(mnt))
	ents, err := os.ReadDir(mnt)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"ctl", "err", "splitbox", "splitodd", "splitwrite"}, names)

	// One message past the limit fails whole, and makes nothing.
	long := "new big label.x=" + strings.Repeat("q", 1<<20) + "\n"
	assert.ErrorIs(t, writeOnce(t, filepath.Join(mnt, "ctl"), long, 0), syscall.E2BIG)
	_, err = os.Stat(filepath.Join(mnt, "big"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, readErr(mnt), "longer than")

	// The same message in one unaligned write(2), which the kernel splits:
	// a writer that stops at a short count hears of it at close.
	for _, p := range []string{filepath.Join(mnt, "ctl"), filepath.Join(newBox(t, mnt, "a"), "exec")} {
		n, werr, cerr := writeShort(t, p, long, 100)
		if werr == nil {
			assert.Less(t, n, len(long), "%s: the whole message taken", p)
			assert.ErrorIs(t, cerr, syscall.E2BIG, "%s: close after a short write", p)
		} else {
			assert.ErrorIs(t, werr, syscall.E2BIG, p)
		}
	}
	_, err = os.Stat(filepath.Join(mnt, "big"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// Control files report a large st_blksize, so stdio writers hand a whole
// message to one write(2).
func TestCtlBlksize(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	for _, p := range []string{filepath.Join(mnt, "ctl"), filepath.Join(box, "ctl"), filepath.Join(box, "exec")} {
		var st unix.Stat_t
		require.NoError(t, unix.Stat(p, &st))
		assert.GreaterOrEqual(t, st.Blksize, int64(1<<20), p)
	}
}

// A read on an exec open whose write failed answers that failure; it never
// follows another writer's command.
func TestExecReadAfterFailedWrite(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	require.Equal(t, "other\n", run(t, mnt, "a", "echo other"))
	f, err := os.OpenFile(filepath.Join(box, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write([]byte("bad\x00line\n"))
	require.ErrorIs(t, err, syscall.EINVAL)
	b := make([]byte, 100)
	n, err := f.Read(b)
	assert.ErrorIs(t, err, syscall.EINVAL)
	assert.Empty(t, string(b[:n]))
}

// A command's output past the cap keeps its tail: cmds/N/out reads what is
// kept once, from its start, and cmds/N/cut says what went.
func TestOutputCapThroughMount(t *testing.T) {
	lp := local.New(t.TempDir())
	mnt, m := serve(t, boxes.Options{
		DefaultProvider: "local",
		OpenProvider:    func(string) (providers.Provider, error) { return lp, nil },
		OpTimeout:       10 * time.Second,
		OutputCap:       1 << 20,
	})
	t.Cleanup(func() {
		bs, _ := lp.List(context.Background(), nil)
		for _, b := range bs {
			b.Destroy(context.Background())
		}
	})
	box := newBox(t, mnt, "a")
	live := run(t, mnt, "a", "seq 1 400000; echo END")
	assert.True(t, strings.HasSuffix(live, "399999\n400000\nEND\n"))
	kept := readFile(t, filepath.Join(box, "cmds", "1", "out"))
	assert.LessOrEqual(t, len(kept), 1<<20)
	assert.Greater(t, len(kept), 1<<19)
	assert.True(t, strings.HasSuffix(live, kept), "out is the tail of the output, read once")
	assert.Contains(t, readFile(t, filepath.Join(box, "cmds", "1", "cut")), "bytes of its output were dropped")
	var used int64
	filepath.Walk(filepath.Join(m.Options().StateDir, "cmds"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			used += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	assert.LessOrEqual(t, used, int64(1<<20+64<<10))
}

// kill in a box's ctl ends every running command, however many, each
// within its own bound.
func TestKillMany(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	const n = 200
	for i := 0; i < n; i++ {
		require.NoError(t, writeFile(t, filepath.Join(box, "exec"), "sleep 300\n"))
	}
	start := time.Now()
	require.NoError(t, writeFile(t, filepath.Join(box, "ctl"), "kill\n"), readFile(t, filepath.Join(box, "err")))
	t.Logf("kill of %d commands: %v", n, time.Since(start))
	for i := 1; i <= n; i++ {
		assert.Equal(t, "killed", waitStatus(t, box, strconv.Itoa(i)), "command %d", i)
	}
}
