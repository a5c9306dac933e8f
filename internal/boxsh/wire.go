// Package boxsh is boxfs sh's channel to the daemon serving a mount and
// its client: what a host names as its shell. The client is its own small
// program too (cmd/boxfs-sh), which starts without the providers'
// package initialisation that the boxfs binary pays at every start.
package boxsh

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The shell channel: boxfs sh talks to the daemon serving the mount its
// cwd is in over a unix socket, in frames of one type byte, a big-endian
// uint32 length and the payload. The exec file cannot serve a shell: it
// carries one stream for stdout and stderr and no stdin.
//
// sh to daemon: FrameRequest (JSON Request) once, then FrameStdin,
// FrameStdinEOF and FrameSignal (a kill(1) name) in any order. The
// connection closing before the daemon's FrameExit means the caller is
// gone: the daemon kills the command's group.
//
// daemon to sh: FrameStdout and FrameStderr as the command writes, then
// FrameExit (JSON Exit), and the daemon closes.
const (
	FrameRequest  = 'Q'
	FrameStdin    = 'I'
	FrameStdinEOF = 'C'
	FrameSignal   = 'S'
	FrameStdout   = 'O'
	FrameStderr   = 'E'
	FrameExit     = 'X'
)

// MaxFrame bounds a frame's payload (a request with its arguments, a
// chunk of a stream).
const MaxFrame = 4 << 20

// Request is what boxfs sh asks for.
type Request struct {
	Box  string            `json:"box"`
	Dir  string            `json:"dir"`  // relative to the box's workspace, slash-separated; "" is the workspace
	Args []string          `json:"args"` // the box shell's arguments (-c COMMAND ...)
	Env  map[string]string `json:"env,omitempty"`
	// TTY, when set, asks for an interactive shell on a terminal in the
	// box, of this size: the caller's own terminal is in raw mode, and
	// its bytes (Ctrl-C, Ctrl-D, Ctrl-Z among them) are the terminal's.
	TTY *Winsize `json:"tty,omitempty"`
}

// Winsize is a terminal's size in characters.
type Winsize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Exit is how the command ended: Code is the status boxfs sh exits
// with; Err, when set, is printed on stderr first.
type Exit struct {
	Code int    `json:"code"`
	Err  string `json:"err,omitempty"`
}

// Socket is the abstract unix socket the daemon serving mnt listens on
// for boxfs sh: named after the mount point, so a shell that knows only
// its cwd finds it. Abstract names have no file permissions: both ends
// check the other's uid (SO_PEERCRED).
func Socket(mnt string) string {
	sum := sha256.Sum256([]byte(mnt))
	return "@boxfs-sh/" + hex.EncodeToString(sum[:16])
}

// FrameWriter writes frames; several goroutines may share one.
type FrameWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (fw *FrameWriter) Send(typ byte, p []byte) error {
	for {
		n := min(len(p), MaxFrame)
		var hdr [5]byte
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		fw.mu.Lock()
		_, err := fw.W.Write(hdr[:])
		if err == nil {
			_, err = fw.W.Write(p[:n])
		}
		fw.mu.Unlock()
		if err != nil {
			return err
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// StreamWriter is an io.Writer that sends its bytes as frames of one type.
type StreamWriter struct {
	FW  *FrameWriter
	Typ byte
}

func (s StreamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := s.FW.Send(s.Typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrame reads one frame.
func ReadFrame(r *bufio.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes: over the %d-byte bound", n, MaxFrame)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], p, nil
}
