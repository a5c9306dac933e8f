package boxes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/providers/local"
)

// localManager is a manager over the local provider on a fresh state
// directory; opts sets the rest.
func localManager(t *testing.T, opts boxes.Options) (*boxes.Manager, string) {
	t.Helper()
	lp := local.New(t.TempDir())
	opts.StateDir = t.TempDir()
	opts.DefaultProvider = "local"
	opts.OpenProvider = func(string) (providers.Provider, error) { return lp, nil }
	opts.Logger = quiet()
	m, err := boxes.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		m.Shutdown(context.Background())
		bs, _ := lp.List(context.Background(), nil)
		for _, b := range bs {
			b.Destroy(context.Background())
		}
	})
	return m, opts.StateDir
}

// output runs line in b to its end and returns what is kept of its output.
func output(t *testing.T, b *boxes.Box, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := b.Commands().Start(ctx, line)
	require.NoError(t, err)
	for c.Running() {
		time.Sleep(10 * time.Millisecond)
	}
	var out []byte
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, at, err := c.ReadAt(ctx, buf, off)
		require.NoError(t, err)
		if n == 0 {
			break
		}
		out = append(out, buf[:n]...)
		off = at + int64(n)
	}
	return string(out)
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// A new box of a forgotten box's name starts with no commands, and a box's
// command records and cache go when it is forgotten or destroyed.
func TestCommandsBelongToTheBox(t *testing.T) {
	ctx := context.Background()
	m, state := localManager(t, boxes.Options{})
	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	assert.Equal(t, "first\n", output(t, m.Lookup("a"), "echo first"))
	require.Len(t, entries(t, filepath.Join(state, "cmds")), 1)
	require.NoError(t, m.Forget(ctx, "a"))
	assert.Empty(t, entries(t, filepath.Join(state, "cmds")), "forget removes the command records")
	assert.Empty(t, entries(t, filepath.Join(state, "cache")), "forget removes a clean cache")

	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	b := m.Lookup("a")
	assert.Empty(t, b.Commands().List(), "a new box of the same name has no history")
	assert.Equal(t, "second\n", output(t, b, "echo second"))
	assert.Equal(t, []int{1}, b.Commands().List())
	require.NoError(t, b.Destroy(ctx))
	assert.Empty(t, entries(t, filepath.Join(state, "cmds")), "destroy removes the command records")
	assert.Empty(t, entries(t, filepath.Join(state, "cache")), "destroy removes the cache")
}

// diskUsage is the bytes the files in dir take on disk.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			total += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return total
}

// A command's output is kept to its last OutputCap bytes, and a box's to
// BoxOutputCap in all, oldest first; what was cut is said.
func TestOutputCap(t *testing.T) {
	ctx := context.Background()
	const perCmd, perBox = 1 << 20, 3 << 20
	m, state := localManager(t, boxes.Options{OutputCap: perCmd, BoxOutputCap: perBox})
	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	b := m.Lookup("a")
	spew := "head -c 3000000 /dev/zero | tr '\\0' a; echo END"
	out := output(t, b, spew)
	assert.LessOrEqual(t, len(out), perCmd)
	assert.Greater(t, len(out), perCmd/2)
	assert.True(t, strings.HasSuffix(out, "aaaaEND\n"))
	c := b.Commands().Get(1)
	assert.Contains(t, c.Cut(), "bytes of its output were dropped")
	assert.LessOrEqual(t, diskUsage(t, filepath.Join(state, "cmds")), int64(perCmd+64<<10))

	for i := 0; i < 4; i++ {
		assert.True(t, strings.HasSuffix(output(t, b, spew), "END\n"))
	}
	assert.LessOrEqual(t, diskUsage(t, filepath.Join(state, "cmds")), int64(perBox+64<<10))
	assert.Contains(t, b.Commands().Get(1).Cut(), "3000004 bytes of its output were dropped")
	n, at, err := b.Commands().Get(1).ReadAt(ctx, make([]byte, 10), 0)
	assert.NoError(t, err)
	assert.Equal(t, 0, n, "nothing of the oldest command's output is kept")
	assert.Equal(t, int64(3000004), at)

	// Kept across a new manager on the same state.
	m2, err := boxes.New(boxes.Options{StateDir: state, DefaultProvider: "local", Logger: quiet(),
		OpenProvider: func(string) (providers.Provider, error) {
			return nil, providers.Errorf(providers.Unavailable, "test", "not opened")
		}})
	require.NoError(t, err)
	assert.Contains(t, m2.Lookup("a").Commands().Get(2).Cut(), "bytes of its output were dropped")
}

// Destroying a box an earlier process destroyed (or its provider ended)
// is not an error: it is gone, as asked.
func TestDestroyAlreadyGone(t *testing.T) {
	ctx := context.Background()
	fp := fake.New()
	state := t.TempDir()
	open := func() *boxes.Manager {
		m, err := boxes.New(boxes.Options{StateDir: state, DefaultProvider: "fake", Logger: quiet(),
			OpenProvider: func(string) (providers.Provider, error) { return fp, nil }})
		require.NoError(t, err)
		return m
	}
	first := open()
	require.NoError(t, first.Create(ctx, "a", "", providers.Spec{}))
	require.Len(t, fp.Boxes(), 1)
	require.NoError(t, fp.Boxes()[0].Destroy(ctx))

	second := open()
	assert.NoError(t, second.Destroy(ctx, "a"))
	assert.Equal(t, boxes.StateGone, second.Lookup("a").Info().State)
	assert.NoError(t, second.Forget(ctx, "a"))
}

// panicky is a provider whose command processes panic in Wait when their
// argv holds PANIC: what a broken answer from a box could do deep in a
// provider.
type panicky struct{ *fake.Provider }

func (p panicky) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	b, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return panickyBox{b}, nil
}

type panickyBox struct{ providers.Box }

func (b panickyBox) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	pr, err := b.Box.Exec(ctx, req)
	if err == nil && strings.Contains(strings.Join(req.Argv, " "), "PANIC") {
		return panickyProc{pr}, nil
	}
	return pr, err
}

type panickyProc struct{ providers.Process }

func (p panickyProc) Wait() (int, error) {
	p.Process.Wait()
	panic("a box's answer broke the host")
}

// A panic in the work done for one box's command ends that command (lost,
// said in err), not the process serving every box.
func TestPanicForOneBoxIsContained(t *testing.T) {
	ctx := context.Background()
	fp := fake.New()
	fp.Program("sh", func(ctx context.Context, pc *fake.Proc) int { return 0 })
	m, err := boxes.New(boxes.Options{StateDir: t.TempDir(), DefaultProvider: "fake", Logger: quiet(),
		OpenProvider: func(string) (providers.Provider, error) { return panicky{fp}, nil }})
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown(ctx) })
	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	b := m.Lookup("a")
	c, err := b.Commands().Start(ctx, "echo PANIC")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !c.Running() }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, boxes.StatusLost, c.Status())
	assert.Contains(t, b.Err(), "panic")
	c2, err := b.Commands().Start(ctx, "echo fine")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !c2.Running() }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "exit 0", c2.Status())
}
