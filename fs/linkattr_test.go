package fs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

func lutimes(t *testing.T, p string, at, mt time.Time) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatalf("lutimes %s: %v", p, err)
	}
}

// touch -h and chown -h through the mount change the link itself in the
// box, a dangling one too, and never its target.
func TestSymlinkOwnAttrs(t *testing.T) {
	mnt := mount(t)
	box := newBox(t, mnt, "a")
	w := filepath.Join(box, "work")
	require.NoError(t, os.WriteFile(filepath.Join(w, "target"), []byte("data\n"), 0o644))
	old := time.Date(2003, 3, 3, 0, 0, 0, 0, time.UTC)
	os.Chtimes(filepath.Join(w, "target"), old, old)
	for name, to := range map[string]string{"link": "target", "dangling": "missing"} {
		require.NoError(t, os.Symlink(to, filepath.Join(w, name)))
	}
	at := time.Date(2001, 1, 1, 0, 0, 0, 500, time.UTC)
	mt := time.Date(2002, 2, 2, 2, 2, 2, 123456789, time.UTC)
	for _, name := range []string{"link", "dangling"} {
		lutimes(t, filepath.Join(w, name), at, mt)
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(w, name), &st); err != nil || !time.Unix(st.Mtim.Sec, st.Mtim.Nsec).Equal(mt) {
			t.Errorf("%s through the mount: mtime %v (%v), want %v", name, time.Unix(st.Mtim.Sec, st.Mtim.Nsec), err, mt)
		}
	}
	want := "target 2003-03-03 00:00:00.000000000 +0000\nlink 2002-02-02 02:02:02.123456789 +0000\ndangling 2002-02-02 02:02:02.123456789 +0000\n"
	if got := run(t, mnt, "a", "TZ=UTC stat -c '%n %y' target link dangling"); got != want {
		t.Errorf("the box sees\n%s\nwant\n%s", got, want)
	}
	if os.Geteuid() != 0 {
		return
	}
	require.NoError(t, os.Lchown(filepath.Join(w, "dangling"), 1234, 1235))
	require.NoError(t, os.Lchown(filepath.Join(w, "link"), -1, 1236))
	if got := run(t, mnt, "a", "stat -c '%n %u:%g' target link dangling"); got != "target 0:0\nlink 0:1236\ndangling 1234:1235\n" {
		t.Errorf("after lchown the box sees %q", got)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(w, "dangling"), &st); err != nil || st.Uid != 1234 || st.Gid != 1235 {
		t.Errorf("dangling's owner through the mount: %d:%d %v", st.Uid, st.Gid, err)
	}
}

// A box whose files cannot set a link's own attributes (the fake's) gets
// hands's fixed script, one command, and the cache keeps everything else
// it holds: another directory's listing is not asked of the box again.
func TestSymlinkOwnAttrsByScript(t *testing.T) {
	fp := fake.New()
	var mu sync.Mutex
	var argvs [][]string
	fp.Program("sh", func(ctx context.Context, pc *fake.Proc) int {
		mu.Lock()
		argvs = append(argvs, pc.Argv)
		mu.Unlock()
		return 0
	})
	mnt, _ := serve(t, boxes.Options{
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		AttrTimeout:     time.Hour, // nothing expires during the test: a listing asked again was dropped
		OpTimeout:       10 * time.Second,
	})
	box := newBox(t, mnt, "a")
	w := filepath.Join(box, "work")
	for _, d := range []string{"d", "e"} {
		require.NoError(t, os.Mkdir(filepath.Join(w, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(w, "e", "f"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink("nowhere", filepath.Join(w, "d", "l")))
	_, err := os.ReadDir(filepath.Join(w, "e"))
	require.NoError(t, err)
	fp.ResetCalls()

	mt := time.Date(2002, 2, 2, 2, 2, 2, 123456789, time.UTC)
	lutimes(t, filepath.Join(w, "d", "l"), mt, mt)
	mu.Lock()
	got := argvs
	mu.Unlock()
	require.Len(t, got, 1, "the link's setattr ran %d commands: %q", len(got), got)
	stamp := fmt.Sprintf("@%d.%09d", mt.Unix(), mt.Nanosecond())
	// sh -c SCRIPT sh PATH ATIME MTIME
	a := got[0]
	require.GreaterOrEqual(t, len(a), 7, "argv %q", a)
	assert.Contains(t, a[2], "touch -h", "the script sets the link's own times")
	assert.Equal(t, []string{"/work/d/l", stamp, stamp}, a[len(a)-3:])
	_, err = os.ReadDir(filepath.Join(w, "e"))
	require.NoError(t, err)
	for _, c := range fp.Calls() {
		if (c.Op == "ReadDir" || c.Op == "Walk" || c.Op == "Lstat" || c.Op == "Stat") && strings.Contains(c.Path, "/e") {
			t.Errorf("after the link's setattr the box was asked %s %s: the cache was dropped", c.Op, c.Path)
		}
	}
}
