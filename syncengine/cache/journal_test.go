package cache_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// reopen opens the cache of dir again, as a daemon started after a crash
// of the one using dir does (the first is neither flushed nor closed: what
// it left on disk is what a kill -9 leaves), and collects what Recovered
// reports.
func reopen(t *testing.T, r cache.Remote, dir string) (*cache.Cache, *[][2]string) {
	t.Helper()
	var recovered [][2]string
	c, err := cache.Open(r, cache.Options{Dir: dir, Root: root, Box: "test",
		Recovered: func(rel, kept string) { recovered = append(recovered, [2]string{rel, kept}) }})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, &recovered
}

// After a crash, a journaled file is pushed unless the box changed it
// since the host's writes began: then the box's file keeps the name and
// the host's bytes go beside it, and the cache says so.
func TestRecoverKeepsTheBoxsLaterChange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		existing  bool   // the box had the file before the host wrote
		boxAfter  string // what the box does after the crash: "", "write", "remove"
		wantName  string // where the host's bytes land
		wantBox   string // what the name holds after the recovery
		recovered bool
	}{
		{"unchanged", true, "", "f", "host", false},
		{"box-wrote", true, "write", "f.boxfs-recovered-1", "box", true},
		{"box-removed", true, "remove", "f.boxfs-recovered-1", "", true},
		{"host-made-box-untouched", false, "", "f", "host", false},
		{"host-made-box-made-too", false, "write", "f.boxfs-recovered-1", "box", true},
		// Pushed, and the daemon killed before the journal said so.
		{"pushed-before-the-crash", false, "same", "f", "host", false},
	} {
		for _, exact := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "", true: "/batched"}[exact], func(t *testing.T) {
				_, _, r := fakeBox(t)
				if exact {
					r = &exactRemote{Remote: r}
				}
				dir := t.TempDir()
				first := open(t, r, dir)
				if tc.existing {
					boxWrite(t, r, "f", "old")
					_, err := first.Lookup(t.Context(), "f") // as the kernel does before an open
					require.NoError(t, err)
					h, _, err := first.OpenFile(t.Context(), "f", syscall.O_WRONLY|syscall.O_TRUNC)
					require.NoError(t, err)
					_, err = h.WriteAt([]byte("host"), 0)
					require.NoError(t, err)
				} else {
					write(t, first, "f", "host")
				}
				switch tc.boxAfter {
				case "write":
					boxWrite(t, r, "f", "box")
				case "remove":
					require.NoError(t, r.Remove(t.Context(), root+"/f"))
				case "same":
					boxWrite(t, r, "f", "host")
				}
				c, recovered := reopen(t, r, dir)
				require.Equal(t, []string{"f"}, c.Dirty(), "the journal's dirty files")
				require.NoError(t, c.Recover(t.Context()))
				assert.Empty(t, c.Dirty())
				assert.Equal(t, "host", boxRead(t, r, tc.wantName))
				if tc.wantBox == "" {
					_, err := r.Lstat(t.Context(), root+"/f")
					assert.Error(t, err, "the box removed f; the recovery must not bring it back")
				} else {
					assert.Equal(t, tc.wantBox, boxRead(t, r, "f"))
				}
				if tc.recovered {
					assert.Equal(t, [][2]string{{"f", tc.wantName}}, *recovered)
				} else {
					assert.Empty(t, *recovered)
				}
			})
		}
	}
}

// exactRemote is a remote that pushes in batches and whose listings are
// exact, as the agent channel's are; it counts the stats and listings the
// cache asks of it (a batch's own writes are not counted).
type exactRemote struct {
	cache.Remote
	lstats, listings atomic.Int64
}

func (e *exactRemote) ExactListings() bool { return true }

func (e *exactRemote) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	e.lstats.Add(1)
	return e.Remote.Lstat(ctx, name)
}

func (e *exactRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	e.listings.Add(1)
	return e.Remote.ReadDir(ctx, name)
}

func (e *exactRemote) WriteFiles(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	out := make([]providers.FileWritten, len(files))
	for i, f := range files {
		if f.Dir {
			out[i].Info, out[i].Err = providers.WriteDir(ctx, e.Remote, f)
			continue
		}
		out[i].Info, out[i].Err = providers.AsStatWriter(e.Remote).WriteFileStat(ctx, f.Name, f.Data, f.Options)
	}
	return out, nil
}

// A recovery pushed in a batch checks the journaled files against one
// listing of each of their directories, not a stat of each file: files in
// directories the box has and in directories it lost, all pushed.
func TestRecoverListsEachDirectoryOnce(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &exactRemote{Remote: inner}
	dir := t.TempDir()
	c, err := cache.Open(r, cache.Options{Dir: dir, Root: root, Box: "test", WriteBehind: true, BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	require.NoError(t, err)
	require.NoError(t, inner.Mkdir(t.Context(), root+"/kept", 0o755))
	boxWrite(t, inner, "kept/f00", "old")
	_, err = c.ReadDir(t.Context(), "")
	require.NoError(t, err)
	_, err = c.Mkdir(t.Context(), "lost", 0o755)
	require.NoError(t, err)
	_, err = c.Lookup(t.Context(), "kept")
	require.NoError(t, err)
	_, err = c.ReadDir(t.Context(), "kept")
	require.NoError(t, err)
	for _, d := range []string{"kept", "lost"} {
		for i := range 10 {
			write(t, c, fmt.Sprintf("%s/f%02d", d, i), fmt.Sprintf("host %s %d", d, i))
		}
	}
	c2, recovered := reopen(t, r, dir)
	require.Len(t, c2.Dirty(), 20)
	r.lstats.Store(0)
	r.listings.Store(0)
	require.NoError(t, c2.Recover(t.Context()))
	assert.Empty(t, c2.Dirty())
	assert.Empty(t, *recovered)
	for _, d := range []string{"kept", "lost"} {
		for i := range 10 {
			assert.Equal(t, fmt.Sprintf("host %s %d", d, i), boxRead(t, inner, fmt.Sprintf("%s/f%02d", d, i)))
		}
	}
	assert.EqualValues(t, 2, r.listings.Load(), "one listing per directory")
	assert.LessOrEqual(t, r.lstats.Load(), int64(3), "stats: only to make the lost directory again")
}

// A second recovered copy of one name takes the next free number.
func TestRecoveredNamesDoNotCollide(t *testing.T) {
	_, _, r := fakeBox(t)
	dir := t.TempDir()
	boxWrite(t, r, "f.boxfs-recovered-1", "earlier")
	write(t, open(t, r, dir), "f", "host")
	boxWrite(t, r, "f", "box")
	c, recovered := reopen(t, r, dir)
	require.NoError(t, c.Recover(t.Context()))
	assert.Equal(t, [][2]string{{"f", "f.boxfs-recovered-2"}}, *recovered)
	assert.Equal(t, "earlier", boxRead(t, r, "f.boxfs-recovered-1"))
	assert.Equal(t, "host", boxRead(t, r, "f.boxfs-recovered-2"))
}

// The journal is one file, appended to: writes, attribute changes and
// renames of a dirty file all survive a crash, a pushed file is not
// pushed again, and the file does not grow without bound as files come
// and go.
func TestJournalIsOneAppendOnlyFile(t *testing.T) {
	_, _, r := fakeBox(t)
	dir := t.TempDir()
	c := open(t, r, dir)
	for i := range 3000 {
		h := write(t, c, "pushed", strings.Repeat("x", i%7))
		require.NoError(t, h.Flush(t.Context()))
		h.Release(t.Context())
	}
	write(t, c, "a", "kept")
	_, err := c.Chmod(t.Context(), "a", 0o600)
	require.NoError(t, err)
	require.NoError(t, c.Rename(t.Context(), "a", "b"))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"data", "journal.log", "shown.log"}, names, "no file per dirty file")
	st, err := os.Stat(filepath.Join(dir, "shown.log"))
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(1<<20), "the times shown of 3,000 pushes of one file")
	st, err = os.Stat(filepath.Join(dir, "journal.log"))
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(2<<20), "the journal of 3,000 pushed files")

	c2, _ := reopen(t, r, dir)
	require.Equal(t, []string{"b"}, c2.Dirty())
	require.NoError(t, c2.Recover(t.Context()))
	assert.Equal(t, "kept", boxRead(t, r, "b"))
	fi, err := r.Lstat(t.Context(), root+"/b")
	require.NoError(t, err)
	assert.Equal(t, "-rw-------", fi.Mode.Perm().String())
	assert.Equal(t, "x", boxRead(t, r, "pushed")[:1], "the last push of a file pushed 3,000 times")
}

// A torn last line (the daemon killed mid-write) is skipped, the lines
// before it kept.
func TestJournalTornLine(t *testing.T) {
	_, _, r := fakeBox(t)
	dir := t.TempDir()
	write(t, open(t, r, dir), "f", "host")
	j, err := os.OpenFile(filepath.Join(dir, "journal.log"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = j.WriteString(`{"op":"put","id":99,"path":"g`)
	require.NoError(t, err)
	j.Close()
	c, _ := reopen(t, r, dir)
	assert.Equal(t, []string{"f"}, c.Dirty())
}

// A file made here in a directory made here, both lost by a crash before
// the batch that would have sent them (write-behind), lands in the box
// after the restart: the directory is made again.
func TestRecoverMakesLostDirectories(t *testing.T) {
	_, _, r := fakeBox(t)
	dir := t.TempDir()
	c, err := cache.Open(r, cache.Options{Dir: dir, Root: root, Box: "test", WriteBehind: true, BehindDelay: time.Hour, BehindMaxWait: time.Hour})
	require.NoError(t, err)
	_, err = c.ReadDir(t.Context(), "")
	require.NoError(t, err)
	_, err = c.Mkdir(t.Context(), "d", 0o755)
	require.NoError(t, err)
	_, err = c.Mkdir(t.Context(), "d/e", 0o755)
	require.NoError(t, err)
	h := write(t, c, "d/e/f", "acknowledged")
	require.NoError(t, h.Flush(t.Context()))
	c2, _ := reopen(t, r, dir)
	require.NoError(t, c2.Recover(t.Context()))
	assert.Equal(t, "acknowledged", boxRead(t, r, "d/e/f"))
}

// A daemon killed during a push leaves the writer's temporary beside the
// file; the next process removes it when it recovers a journaled file of
// that directory, and leaves alone a temporary written since it began
// (another writer's, in flight).
func TestRecoverRemovesAnEarlierProcesssTemporaries(t *testing.T) {
	_, _, r := fakeBox(t)
	dir := t.TempDir()
	write(t, open(t, r, dir), "f", "host")
	boxWrite(t, r, ".boxfs-tmp-dead", "half")
	old := time.Now().Add(-time.Minute)
	require.NoError(t, r.Utimes(t.Context(), root+"/.boxfs-tmp-dead", old, old))
	c, _ := reopen(t, r, dir)
	boxWrite(t, r, ".boxfs-tmp-live", "in flight")
	future := time.Now().Add(time.Minute)
	require.NoError(t, r.Utimes(t.Context(), root+"/.boxfs-tmp-live", future, future))

	require.NoError(t, c.Recover(t.Context()))
	assert.Equal(t, "host", boxRead(t, r, "f"))
	_, err := r.Lstat(t.Context(), root+"/.boxfs-tmp-dead")
	assert.True(t, providers.IsCode(err, providers.NotFound), "the earlier process's temporary: %v", err)
	assert.Equal(t, "in flight", boxRead(t, r, ".boxfs-tmp-live"))
}
