package fs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A file renamed over while open keeps its own attributes for fstat,
// as on a local disk, even when its name now holds a file of another
// kind (here a symbolic link, made in the box behind the mount's back);
// a stat by name shows the new file.
func TestFstatOfReplacedFile(t *testing.T) {
	mnt := mount(t)
	w := filepath.Join(newBox(t, mnt, "a"), "work")
	p := filepath.Join(w, "f")
	require.NoError(t, os.WriteFile(p, []byte("abc"), 0o640))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()

	run(t, mnt, "a", "ln -s /etc/passwd f.new && mv -f f.new f")
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st), "fstat of the open file")
	assert.Equal(t, uint32(unix.S_IFREG|0o640), st.Mode, "the open file's own type and mode")
	assert.Equal(t, int64(3), st.Size)
	b := make([]byte, 10)
	n, err := f.ReadAt(b, 0)
	assert.Equal(t, "abc", string(b[:n]), "read: %v", err)

	require.NoError(t, unix.Lstat(p, &st))
	assert.Equal(t, uint32(unix.S_IFLNK), st.Mode&unix.S_IFMT, "the name shows the new file")
}

// An fstat of a file unlinked while open shows the writes made through
// any of its opens. The kernel names no open in an fstat's getattr, and
// go-fuse then answers through the node's oldest open (here, one made
// before the write, as a create's open is while its release is on the
// way).
func TestFstatOfUnlinkedFileSeesWritesOfOtherOpens(t *testing.T) {
	mnt := mount(t)
	p := filepath.Join(newBox(t, mnt, "a"), "work", "f")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	older, err := os.Open(p)
	require.NoError(t, err)
	defer older.Close()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, os.Remove(p))

	for i := 1; i <= 3; i++ {
		_, err := f.Write([]byte("x"))
		require.NoError(t, err)
		for _, fd := range []*os.File{f, older} {
			var st unix.Stat_t
			require.NoError(t, unix.Fstat(int(fd.Fd()), &st))
			assert.Equal(t, int64(i), st.Size, "size after %d bytes written", i)
			assert.Equal(t, uint64(0), st.Nlink, "links of an unlinked file")
		}
	}
}
