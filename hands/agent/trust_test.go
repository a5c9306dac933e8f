//go:build linux

package agent

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/boxfsbin"
)

// TestChannelDistrustsPlantedBinary: a file of the binary's size at the
// agent's shared path that another user made, that others may write, or
// that is a symbolic link, is never run; the agent goes in a private
// directory next to it (0700, the box user's), and the file is left as it
// was. A temporary directory that others may write and that is not sticky
// is passed over.
func TestChannelDistrustsPlantedBinary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to plant a file another user owns")
	}
	bin, err := readBinaryInfo(boxfsbin.Path(t))
	require.NoError(t, err)
	base := boxKinds[0].make(t)

	// plant writes, at the shared path in a fresh sticky temporary
	// directory, a script of the binary's size that leaves a mark when run,
	// then lets fix make it untrusted; it returns the box and the mark.
	plant := func(t *testing.T, fix func(p string)) (tmpBox, string, string) {
		tmp := filepath.Join(t.TempDir(), "tmp")
		require.NoError(t, os.Mkdir(tmp, 0o755))
		require.NoError(t, os.Chmod(tmp, 0o777|os.ModeSticky))
		mark := filepath.Join(t.TempDir(), "ran")
		script := "#!/bin/sh\ntouch " + mark + "\nexit 1\n"
		script += strings.Repeat("#", int(bin.size)-len(script))
		p := filepath.Join(tmp, ".boxfs-agent-"+bin.sha256[:16])
		require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
		fix(p)
		return tmpBox{Box: base, tmp: tmp}, p, mark
	}
	for _, c := range []struct {
		name string
		fix  func(p string)
	}{
		{"owner=other", func(p string) { require.NoError(t, os.Lchown(p, 65534, 65534)) }},
		{"mode=0777", func(p string) { require.NoError(t, os.Chmod(p, 0o777)) }},
		{"mode=0775", func(p string) { require.NoError(t, os.Chmod(p, 0o775)) }},
		{"symlink", func(p string) {
			other := p + ".other"
			require.NoError(t, os.Rename(p, other))
			require.NoError(t, os.Symlink(other, p))
		}},
	} {
		t.Run("planted="+c.name, func(t *testing.T) {
			box, planted, mark := plant(t, c.fix)
			before, err := os.Lstat(planted)
			require.NoError(t, err)
			ch := newChannel(t, box, 10*time.Second)
			_, err = ch.Stat(bg(t), "/")
			require.NoError(t, err, "the channel opens beside an untrusted binary")
			_, err = os.Stat(mark)
			assert.ErrorIs(t, err, os.ErrNotExist, "the planted file ran")
			dest := ch.agentPath()
			priv := path.Dir(dest)
			assert.Equal(t, box.tmp, path.Dir(priv), "the agent runs from %s", dest)
			assert.True(t, strings.HasPrefix(path.Base(priv), ".boxfs-agent."), "private directory %s", priv)
			fi, err := os.Lstat(priv)
			require.NoError(t, err)
			assert.Equal(t, os.ModeDir|0o700, fi.Mode(), "private directory's mode")
			assert.Equal(t, uint32(0), fi.Sys().(*syscall.Stat_t).Uid)
			after, err := os.Lstat(planted)
			require.NoError(t, err)
			assert.Equal(t, before.Mode(), after.Mode(), "the planted file was changed")
			assert.Equal(t, 1, ch.Stats().Uploads)
			ch.Close()

			// A later channel told where the binary went starts it there.
			next := NewChannel(box, ChannelOptions{Binary: boxfsbin.Path(t), Liveness: 10 * time.Second, InstalledAt: dest})
			t.Cleanup(func() { next.Close() })
			_, err = next.Stat(bg(t), "/")
			require.NoError(t, err)
			assert.Equal(t, dest, next.agentPath())
			assert.Zero(t, next.Stats().Uploads)
		})
	}

	t.Run("tmp=writable", func(t *testing.T) {
		if fi, err := os.Stat(fallbackDir); err != nil || !fi.IsDir() {
			t.Skipf("no %s here", fallbackDir)
		}
		tmp := filepath.Join(t.TempDir(), "tmp")
		require.NoError(t, os.Mkdir(tmp, 0o755))
		require.NoError(t, os.Chmod(tmp, 0o777)) // not sticky
		ch := newChannel(t, tmpBox{Box: base, tmp: tmp}, 10*time.Second)
		_, err := ch.Stat(bg(t), "/")
		require.NoError(t, err)
		dest := ch.agentPath()
		assert.Equal(t, fallbackDir, filepath.Dir(dest), "the agent runs from %s", dest)
		ch.Close()
		os.Remove(dest)
	})
}

func TestCheckFailure(t *testing.T) {
	for _, c := range []struct {
		name   string
		code   int
		stderr string
		want   int // the checkError's code; 0 for none
	}{
		{"missing", checkMissing, "", checkMissing},
		{"file", checkUnsafeFile, checkMark + "/tmp/x is owned by uid 7, not root or 0\n", checkUnsafeFile},
		{"dir", checkUnsafeDir, "noise\n" + checkMark + "/tmp is a symbolic link", checkUnsafeDir},
		{"agent-exit-84", checkUnsafeFile, "boxfs agent: something else", 0},
		{"agent-exit-1", 1, checkMark + "x", 0},
	} {
		t.Run("case="+c.name, func(t *testing.T) {
			ce := checkFailure(c.code, c.stderr)
			if c.want == 0 {
				assert.Nil(t, ce)
				return
			}
			require.NotNil(t, ce)
			assert.Equal(t, c.want, ce.Code)
		})
	}
}
