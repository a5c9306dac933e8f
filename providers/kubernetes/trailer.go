package kubernetes

import "bytes"

// trailer is what wrapperScript writes on stdout and on stderr once the
// command has ended: RS, the command's pid-file name (random per exec),
// US. An exec stream can end with exit status 0 and the end of its output
// missing (kubernetes/kubernetes#124571); an output without its trailer
// from a wrapper that exited normally is such a stream.
func trailer(pidFile string) []byte {
	return []byte("\x1e" + pidFile + "\x1f")
}

// trailerCut passes a stream on to put with the first occurrence of the
// trailer taken out, and records whether it came. Bytes that may be the
// start of the trailer are held back until the next write, or end.
type trailerCut struct {
	put     func([]byte) // takes p for itself: a trailerCut never writes into it again
	trailer []byte
	held    []byte
	seen    bool
}

func (c *trailerCut) Write(p []byte) (int, error) {
	n := len(p)
	if c.seen {
		c.put(bytes.Clone(p))
		return n, nil
	}
	buf := p
	if len(c.held) > 0 {
		buf = append(c.held, p...)
		c.held = nil
	} else {
		buf = bytes.Clone(p)
	}
	if i := bytes.Index(buf, c.trailer); i >= 0 {
		c.seen = true
		c.emit(buf[:i])
		c.emit(buf[i+len(c.trailer):])
		return n, nil
	}
	k := prefixSuffix(buf, c.trailer)
	c.emit(buf[:len(buf)-k])
	if k > 0 {
		c.held = bytes.Clone(buf[len(buf)-k:])
	}
	return n, nil
}

// end passes on what was held back: at the end of the stream it is data.
func (c *trailerCut) end() {
	c.emit(c.held)
	c.held = nil
}

func (c *trailerCut) emit(b []byte) {
	if len(b) > 0 {
		c.put(b)
	}
}

// prefixSuffix is the length of the longest end of b that is a proper
// start of t.
func prefixSuffix(b, t []byte) int {
	for k := min(len(b), len(t)-1); k > 0; k-- {
		if bytes.HasSuffix(b, t[:k]) {
			return k
		}
	}
	return 0
}
