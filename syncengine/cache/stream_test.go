package cache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// bigBox is a fake box with one more file of its own, as a sparse file of
// the box: size bytes, zero but for an 8-byte marker every markEvery
// bytes (the marker's number, from 1). Its attributes claim claim bytes,
// which a hostile box makes smaller than what it sends.
type bigBox struct {
	cache.Remote
	name  string // box-side path
	size  int64
	claim int64
	// sent, when set, is told of each part of a whole-file read, with the
	// bytes sent so far.
	sent func(n int64)
}

const markEvery = 256 << 20

var bigTime = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// fill writes the big file's bytes at off into p.
func fill(p []byte, off int64) {
	clear(p)
	for k := off / markEvery; k*markEvery < off+int64(len(p)); k++ {
		var m [8]byte
		binary.BigEndian.PutUint64(m[:], uint64(k+1))
		at := k * markEvery
		for i := range m {
			if j := at + int64(i) - off; j >= 0 && j < int64(len(p)) {
				p[j] = m[i]
			}
		}
	}
}

func (b *bigBox) info() providers.FileInfo {
	return providers.FileInfo{Name: path.Base(b.name), Mode: 0o644, Size: b.claim, Mtime: bigTime, Nlink: 1, Ino: 99}
}

func (b *bigBox) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	if name == b.name {
		return b.info(), nil
	}
	return b.Remote.Stat(ctx, name)
}

func (b *bigBox) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	if name == b.name {
		return b.info(), nil
	}
	return b.Remote.Lstat(ctx, name)
}

func (b *bigBox) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	out, err := b.Remote.ReadDir(ctx, name)
	if err == nil && name == path.Dir(b.name) {
		out = append(out, b.info())
		slices.SortFunc(out, func(x, y providers.FileInfo) int { return strings.Compare(x.Name, y.Name) })
	}
	return out, err
}

func (b *bigBox) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	out, err := b.Remote.Walk(ctx, root)
	if err == nil && root == path.Dir(b.name) {
		out = append(out, b.info())
		slices.SortFunc(out, func(x, y providers.FileInfo) int { return strings.Compare(x.Name, y.Name) })
	}
	return out, err
}

func (b *bigBox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	if name == b.name {
		return io.NopCloser(&bigReader{b: b}), nil
	}
	return b.Remote.ReadFile(ctx, name)
}

func (b *bigBox) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if name != b.name {
		return b.Remote.ReadAt(ctx, name, p, off)
	}
	if off >= b.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.size-off))
	fill(p[:n], off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

type bigReader struct {
	b   *bigBox
	off int64
}

func (r *bigReader) Read(p []byte) (int, error) {
	n, err := r.b.ReadAt(context.Background(), r.b.name, p, r.off)
	r.off += int64(n)
	if r.b.sent != nil {
		r.b.sent(r.off)
	}
	return n, err
}

// diskUse is the disk the files under dir take (their blocks: a sparse
// file counts what it holds).
func diskUse(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// A file larger than the cache budget is read from the box as it is, a
// window at a time, with no copy on the host: a 4 GiB sparse file read
// whole through a 512 MiB budget gives its bytes, and the cache's
// directory stays within the budget (it holds nothing of the file).
func TestHugeFileIsStreamedNotCopied(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 4 GiB")
	}
	_, _, r := fakeBox(t)
	const size, budgetMax = 4 << 30, 512 << 20
	b := &bigBox{Remote: r, name: root + "/huge", size: size, claim: size}
	dir := t.TempDir()
	budget := cache.NewBudget(budgetMax)
	c, err := cache.Open(b, cache.Options{Dir: dir, Root: root, Box: "test", Budget: budget})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	h, _, err := c.OpenFile(t.Context(), "huge", syscall.O_RDONLY)
	require.NoError(t, err)
	defer h.Release(t.Context())
	assert.True(t, h.Streamed())

	// Read it through as the kernel does, 128 KiB at a time, checking
	// every byte and the disk the cache takes as it goes.
	buf, want := make([]byte, 128<<10), make([]byte, 128<<10)
	sum := sha256.New()
	var off, peak int64
	for {
		n, err := h.Read(t.Context(), buf, off)
		require.NoError(t, err)
		if n == 0 {
			break
		}
		fill(want[:n], off)
		if !bytes.Equal(buf[:n], want[:n]) {
			t.Fatalf("bytes at %d differ from the box's", off)
		}
		if off%markEvery < int64(len(buf)) {
			sum.Write(buf[:n]) // a range at each marker
			peak = max(peak, diskUse(t, dir))
		}
		off += int64(n)
	}
	assert.Equal(t, int64(size), off, "read to the end")
	assert.LessOrEqual(t, peak, int64(budgetMax+1<<20), "the cache's disk while reading")
	assert.Zero(t, budget.Used(), "nothing charged")
	t.Logf("read %d bytes; cache dir peak %d bytes; sha256 of the marker ranges %x", off, peak, sum.Sum(nil))

	// An open for writing (not truncating) is refused.
	_, _, err = c.OpenFile(t.Context(), "huge", syscall.O_RDWR)
	require.Error(t, err)
	assert.Equal(t, providers.TooLarge, providers.CodeOf(err), "%v", err)
}

// A box that claims a small file and sends a large one cannot make the
// host write more than the budget: the fetch stops where the budget is
// full, the copy goes, and the file is read from the box instead, all of
// its bytes.
func TestFetchStopsAtTheBudget(t *testing.T) {
	_, _, r := fakeBox(t)
	const budgetMax = 8 << 20
	b := &bigBox{Remote: r, name: root + "/liar", size: 64 << 20, claim: 1 << 20}
	dir := t.TempDir()
	var peak int64
	b.sent = func(int64) { peak = max(peak, diskUse(t, dir)) }
	budget := cache.NewBudget(budgetMax)
	c, err := cache.Open(b, cache.Options{Dir: dir, Root: root, Box: "test", Budget: budget})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	h, _, err := c.OpenFile(t.Context(), "liar", syscall.O_RDONLY)
	require.NoError(t, err)
	defer h.Release(t.Context())
	assert.True(t, h.Streamed(), "the box sent more than the budget holds")
	assert.LessOrEqual(t, peak, int64(budgetMax+(1<<20)), "the cache's disk while fetching")
	assert.LessOrEqual(t, diskUse(t, dir), int64(1<<20), "the partial copy went")
	assert.Zero(t, budget.Used())

	got := make([]byte, 64<<20)
	n, err := h.Read(t.Context(), got, 0)
	require.NoError(t, err)
	want := make([]byte, 64<<20)
	fill(want, 0)
	assert.Equal(t, len(want), n)
	assert.True(t, bytes.Equal(want, got[:n]), "the bytes read are the box's")
}

// A file within the budget is still copied, room made for it first by
// removing the least recently used clean copy, so the host never holds
// both.
func TestFetchMakesRoomFirst(t *testing.T) {
	_, _, r := fakeBox(t)
	const budgetMax = 8 << 20
	boxWrite(t, r, "old", strings.Repeat("o", 5<<20))
	b := &bigBox{Remote: r, name: root + "/new", size: 6 << 20, claim: 6 << 20}
	dir := t.TempDir()
	var peak int64
	b.sent = func(int64) { peak = max(peak, diskUse(t, dir)) }
	budget := cache.NewBudget(budgetMax)
	c, err := cache.Open(b, cache.Options{Dir: dir, Root: root, Box: "test", Budget: budget})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	got, _ := read(t, c, "old")
	require.Equal(t, strings.Repeat("o", 1<<16), got)
	h, _, err := c.OpenFile(t.Context(), "new", syscall.O_RDONLY)
	require.NoError(t, err)
	defer h.Release(t.Context())
	assert.False(t, h.Streamed(), "it fits")
	assert.LessOrEqual(t, peak, int64(budgetMax), "the cache's disk while fetching")
	assert.Equal(t, int64(6<<20), budget.Used())
	buf := make([]byte, 6<<20)
	n, err := h.ReadAt(buf, 0)
	require.NoError(t, err)
	want := make([]byte, 6<<20)
	fill(want, 0)
	assert.True(t, bytes.Equal(want, buf[:n]))
	_, err = os.Stat(dir)
	require.NoError(t, err)
}

// While the copies that must stay (open ones) leave no room, a file
// opened for reading is read from the box; one opened for writing is
// copied all the same when it fits the budget by itself.
func TestOpenWhileTheBudgetIsHeld(t *testing.T) {
	_, _, r := fakeBox(t)
	const budgetMax = 8 << 20
	boxWrite(t, r, "old", strings.Repeat("o", 5<<20))
	b := &bigBox{Remote: r, name: root + "/new", size: 6 << 20, claim: 6 << 20}
	budget := cache.NewBudget(budgetMax)
	c, err := cache.Open(b, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Budget: budget})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	held, _, err := c.OpenFile(t.Context(), "old", syscall.O_RDONLY)
	require.NoError(t, err)
	defer held.Release(t.Context())
	want := make([]byte, 6<<20)
	fill(want, 0)
	got := make([]byte, 6<<20)

	rd, _, err := c.OpenFile(t.Context(), "new", syscall.O_RDONLY)
	require.NoError(t, err)
	assert.True(t, rd.Streamed(), "no room beside the open copy")
	n, err := rd.Read(t.Context(), got, 0)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got[:n]))
	rd.Release(t.Context())

	wr, _, err := c.OpenFile(t.Context(), "new", syscall.O_RDWR)
	require.NoError(t, err)
	defer wr.Release(t.Context())
	assert.False(t, wr.Streamed(), "a file opened for writing is copied")
	n, err = wr.ReadAt(got, 0)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got[:n]))
}

// A streamed open shows the host's own writes once they are closed
// (F-own): the window it read before is dropped.
func TestStreamShowsTheHostsWrites(t *testing.T) {
	_, _, r := fakeBox(t)
	boxWrite(t, r, "f", strings.Repeat("a", 2<<20))
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Budget: cache.NewBudget(1 << 20)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	rd, _, err := c.OpenFile(t.Context(), "f", syscall.O_RDONLY)
	require.NoError(t, err)
	defer rd.Release(t.Context())
	require.True(t, rd.Streamed())
	buf := make([]byte, 8)
	n, err := rd.Read(t.Context(), buf, 0)
	require.NoError(t, err)
	require.Equal(t, "aaaaaaaa", string(buf[:n]))

	wr, _, err := c.OpenFile(t.Context(), "f", syscall.O_WRONLY|syscall.O_TRUNC)
	require.NoError(t, err)
	_, err = wr.WriteAt([]byte("host"), 0)
	require.NoError(t, err)
	n, err = rd.Read(t.Context(), buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "host", string(buf[:n]), "while dirty")
	require.NoError(t, wr.Flush(t.Context()))
	wr.Release(t.Context())
	n, err = rd.Read(t.Context(), buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "host", string(buf[:n]), "once pushed")
}

// An open holding a copy of a file the box then grows past the budget
// reads the box's file from its next renewal (tail -f of a growing log).
func TestCopyGrownPastTheBudgetIsStreamed(t *testing.T) {
	_, _, r := fakeBox(t)
	boxWrite(t, r, "log", "first\n")
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", Budget: cache.NewBudget(1 << 20)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	h, _, err := c.OpenFile(t.Context(), "log", syscall.O_RDONLY)
	require.NoError(t, err)
	defer h.Release(t.Context())
	require.False(t, h.Streamed())

	grown := "first\n" + strings.Repeat("x", 2<<20)
	boxWrite(t, r, "log", grown)
	c.Invalidate()
	renewed, err := h.Renew(t.Context())
	require.NoError(t, err)
	assert.True(t, renewed)
	assert.True(t, h.Streamed())
	buf := make([]byte, len(grown)+10)
	n, err := h.Read(t.Context(), buf, 0)
	require.NoError(t, err)
	assert.Equal(t, grown, string(buf[:n]))
}
