package fake

import (
	"io"
	"sync"
	"syscall"
)

// pipeSize is how much a pipe holds before a write blocks, as a Linux pipe.
const pipeSize = 64 << 10

// pipe is an in-memory pipe with a pipe's buffer: a write blocks while the
// buffer is full, a read blocks while it is empty.
type pipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte
	closed bool // no more writes: a reader gets EOF once the buffer is empty
	broken bool // no more reads: a writer gets EPIPE, the buffer is dropped
	noEOF  bool // closeWrite does not bring EOF (a lost stdin EOF); only broken does
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond.L = &p.mu
	return p
}

// Write copies b into the pipe, blocking while it is full. It fails with
// EPIPE once the pipe is closed or broken.
func (p *pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		for len(p.buf) >= pipeSize && !p.closed && !p.broken {
			p.cond.Wait()
		}
		if p.closed || p.broken {
			return n, syscall.EPIPE
		}
		k := min(len(b), pipeSize-len(p.buf))
		p.buf = append(p.buf, b[:k]...)
		b = b[k:]
		n += k
		p.cond.Broadcast()
	}
	return n, nil
}

// Read copies what the pipe holds into b, blocking while it is empty and
// open. It returns io.EOF once the pipe is closed and drained, or broken.
func (p *pipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && !p.broken && !(p.closed && !p.noEOF) {
		p.cond.Wait()
	}
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	p.cond.Broadcast()
	return n, nil
}

// closeWrite ends the writer's side: the reader gets what is buffered, then
// EOF (unless noEOF).
func (p *pipe) closeWrite() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// breakPipe ends both sides: buffered bytes are dropped, a blocked reader
// gets EOF and a writer EPIPE.
func (p *pipe) breakPipe() {
	p.mu.Lock()
	p.broken = true
	p.buf = nil
	p.cond.Broadcast()
	p.mu.Unlock()
}
