package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A daemon killed while a host program holds writes to two files that it
// has not closed: at the next mount, the file the box left alone gets the
// host's bytes, and the one the box changed meanwhile keeps the box's,
// the host's going beside it as NAME.boxfs-recovered-1, which err names.
// (A local box's files are written in place: they have the bytes at once.)
func TestRecoveryKeepsTheBoxsLaterChange(t *testing.T) {
	for _, prov := range behindRows {
		t.Run("provider="+prov, func(t *testing.T) {
			state := t.TempDir()
			m := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, state: state})
			b := m.newBox(t, "rc", "provider="+prov)
			b.must(t, "printf 'old f\\n' > f && printf 'old g\\n' > g")
			where := whereIs(t, b)
			m.keepBoxes = true
			// Opened and written, not closed; nothing forks while they are
			// open (a child's copy of a descriptor closes, and that is a
			// flush, which pushes).
			var open []*os.File
			for _, name := range []string{"f", "g"} {
				fh, err := os.OpenFile(filepath.Join(b.work, name), os.O_WRONLY|os.O_TRUNC, 0)
				require.NoError(t, err)
				_, err = fh.WriteString("host's unpushed " + name + "\n")
				require.NoError(t, err)
				open = append(open, fh)
			}
			require.NoError(t, m.cmd.Process.Kill())
			<-m.ended
			for _, fh := range open {
				fh.Close() // the daemon is gone: an error, and no push
			}
			exec.Command("umount", "-l", m.mnt).Run()
			if prov == "local" {
				// A local box's own files are written in place: each
				// write was in the box when it returned, and nothing is
				// left to recover.
				assert.Equal(t, "host's unpushed f\n", where.sh(t, "cat f"), "the host's write, in the box before the kill")
				assert.Equal(t, "host's unpushed g\n", where.sh(t, "cat g"))
				m2 := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, state: state})
				b2 := &boxT{m: m2, name: "rc", dir: filepath.Join(m2.mnt, "rc"), work: filepath.Join(m2.mnt, "rc", "work")}
				_, err := os.ReadDir(b2.work)
				require.NoError(t, err)
				assert.Empty(t, factsMap(t, b2)["dirtyFiles"], "journaled files after the restart")
				assert.Equal(t, "f\ng\n", where.sh(t, "LC_ALL=C ls"), "no recovered copies")
				return
			}
			assert.Equal(t, "old f\n", where.sh(t, "cat f"), "the kill came before any push")
			where.sh(t, "printf 'the box wrote f later\\n' > f")

			m2 := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, state: state})
			b2 := &boxT{m: m2, name: "rc", dir: filepath.Join(m2.mnt, "rc"), work: filepath.Join(m2.mnt, "rc", "work")}
			_, err := os.ReadDir(b2.work) // connects the box: its journal is pushed
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for ctx.Err() == nil && len(factsMap(t, b2)["dirtyFiles"].([]any)) > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			assert.Equal(t, "the box wrote f later\n", where.sh(t, "cat f"), "the box's later change keeps the name")
			assert.Equal(t, "host's unpushed f\n", where.sh(t, "cat f.boxfs-recovered-1"), "the host's writes beside it")
			assert.Equal(t, "host's unpushed g\n", where.sh(t, "cat g"), "a file the box left alone gets the host's writes")
			assert.Equal(t, "f\nf.boxfs-recovered-1\ng\n", where.sh(t, "LC_ALL=C ls"), "one recovered copy, of f")
			errText, err := os.ReadFile(filepath.Join(b2.dir, "err"))
			require.NoError(t, err)
			assert.Contains(t, string(errText), "work/f.boxfs-recovered-1", "err says where the host's writes went")
			assert.Contains(t, m2.log.String(), "f.boxfs-recovered-1", "and the log")
			got, err := os.ReadFile(filepath.Join(b2.work, "f"))
			require.NoError(t, err)
			assert.Equal(t, "the box wrote f later\n", string(got), "through the mount")
		})
	}
}
