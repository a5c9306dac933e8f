package main

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
// sh to daemon: frameRequest (JSON shRequest) once, then frameStdin,
// frameStdinEOF and frameSignal (a kill(1) name) in any order. The
// connection closing before the daemon's frameExit means the caller is
// gone: the daemon kills the command's group.
//
// daemon to sh: frameStdout and frameStderr as the command writes, then
// frameExit (JSON shExit), and the daemon closes.
const (
	frameRequest  = 'Q'
	frameStdin    = 'I'
	frameStdinEOF = 'C'
	frameSignal   = 'S'
	frameStdout   = 'O'
	frameStderr   = 'E'
	frameExit     = 'X'
)

// maxFrame bounds a frame's payload (a request with its arguments, a
// chunk of a stream).
const maxFrame = 4 << 20

// shRequest is what boxfs sh asks for.
type shRequest struct {
	Box  string            `json:"box"`
	Dir  string            `json:"dir"`  // relative to the box's workspace, slash-separated; "" is the workspace
	Args []string          `json:"args"` // the box shell's arguments (-c COMMAND ...)
	Env  map[string]string `json:"env,omitempty"`
}

// shExit is how the command ended: Code is the status boxfs sh exits
// with; Err, when set, is printed on stderr first.
type shExit struct {
	Code int    `json:"code"`
	Err  string `json:"err,omitempty"`
}

// shSocket is the abstract unix socket the daemon serving mnt listens on
// for boxfs sh: named after the mount point, so a shell that knows only
// its cwd finds it. Abstract names have no file permissions: both ends
// check the other's uid (SO_PEERCRED).
func shSocket(mnt string) string {
	sum := sha256.Sum256([]byte(mnt))
	return "@boxfs-sh/" + hex.EncodeToString(sum[:16])
}

// frameWriter writes frames; several goroutines may share one.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (fw *frameWriter) write(typ byte, p []byte) error {
	for {
		n := min(len(p), maxFrame)
		var hdr [5]byte
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		fw.mu.Lock()
		_, err := fw.w.Write(hdr[:])
		if err == nil {
			_, err = fw.w.Write(p[:n])
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

// streamWriter is an io.Writer that sends its bytes as frames of one type.
type streamWriter struct {
	fw  *frameWriter
	typ byte
}

func (s streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := s.fw.write(s.typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readFrame reads one frame.
func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes: over the %d-byte bound", n, maxFrame)
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
