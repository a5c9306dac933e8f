package fs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Named pipes, sockets and devices are made in the box: the box's own
// stat shows them, with the mode asked for and the device number, and
// the mount shows the same.
func TestMknod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("device nodes need root")
	}
	mnt := mount(t)
	w := filepath.Join(newBox(t, mnt, "a"), "work")
	unix.Umask(0)
	t.Cleanup(func() { unix.Umask(0o022) })
	require.NoError(t, unix.Mkfifo(filepath.Join(w, "fifo"), 0o640))
	require.NoError(t, unix.Mknod(filepath.Join(w, "chr"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	require.NoError(t, unix.Mknod(filepath.Join(w, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(259, 70000))))
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(w, "sock")}))
	require.NoError(t, unix.Listen(fd, 1))

	assert.Equal(t, "blk b 600 259:70000\nchr c 666 1:3\nfifo p 640 0:0\nsock s 777 0:0\n",
		run(t, mnt, "a", `for f in blk chr fifo sock; do printf '%s %s %s %d:%d\n' $f "$(stat -c %F "$f" | cut -c1 | tr 'cbfs' 'cbps')" $(stat -c '%a 0x%t 0x%T' "$f"); done`))
	for name, want := range map[string]string{"fifo": "p 0640 0:0", "chr": "c 0666 1:3", "blk": "b 0600 259:70000", "sock": "s 0777 0:0"} {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(filepath.Join(w, name), &st), name)
		kind := map[uint32]string{unix.S_IFIFO: "p", unix.S_IFCHR: "c", unix.S_IFBLK: "b", unix.S_IFSOCK: "s"}[st.Mode&unix.S_IFMT]
		assert.Equal(t, want, kind+" "+fmtMode(st.Mode)+" "+fmtDev(st.Rdev), name)
	}

	// A host program reaches the socket it bound in work/ (the host's
	// kernel keeps the socket).
	c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer unix.Close(c)
	assert.NoError(t, unix.Connect(c, &unix.SockaddrUnix{Name: filepath.Join(w, "sock")}))

	// The mount is nodev: a box's device node does not open the host's.
	_, err = os.Open(filepath.Join(w, "chr"))
	assert.ErrorIs(t, err, os.ErrPermission)
	// A name taken is EEXIST, from the box.
	assert.ErrorIs(t, unix.Mkfifo(filepath.Join(w, "chr"), 0o600), unix.EEXIST)
}

func fmtMode(m uint32) string { return "0" + strconv.FormatUint(uint64(m&0o7777), 8) }

func fmtDev(d uint64) string { return fmt.Sprintf("%d:%d", unix.Major(d), unix.Minor(d)) }
