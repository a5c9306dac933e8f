package agent

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

// hostile is an agent that lies: it announces listings of any size, and
// its files never end.
type hostile struct{ size string }

func (h hostile) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	return listing{&statInfo{name: "x", ext: []sftp.StatExtended{{ExtType: extSize, ExtData: h.size}}}}, nil
}

func (h hostile) Fileread(r *sftp.Request) (io.ReaderAt, error) { return endless{}, nil }

// endless reads as a file of 'a' that never ends.
type endless struct{}

func (endless) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// hostileClient is a client of a hostile agent, with listings capped at
// maxListing.
func hostileClient(t *testing.T, h hostile, maxListing int) *Client {
	t.Helper()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	rs := sftp.NewRequestServer(stream{sr, sw}, sftp.Handlers{FileGet: h, FileList: h}, sftp.WithRSMaxTxPacket(maxPacket))
	go func() {
		rs.Serve()
		sw.Close() // the agent's stdout ends with it
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(ctx, cr, cw, ClientOptions{Box: "hostile", MaxListing: maxListing})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(); rs.Close() })
	return c
}

// Nothing the agent announces sizes a host allocation without a bound,
// and a listing that never ends stops at the cap: the daemon answers
// TooLarge and lives on.
func TestHostileAgentSizes(t *testing.T) {
	for _, size := range []string{strconv.Itoa(1 << 62), "9223372036854775807", "-5", "100"} {
		t.Run("size="+size, func(t *testing.T) {
			c := hostileClient(t, hostile{size: size}, 1<<20)
			_, err := c.Walk(bg(t), "/w")
			assert.Error(t, err)
			assert.Contains(t, []providers.Code{providers.TooLarge, providers.Unknown}, providers.CodeOf(err), "%v", err)
		})
	}
}

// A command's queue of output holds its window and a frame, no more: an
// agent that sends past the window is refused, not buffered without end.
func TestFrameQueueBound(t *testing.T) {
	q := newFrameQueue()
	chunk := make([]byte, cmdChunk)
	n := 0
	for q.push(outItem{typ: frameStdout, data: chunk}) {
		n++
		require.Less(t, n, 10*maxQueued/cmdChunk, "the queue never refused")
	}
	assert.Equal(t, maxQueued/cmdChunk, n)
	q.pop()
	assert.True(t, q.push(outItem{typ: frameStdout, data: chunk}), "room again once the command's writer took a chunk")
	assert.True(t, q.push(outItem{lost: &providers.Error{Code: providers.TransportLost}}), "the stream's death is always queued")
}
