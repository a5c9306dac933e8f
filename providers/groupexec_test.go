package providers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

// fakeCommand plays a box's side of one command for a GroupProcess: a
// stream that ends when the command exits or its group is killed.
type fakeCommand struct {
	g      *providers.GroupProcess
	exit   chan int // the command's exit code
	killed atomic.Int32
	closed atomic.Int32
	ending bool
	code   int
}

func newFake(stdout io.Writer) *fakeCommand {
	f := &fakeCommand{exit: make(chan int, 1)}
	f.g = providers.NewGroupProcess(providers.GroupHooks{
		Op: "fake.Exec", Box: "b1", Dir: "/w",
		KillGroup: func(context.Context) error {
			f.killed.Add(1)
			select {
			case f.exit <- 137:
			default:
			}
			return nil
		},
		CloseStream: func() { f.closed.Add(1) },
		Outcome: func(_ context.Context, killed bool) (int, error) {
			return f.code, nil
		},
		Ending: func(context.Context) bool { return f.ending },
		NoStart: func(code int) error {
			return providers.Errorf(providers.Unsupported, "fake.Exec", "no shell (exit %d)", code)
		},
	}, stdout, nil)
	return f
}

// run starts the stream: the marker, some output, then the exit.
func (f *fakeCommand) run(marker byte, out string) {
	go func() {
		f.g.SetMarker(marker)
		if marker == providers.MarkerStarted {
			f.g.Stdout().Put([]byte(out))
			f.code = <-f.exit
		}
		f.g.StreamEnded()
	}()
}

func TestGroupProcessExit(t *testing.T) {
	var out bytes.Buffer
	f := newFake(&out)
	f.run(providers.MarkerStarted, "hello")
	require.NoError(t, f.g.Start(context.Background()))
	f.exit <- 3
	code, err := f.g.Wait()
	require.NoError(t, err)
	assert.Equal(t, 3, code)
	assert.Equal(t, "hello", out.String())
	assert.Zero(t, f.killed.Load(), "a command that exits is not killed")
}

func TestGroupProcessDirMarkers(t *testing.T) {
	for marker, errno := range map[byte]syscall.Errno{
		providers.MarkerNoDir: syscall.ENOENT, providers.MarkerNotDir: syscall.ENOTDIR, providers.MarkerDirDenied: syscall.EACCES,
	} {
		f := newFake(nil)
		f.run(marker, "")
		err := f.g.Start(context.Background())
		assert.ErrorIs(t, err, errno, "marker %d", marker)
	}
	f := newFake(nil)
	f.run(9, "")
	assert.Equal(t, providers.Unknown, providers.CodeOf(f.g.Start(context.Background())), "a marker nobody defined")
}

func TestGroupProcessCancel(t *testing.T) {
	f := newFake(nil)
	f.run(providers.MarkerStarted, "")
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, f.g.Start(ctx))
	cancel()
	_, err := f.g.Wait()
	assert.Equal(t, providers.Aborted, providers.CodeOf(err), "%v", err)
	assert.True(t, errors.Is(err, context.Canceled))
	assert.Equal(t, int32(1), f.killed.Load(), "the group is killed once")
	assert.Positive(t, f.closed.Load(), "the stream is closed at the end")
}

func TestGroupProcessKill(t *testing.T) {
	f := newFake(nil)
	f.run(providers.MarkerStarted, "")
	require.NoError(t, f.g.Start(context.Background()))
	require.NoError(t, f.g.Kill(context.Background()))
	code, err := f.g.Wait()
	require.NoError(t, err)
	assert.Equal(t, 137, code, "a killed command reports its signal")
	assert.NoError(t, f.g.Kill(context.Background()), "killing an ended command is not an error")
	assert.Equal(t, int32(1), f.killed.Load())
}

func TestGroupProcessBoxEnded(t *testing.T) {
	f := newFake(nil)
	f.ending = true
	f.run(providers.MarkerStarted, "")
	require.NoError(t, f.g.Start(context.Background()))
	f.exit <- 137 // killed by the box's end, not by us
	_, err := f.g.Wait()
	assert.Equal(t, providers.Gone, providers.CodeOf(err), "%v", err)
}

func TestGroupProcessNoStart(t *testing.T) {
	f := newFake(nil)
	go f.g.StreamEnded() // the stream ended with no marker
	err := f.g.Start(context.Background())
	assert.Equal(t, providers.Unsupported, providers.CodeOf(err), "%v", err)
	f = newFake(nil)
	f.ending = true
	go f.g.StreamEnded()
	assert.Equal(t, providers.Gone, providers.CodeOf(f.g.Start(context.Background())))
}
