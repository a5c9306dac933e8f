package agent

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// The command stream: "boxfs agent -commands" runs commands for the host
// over its stdin and stdout, many at once, so that a command costs a frame
// or two instead of a provider exec. It is a second long-lived exec beside
// the SFTP one: pkg/sftp answers in order, and a command's output must not
// wait behind a file read, nor the reverse.
//
// A frame is a 4-byte big-endian length (of what follows), a type byte, a
// 4-byte command id, and a payload. Output and stdin are credit-windowed
// per command (cmdWindow bytes unacknowledged), so one slow reader never
// stalls the stream for the others.
const (
	// host → box
	frameStart    = 'S' // JSON cmdStart
	frameStdin    = 'I' // bytes for the command's stdin
	frameStdinEOF = 'C' // close the command's stdin
	frameKill     = 'K' // kill the command's group; answered by frameKilled
	frameOutAck   = 'A' // 4 bytes: output bytes the host has taken
	framePing     = 'P' // answered by framePong
	// box → host
	frameHello   = 'h' // JSON cmdHello, once, first
	frameStarted = 's' // JSON cmdStarted
	frameFailed  = 'f' // JSON cmdFailed: the command did not start
	frameStdout  = 'o'
	frameStderr  = 'e'
	frameInAck   = 'a' // 4 bytes: stdin bytes the command has taken
	frameExit    = 'x' // JSON cmdExit: the leader ended and its output is drained
	frameKilled  = 'k' // JSON cmdKilled: answer to frameKill
	framePong    = 'p'
)

const (
	// cmdWindow is how many bytes of one command's output (or stdin) may
	// be sent and not yet acknowledged.
	cmdWindow = 1 << 20
	// cmdChunk is the largest data payload.
	cmdChunk = 32 << 10
	// maxCmdFrame bounds any frame's payload (a start carries an argv and
	// an environment: ARG_MAX is 2 MiB).
	maxCmdFrame = 8 << 20
	// cmdProtocol is the version the hello names.
	cmdProtocol = 1
)

type cmdHello struct {
	Protocol int `json:"protocol"`
	Pid      int `json:"pid"`
}

// cmdStart starts a command. Record, when set, is written into the box as
// Record.Dir/Record.ID ("pgid pid starttime owner") while the leader runs,
// the same record hands' scripts write, for EndLeftCommands.
//
// Strings that may hold any bytes travel as []byte (base64 in JSON, which
// would otherwise replace invalid UTF-8).
type cmdStart struct {
	Argv   [][]byte   `json:"argv"`
	Env    [][]byte   `json:"env,omitempty"` // K=V on top of the agent's own
	Dir    []byte     `json:"dir"`
	Stdin  bool       `json:"stdin,omitempty"`
	Stdout bool       `json:"stdout,omitempty"`
	Stderr bool       `json:"stderr,omitempty"`
	Merge  bool       `json:"merge,omitempty"` // stdout and stderr through one pipe, as 'o'
	Record *cmdRecord `json:"record,omitempty"`
}

type cmdRecord struct {
	Dir   []byte `json:"dir"`
	ID    string `json:"id"`
	Owner string `json:"owner"`
}

type cmdStarted struct {
	Pid int `json:"pid"`
}

type cmdFailed struct {
	Errno   int    `json:"errno,omitempty"`
	Message string `json:"message"`
}

type cmdExit struct {
	Code int `json:"code"` // 128+n for a signal n
}

type cmdKilled struct {
	Error string `json:"error,omitempty"` // the group outlived the kill
}

// frameWriter writes whole frames, one at a time.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (fw *frameWriter) write(typ byte, id uint32, payload []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.buf = fw.buf[:0]
	fw.buf = binary.BigEndian.AppendUint32(fw.buf, uint32(5+len(payload)))
	fw.buf = append(fw.buf, typ)
	fw.buf = binary.BigEndian.AppendUint32(fw.buf, id)
	fw.buf = append(fw.buf, payload...)
	_, err := fw.w.Write(fw.buf)
	if cap(fw.buf) > 4*cmdChunk {
		fw.buf = nil
	}
	return err
}

func (fw *frameWriter) writeAck(typ byte, id uint32, n int) error {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return fw.write(typ, id, b[:])
}

// readFrame reads one frame; the payload is a fresh slice.
func readFrame(r io.Reader) (typ byte, id uint32, payload []byte, err error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n < 5 || n-5 > maxCmdFrame {
		return 0, 0, nil, fmt.Errorf("agent: command frame of %d bytes", n)
	}
	typ, id = h[4], binary.BigEndian.Uint32(h[5:9])
	payload = make([]byte, n-5)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	return typ, id, payload, nil
}

func ackSize(payload []byte) (int, error) {
	if len(payload) != 4 {
		return 0, fmt.Errorf("agent: ack of %d bytes", len(payload))
	}
	return int(binary.BigEndian.Uint32(payload)), nil
}

// credit is a send window: take blocks until n bytes may be sent.
type credit struct {
	mu     sync.Mutex
	cond   *sync.Cond
	avail  int
	closed bool
}

func newCredit(n int) *credit {
	c := &credit{avail: n}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// take waits for up to want bytes of credit and returns how many it got;
// 0 once the window is closed.
func (c *credit) take(want int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.avail <= 0 && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0
	}
	if want > c.avail {
		want = c.avail
	}
	c.avail -= want
	return want
}

func (c *credit) give(n int) {
	c.mu.Lock()
	c.avail += n
	c.mu.Unlock()
	c.cond.Broadcast()
}

func (c *credit) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cond.Broadcast()
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func toStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
