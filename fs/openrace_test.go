package fs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// An open of a regular file whose stat of the name found a symbolic link
// there (renamed over it while the open was on its way), and whose copy is
// of the file that took the name back, answers fstat with the attributes
// of the file it reads: go-fuse answers with the node's type over the mode
// given, so the link's would show as a regular file of the link's size
// (go-fuse's posixtest OpenSymlinkRace took that for /etc/passwd opened).
func TestOpenAcrossNameTurnedLink(t *testing.T) {
	clk := fake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fp := fake.New()
	mnt, _ := serve(t, boxes.Options{
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		AttrTimeout:     time.Minute, // the kernel keeps its node of f meanwhile
		OpTimeout:       time.Minute,
		Now:             clk.Now,
	})
	w := filepath.Join(newBox(t, mnt, "a"), "work")
	p := filepath.Join(w, "f")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	f1, err := os.Open(p) // the kernel's node of the regular file
	require.NoError(t, err)
	defer f1.Close()

	ctx := context.Background()
	box := fp.Boxes()[0].Files()
	statLink, statFile := make(chan struct{}), make(chan struct{})
	for _, ch := range []chan struct{}{statLink, statFile} {
		defer func() {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}()
	}
	first := fp.On(fake.Match{Op: "Lstat", Path: "/work/f"}).Stall(statLink).Once()
	second := fp.On(fake.Match{Op: "Lstat", Path: "/work/f"}).Stall(statFile).Once()
	clk.Advance(2 * time.Minute) // what the cache knows of f is asked again

	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(p)
		done <- opened{f, err}
	}()

	// The open's stat of the name finds a link, and is already old when
	// it ends (the clock moved on meanwhile): the open asks again.
	require.Eventually(t, func() bool { return first.Hits() == 1 }, 20*time.Second, 10*time.Millisecond, "the open's stat")
	require.NoError(t, box.Symlink(ctx, "/etc/passwd", "/work/f.new"))
	require.NoError(t, box.Rename(ctx, "/work/f.new", "/work/f"))
	clk.Advance(2 * time.Minute)
	close(statLink)

	// Its second stat finds a file there again, the one the open reads.
	require.Eventually(t, func() bool { return second.Hits() == 1 }, 20*time.Second, 10*time.Millisecond, "the open's second stat")
	require.NoError(t, box.WriteFile(ctx, "/work/f.new", strings.NewReader("data"), 0o644))
	require.NoError(t, box.Rename(ctx, "/work/f.new", "/work/f"))
	close(statFile)
	o := <-done
	require.NoError(t, o.err, "open")
	defer o.f.Close()

	// A rename over the name through the mount: the kernel asks the
	// node's attributes again, of the open now that no name holds it.
	q := filepath.Join(w, "g")
	require.NoError(t, os.WriteFile(q, []byte("other file"), 0o644))
	require.NoError(t, os.Rename(q, p))
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(o.f.Fd()), &st))
	assert.Equal(t, uint32(unix.S_IFREG), st.Mode&unix.S_IFMT)
	assert.Equal(t, int64(len("data")), st.Size, "the size of the file the open reads, not of the link (%d)", len("/etc/passwd"))
	b := make([]byte, 16)
	n, err := o.f.ReadAt(b, 0)
	assert.Equal(t, "data", string(b[:n]), "read: %v", err)
}
