package wrapper

import (
	"bytes"
	"io"

	"github.com/boxfs/boxfs/providers"
)

// trailer is what Script writes on stdout and on stderr once the command
// has ended: RS, the command's pid-file name (random per exec), US. An
// exec stream can end with a normal exit status and the end of its output
// missing (kubernetes/kubernetes#124571); an output without its trailer
// from a wrapper that exited normally is such a stream.
func trailer(name string) []byte {
	return []byte("\x1e" + name + "\x1f")
}

// Output is the host's reading of a Command's stream into a
// providers.GroupProcess: the marker taken off the front of stdout, the
// trailer out of stdout and stderr. The provider writes the stream's
// stdout to Stdout and its stderr to Stderr (each from one goroutine at a
// time), calls End when the stream ended, then the GroupProcess's
// StreamEnded.
type Output struct {
	Stdout, Stderr io.Writer

	g              *providers.GroupProcess
	stdout, stderr *trailerCut
	started        bool // stdout's first byte came
}

// NewOutput reads the stream of the Command named name into g.
func NewOutput(g *providers.GroupProcess, name string) *Output {
	end := trailer(name)
	o := &Output{
		g:      g,
		stdout: &trailerCut{put: g.Stdout().Put, trailer: end},
		stderr: &trailerCut{put: g.Stderr().Put, trailer: end},
	}
	o.Stdout = markerWriter{o}
	o.Stderr = o.stderr
	return o
}

// End passes on what was held back as the possible start of a trailer:
// at the end of the stream it is data.
func (o *Output) End() {
	o.stdout.end()
	o.stderr.end()
}

// Started reports whether stdout's first byte, the marker, came: the
// wrapper got as far as recording the group (or, for a byte that is no
// marker, something else wrote). Valid once the stream ended.
func (o *Output) Started() bool { return o.started }

// Whole reports whether the trailer came on both stdout and stderr: the
// stream carried all the wrapper wrote. Valid once the stream ended.
func (o *Output) Whole() bool { return o.stdout.seen && o.stderr.seen }

// markerWriter takes the wrapper's marker byte off the front of stdout
// and passes the rest on. A first byte above MarkerNoRecord is no marker
// of Script's: something that ran before it (an exec API's message about
// a command it could not start) wrote it, so it stays in the output.
type markerWriter struct{ o *Output }

func (w markerWriter) Write(p []byte) (int, error) {
	n := len(p)
	if !w.o.started && n > 0 {
		w.o.started = true
		w.o.g.SetMarker(p[0])
		if p[0] <= MarkerNoRecord {
			p = p[1:]
		}
	}
	if len(p) > 0 {
		w.o.stdout.Write(p)
	}
	return n, nil
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
