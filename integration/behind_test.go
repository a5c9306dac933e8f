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
	ws, _ := factsMap(t, b)["workspace"].(string)
	require.NotEmpty(t, ws, "facts.json names no workspace")
	var cmd *exec.Cmd
	if factsMap(t, b)["provider"] == "docker" {
		cmd = exec.Command("docker", "exec", "-w", ws, boxID(t, b), "sh", "-c", script)
	} else {
		cmd = exec.Command("sh", "-c", script)
		cmd.Dir = ws
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

// In write=behind a close returns before the box has the bytes, and every
// barrier pushes everything first: a command started through exec right
// after a burst of writes sees all of them, and so does the box after an
// fsync, a ctl flush, a ctl release and an unmount.
func TestWriteBehindBarriers(t *testing.T) {
	for _, prov := range behindRows {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, write: "behind"})
			b := m.newBox(t, "wb", "provider="+prov)
			assert.Equal(t, "behind", factsMap(t, b)["write"], "facts.json says the mode")

			t.Run("exec", func(t *testing.T) {
				want := burst(t, filepath.Join(b.work, "exec"), 300)
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
				require.NoError(t, f.Sync())
				assert.Equal(t, "synced\n", boxSees(t, b, "cat fsync/last"), "the file fsync'd")
				assert.Equal(t, want, sortLines(boxSees(t, b, "cd fsync && "+hashScript+" | grep -v ' ./last$'")), "files closed before")
				f.Close()
			})
			t.Run("fsync-dir", func(t *testing.T) {
				dir := filepath.Join(b.work, "fsyncdir")
				want := burst(t, dir, 20)
				d, err := os.Open(dir)
				require.NoError(t, err)
				require.NoError(t, d.Sync())
				d.Close()
				assert.Equal(t, want, sortLines(boxSees(t, b, "cd fsyncdir && "+hashScript)))
			})
			t.Run("ctl-flush", func(t *testing.T) {
				want := burst(t, filepath.Join(b.work, "flush"), 50)
				require.NoError(t, ctlWrite(filepath.Join(b.dir, "ctl"), "flush\n"))
				assert.Equal(t, want, sortLines(boxSees(t, b, "cd flush && "+hashScript)))
			})
			t.Run("umount", func(t *testing.T) {
				want := burst(t, filepath.Join(b.work, "umount"), 50)
				m.keepBoxes = true
				ws, _ := factsMap(t, b)["workspace"].(string)
				id, provider := boxID(t, b), factsMap(t, b)["provider"]
				m.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-m.ended:
				case <-time.After(60 * time.Second):
					t.Fatal("the mount did not end within 60 s of SIGTERM")
				}
				var out []byte
				var err error
				if provider == "docker" {
					out, err = exec.Command("docker", "exec", "-w", ws, id, "sh", "-c", "cd umount && "+hashScript).CombinedOutput()
				} else {
					cmd := exec.Command("sh", "-c", "cd umount && "+hashScript)
					cmd.Dir = ws
					out, err = cmd.CombinedOutput()
				}
				require.NoError(t, err, "%s", out)
				assert.Equal(t, want, sortLines(string(out)))
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
			m := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, write: "behind", state: state})
			b := m.newBox(t, "k", "provider="+prov)
			m.keepBoxes = true
			// Enough files that batches go while the writes go on.
			want := burst(t, filepath.Join(b.work, "k9"), 2500)
			require.NoError(t, m.cmd.Process.Kill())
			<-m.ended
			exec.Command("umount", "-l", m.mnt).Run()

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
