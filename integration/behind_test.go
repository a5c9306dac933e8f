package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// behindRows are the providers the write-behind tests run on: a local box
// (no agent: files go one call each) and a Docker box (the agent's
// batches).
var behindRows = []string{"local", "docker"}

// boxSees runs script in the box's workspace without going through the
// mount (which would be a barrier itself): on the host for a local box,
// by docker exec for a Docker box.
func boxSees(t *testing.T, b *boxT, script string) string {
	t.Helper()
	return whereIs(t, b).sh(t, script)
}

// boxWhere is how to reach a box's workspace without the mount, which may
// be gone by the time it is used.
type boxWhere struct{ provider, id, ws string }

// whereIs reads b's provider, id and workspace through the mount.
func whereIs(t *testing.T, b *boxT) boxWhere {
	t.Helper()
	facts := factsMap(t, b)
	ws, _ := facts["workspace"].(string)
	require.NotEmpty(t, ws, "facts.json names no workspace")
	prov, _ := facts["provider"].(string)
	return boxWhere{provider: prov, id: boxID(t, b), ws: ws}
}

// sh runs script in the workspace: on the host for a local box, by docker
// exec for a Docker box.
func (w boxWhere) sh(t *testing.T, script string) string {
	t.Helper()
	var cmd *exec.Cmd
	if w.provider == "docker" {
		cmd = exec.Command("docker", "exec", "-w", w.ws, w.id, "sh", "-c", script)
	} else {
		cmd = exec.Command("sh", "-c", script)
		cmd.Dir = w.ws
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "in the box: %s\n%s", script, out)
	return string(out)
}

// burst writes n files of a few hundred bytes under dir (ten
// subdirectories), each closed before the next; it returns what the box
// should list: "path sha256" lines, sorted.
func burst(t *testing.T, dir string, n int) string {
	t.Helper()
	var lines []string
	for i := range n {
		sub := fmt.Sprintf("d%d", i%10)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, sub), 0o755))
		rel := fmt.Sprintf("%s/f%04d", sub, i)
		data := []byte(strings.Repeat(fmt.Sprintf("file %d of the burst\n", i), 1+i%20))
		require.NoError(t, os.WriteFile(filepath.Join(dir, rel), data, 0o644))
		sum := sha256.Sum256(data)
		lines = append(lines, hex.EncodeToString(sum[:])+"  ./"+rel)
	}
	return sortLines(strings.Join(lines, "\n"))
}

// hashScript is what the box holds under dir, as burst lists it.
const hashScript = "find . -type f | LC_ALL=C sort | xargs sha256sum"

// notYet checks that the box lacks some of what a burst under dir wrote:
// with the batch delay long, only a barrier sends them.
func notYet(t *testing.T, b *boxT, dir, want string) {
	t.Helper()
	got := boxSees(t, b, "cd "+dir+" 2>/dev/null && "+hashScript+"; true")
	require.NotEqual(t, want, sortLines(got), "the box had the burst before the barrier: the test shows nothing")
}

// In write=behind a close returns before the box has the bytes, and every
// barrier pushes everything first: a command started through exec right
// after a burst of writes sees all of them, and so does the box after an
// fsync of a file or a directory, a ctl flush, sync or release, and an
// unmount. The batch delay is long, so what reaches the box is what a
// barrier sent.
func TestWriteBehindBarriers(t *testing.T) {
	for _, prov := range behindRows {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, write: "behind", behindDelay: time.Hour})
			b := m.newBox(t, "wb", "provider="+prov)
			assert.Equal(t, "behind", factsMap(t, b)["write"], "facts.json says the mode")

			t.Run("exec", func(t *testing.T) {
				want := burst(t, filepath.Join(b.work, "exec"), 300)
				notYet(t, b, "exec", want)
				got := b.must(t, "cd exec && "+hashScript)
				assert.Equal(t, want, sortLines(got), "a command started right after the writes")
			})
			t.Run("fsync", func(t *testing.T) {
				dir := filepath.Join(b.work, "fsync")
				want := burst(t, dir, 20)
				f, err := os.Create(filepath.Join(dir, "last"))
				require.NoError(t, err)
				_, err = f.WriteString("synced\n")
				require.NoError(t, err)
				notYet(t, b, "fsync", want)
				require.NoError(t, f.Sync())
				assert.Equal(t, "synced\n", boxSees(t, b, "cat fsync/last"), "the file fsync'd")
				assert.Equal(t, want, sortLines(boxSees(t, b, "cd fsync && "+hashScript+" | grep -v ' ./last$'")), "files closed before")
				f.Close()
			})
			t.Run("fsync-dir", func(t *testing.T) {
				dir := filepath.Join(b.work, "fsyncdir")
				want := burst(t, dir, 20)
				notYet(t, b, "fsyncdir", want)
				d, err := os.Open(dir)
				require.NoError(t, err)
				require.NoError(t, d.Sync())
				d.Close()
				assert.Equal(t, want, sortLines(boxSees(t, b, "cd fsyncdir && "+hashScript)))
			})
			for _, verb := range []string{"flush", "sync"} {
				t.Run("ctl-"+verb, func(t *testing.T) {
					want := burst(t, filepath.Join(b.work, verb), 50)
					notYet(t, b, verb, want)
					require.NoError(t, ctlWrite(filepath.Join(b.dir, "ctl"), verb+"\n"))
					assert.Equal(t, want, sortLines(boxSees(t, b, "cd "+verb+" && "+hashScript)))
				})
			}
			t.Run("ctl-release", func(t *testing.T) {
				r := m.newBox(t, "wr", "provider="+prov)
				where := whereIs(t, r)
				if prov == "docker" {
					// Released, the box is not the mount's to end.
					t.Cleanup(func() { dockerCLI(t, "rm", where.id) })
				}
				want := burst(t, filepath.Join(r.work, "release"), 50)
				notYet(t, r, "release", want)
				require.NoError(t, ctlWrite(filepath.Join(r.dir, "ctl"), "release\n"))
				assert.Equal(t, want, sortLines(where.sh(t, "cd release && "+hashScript)))
			})
			t.Run("umount", func(t *testing.T) {
				want := burst(t, filepath.Join(b.work, "umount"), 50)
				notYet(t, b, "umount", want)
				m.keepBoxes = true
				where := whereIs(t, b)
				m.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-m.ended:
				case <-time.After(60 * time.Second):
					t.Fatal("the mount did not end within 60 s of SIGTERM")
				}
				out := where.sh(t, "cd umount && "+hashScript)
				assert.Equal(t, want, sortLines(out))
				m.keepBoxes = false
			})
		})
	}
}

// In write=behind a push the box refuses (its disk is full) does not fail
// close(2), which has returned: it keeps the file dirty, says why in err
// and facts.json, and fails the next barrier (a command, a ctl flush)
// with the error; nothing is lost.
func TestWriteBehindFailedPush(t *testing.T) {
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 20 * time.Second, write: "behind"})
	small := m.newBox(t, "full", "provider=docker", "workspace=/dev/shm/w")
	big := filepath.Join(small.work, "big")
	data := []byte(strings.Repeat("x", 1<<20))
	f, err := os.Create(big)
	require.NoError(t, err)
	for range 80 {
		_, err := f.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close(), "close in write-behind returns at the journal")
	require.Eventually(t, func() bool {
		e, _ := os.ReadFile(filepath.Join(small.dir, "err"))
		return strings.Contains(string(e), "big")
	}, 60*time.Second, 50*time.Millisecond, "err names the file whose push failed")
	facts := factsMap(t, small)
	assert.Contains(t, facts["dirtyFiles"], "big")
	pe, _ := facts["pushErrors"].(map[string]any)
	assert.Contains(t, pe, "big", "facts.json: %v", facts)
	err = ctlWrite(filepath.Join(small.dir, "ctl"), "flush\n")
	assert.True(t, errors.Is(err, syscall.ENOSPC), "ctl flush: %v, want ENOSPC", err)
	ef, err := os.OpenFile(filepath.Join(small.dir, "exec"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = ef.Write([]byte("true\n"))
	ef.Close()
	assert.True(t, errors.Is(err, syscall.ENOSPC), "a command after the failed push: %v, want ENOSPC", err)
	fi, err := os.Stat(big)
	require.NoError(t, err)
	assert.EqualValues(t, 80<<20, fi.Size(), "the file through the mount")
	require.NoError(t, os.Remove(big))
	assert.NoError(t, ctlWrite(filepath.Join(small.dir, "ctl"), "flush\n"), "flush once the file is gone")
	ctlWrite(filepath.Join(small.dir, "ctl"), "destroy\n")
}

// kill -9 of the daemon while batches are being pushed loses nothing that
// close(2) acknowledged: the next mount of the same state pushes what the
// journal holds, directories made in the burst included.
func TestWriteBehindKill9(t *testing.T) {
	for _, prov := range behindRows {
		t.Run("provider="+prov, func(t *testing.T) {
			state := t.TempDir()
			// A long delay: what the kill finds is full batches in flight and
			// the last files only in the journal.
			m := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, write: "behind", state: state, behindDelay: time.Hour})
			b := m.newBox(t, "k", "provider="+prov)
			m.keepBoxes = true
			// Enough files that batches go while the writes go on.
			want := burst(t, filepath.Join(b.work, "k9"), 2500)
			where := whereIs(t, b)
			require.NoError(t, m.cmd.Process.Kill())
			<-m.ended
			exec.Command("umount", "-l", m.mnt).Run()
			require.NotEqual(t, want, sortLines(where.sh(t, "cd k9 2>/dev/null && "+hashScript+"; true")),
				"the box had every file at the kill: the test shows nothing")

			m2 := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, write: "behind", state: state})
			b2 := &boxT{m: m2, name: "k", dir: filepath.Join(m2.mnt, "k"), work: filepath.Join(m2.mnt, "k", "work")}
			_, err := os.ReadDir(b2.work) // connects the box: its journal is pushed
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for ctx.Err() == nil && len(factsMap(t, b2)["dirtyFiles"].([]any)) > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			assert.Equal(t, want, sortLines(boxSees(t, b2, "cd k9 && "+hashScript)))
		})
	}
}

// In write=behind a barrier sends what is dirty in batches, not a round
// trip per file: a ctl flush of 600 small files closed dirty (in ten
// directories the host made) is one batch on the agent channel, a few
// requests as facts.json counts them, and the box has every file after it.
func TestWriteBehindFlushRoundTrips(t *testing.T) {
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 20 * time.Second, attr: time.Minute, write: "behind", behindDelay: time.Hour})
	b := m.newBox(t, "fl", "provider=docker")
	const n = 600
	want := burst(t, filepath.Join(b.work, "many"), n)
	dirty, _ := factsMap(t, b)["dirtyFiles"].([]any)
	require.Len(t, dirty, n, "the burst is dirty before the flush")
	before := roundTrips(t, b)
	t0 := time.Now()
	require.NoError(t, ctlWrite(filepath.Join(b.dir, "ctl"), "flush\n"))
	took := time.Since(t0)
	trips := roundTrips(t, b) - before
	t.Logf("ctl flush of %d dirty files: %v, %d round trips", n, took, trips)
	// One batch: its tar (about 2 KiB a file) is an OPEN, WRITEs of 128
	// KiB sent without waiting for each other's answers, and a CLOSE.
	assert.LessOrEqual(t, trips, 20, "requests for a flush of %d small files", n)
	assert.Equal(t, want, sortLines(boxSees(t, b, "cd many && "+hashScript)))
}

// The journal a killed daemon left is pushed by the next mount in batches
// too: recovering 600 small files (ten directories the box never got)
// costs round trips per directory, not per file, and the box has every
// file after it.
func TestWriteBehindRecoverRoundTrips(t *testing.T) {
	state := t.TempDir()
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 20 * time.Second, write: "behind", state: state, behindDelay: time.Hour})
	b := m.newBox(t, "rc", "provider=docker")
	m.keepBoxes = true
	const n = 600
	want := burst(t, filepath.Join(b.work, "many"), n)
	where := whereIs(t, b)
	require.NoError(t, m.cmd.Process.Kill())
	<-m.ended
	exec.Command("umount", "-l", m.mnt).Run()
	require.Empty(t, where.sh(t, "ls many 2>/dev/null; true"), "the box had the burst at the kill: the test shows nothing")

	t0 := time.Now()
	m2 := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 20 * time.Second, write: "behind", state: state})
	b2 := &boxT{m: m2, name: "rc", dir: filepath.Join(m2.mnt, "rc"), work: filepath.Join(m2.mnt, "rc", "work")}
	_, err := os.ReadDir(b2.work) // connects the box: its journal is pushed
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for ctx.Err() == nil && len(factsMap(t, b2)["dirtyFiles"].([]any)) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(t0)
	trips := roundTrips(t, b2)
	t.Logf("recovery of %d journaled files: %v from the mount, %d round trips since connecting", n, took, trips)
	assert.Equal(t, want, sortLines(boxSees(t, b2, "cd many && "+hashScript)))
	assert.Less(t, trips, 100, "round trips to recover %d files", n)
}

// git writes each object under a temporary name, links it to its real
// name and unlinks the temporary one. In write=behind the link of a file
// the box does not have yet is made on the host and sent with the batch,
// so a commit of a fresh tree costs round trips per batch, not per
// object; after a ctl flush the box's own git finds the repository whole.
func TestWriteBehindGitCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed on the host: the setup installs it")
	}
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 20 * time.Second, attr: time.Minute, write: "behind", behindDelay: time.Hour})
	b := m.newBox(t, "gc", "provider=docker")
	repo := filepath.Join(b.work, "repo")
	const n = 200
	burst(t, filepath.Join(repo, "src"), n)
	before := roundTrips(t, b)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v\n%s", args, out)
		return string(out)
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "burst")
	trips := roundTrips(t, b) - before
	t.Logf("git init, add and commit of %d files in write=behind: %d round trips", n, trips)
	// Each of the 200 blobs and 11 trees is linked from a temporary name:
	// a round trip each would be over 200.
	assert.Less(t, trips, n/4, "round trips of a commit of %d new files", n)
	head := strings.TrimSpace(git("rev-parse", "HEAD"))

	require.NoError(t, ctlWrite(filepath.Join(b.dir, "ctl"), "flush\n"))
	got := boxSees(t, b, "cd repo && git -c safe.directory='*' fsck --full 2>&1 && git -c safe.directory='*' rev-parse HEAD && "+
		"git -c safe.directory='*' ls-files | wc -l && ls .git/objects/*/ | grep -c tmp_obj; true")
	assert.Equal(t, fmt.Sprintf("%s\n%d\n0\n", head, n), got, "the box's git after the flush: fsck, HEAD, files, temporary objects")
}

// rm -rf of a tree the box has, in write=behind, asks the box nothing
// until a barrier: the tree is gone through the mount at once, the box
// keeps it until the ctl flush, which removes it in a few round trips,
// not one per name; and a kill before any barrier leaves the removes
// journaled for the next mount.
func TestWriteBehindRemoveTree(t *testing.T) {
	for _, prov := range behindRows {
		t.Run("provider="+prov, func(t *testing.T) {
			state := t.TempDir()
			m := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, attr: time.Minute, write: "behind", state: state, behindDelay: time.Hour})
			b := m.newBox(t, "rt", "provider="+prov)
			where := whereIs(t, b)
			// A command in the box: the mount sees what it made once it ends.
			b.must(t, "mkdir -p tree/a tree/b kept && for i in $(seq 1 150); do echo $i > tree/a/f$i; echo $i > tree/b/g$i; done && echo k > kept/k")
			out, err := exec.Command("find", b.work, "-type", "f").Output()
			require.NoError(t, err)
			require.Equal(t, 301, len(strings.Fields(string(out))), "the tree through the mount")

			// A local box has no agent: its calls are not counted.
			trips := func() int { return 0 }
			if prov == "docker" {
				trips = func() int { return roundTrips(t, b) }
			}
			before := trips()
			require.NoError(t, exec.Command("rm", "-rf", filepath.Join(b.work, "tree")).Run())
			took := trips() - before
			_, err = os.Lstat(filepath.Join(b.work, "tree"))
			assert.True(t, errors.Is(err, os.ErrNotExist), "tree through the mount after rm -rf: %v", err)
			assert.Equal(t, "yes\n", where.sh(t, "test -d tree && echo yes"), "the box keeps the tree until a barrier")
			queued, _ := factsMap(t, b)["pendingRemoves"].([]any)
			assert.Len(t, queued, 303, "facts.json's pendingRemoves: 300 files, 3 directories")
			t.Logf("rm -rf of 303 names: %d round trips", took)
			assert.LessOrEqual(t, took, 5, "round trips of rm -rf before the barrier")

			ents, err := os.ReadDir(b.work)
			require.NoError(t, err)
			var listed []string
			for _, e := range ents {
				listed = append(listed, e.Name())
			}
			assert.Equal(t, []string{"kept"}, listed, "the workspace through the mount")

			before = trips()
			require.NoError(t, ctlWrite(filepath.Join(b.dir, "ctl"), "flush\n"))
			took = trips() - before
			t.Logf("ctl flush of 303 removes: %d round trips", took)
			assert.LessOrEqual(t, took, 10, "round trips of the flush of 303 removes (one batch)")
			assert.Equal(t, "gone\n", where.sh(t, "test -e tree || echo gone"), "the box after the flush")
			assert.Nil(t, factsMap(t, b)["pendingRemoves"], "facts.json after the flush")
			assert.Equal(t, "k\n", where.sh(t, "cat kept/k"))

			// A kill before any barrier: the next mount sends the removes.
			b.must(t, "mkdir -p again && echo 1 > again/x && echo 2 > again/y")
			_, err = os.ReadDir(filepath.Join(b.work, "again"))
			require.NoError(t, err)
			require.NoError(t, exec.Command("rm", "-rf", filepath.Join(b.work, "again")).Run())
			m.keepBoxes = true
			require.NoError(t, m.cmd.Process.Kill())
			<-m.ended
			exec.Command("umount", "-l", m.mnt).Run()
			require.Equal(t, "yes\n", where.sh(t, "test -d again && echo yes"), "the box had the removes at the kill: the test shows nothing")

			m2 := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, write: "behind", state: state})
			b2 := &boxT{m: m2, name: "rt", dir: filepath.Join(m2.mnt, "rt"), work: filepath.Join(m2.mnt, "rt", "work")}
			_, err = os.Lstat(filepath.Join(b2.work, "again"))
			assert.True(t, errors.Is(err, os.ErrNotExist), "the removed tree after the restart: %v", err)
			require.NoError(t, ctlWrite(filepath.Join(b2.dir, "ctl"), "flush\n"))
			assert.Equal(t, "gone\n", where.sh(t, "test -e again || echo gone"), "the box after the next mount's flush")
		})
	}
}
