package daytona

import (
	"bytes"
	"encoding/base64"

	"github.com/boxfs/boxfs/providers"
)

// What a logDecoder keeps of what the box sends.
const (
	// lineMax bounds an unfinished line: the wrapper's lines are 76 bytes
	// at most, and a box that never ends a line must not make the host
	// hold it all. A longer line is not the protocol's.
	lineMax = 4096
	// rawMax is how much of the lines that are not the wrapper's protocol
	// (the shell's or a tool's complaints) it keeps: the last bytes.
	rawMax = 4096
)

// logDecoder reads a command's session log, as the toolbox streams it with
// split output: the log of the session's stdout and stderr, each run of
// bytes preceded by a 3-byte marker of its stream (1 1 1 stdout, 2 2 2
// stderr). The wrapper's data never holds bytes 1 or 2, so each such byte
// is part of a marker. Each stream is lines: the wrapper's own on stdout
// ("!S" started, "!E<errno>" the directory could not be entered, given to
// the process as its start marker) and base64 of the command's output on
// both, which goes to put.
type logDecoder struct {
	marker func(byte)      // takes the wrapper's start marker (providers.Marker*)
	put    [2]func([]byte) // take the command's stdout and stderr; they keep what they get

	errStream bool
	line      [2][]byte // each stream's unfinished line, up to lineMax bytes of it
	long      [2]bool   // the unfinished line is longer than lineMax
	out       [2][]byte // output decoded in this write, not yet queued
	raw       []byte    // the last rawMax bytes of lines not the protocol's
}

// write decodes the next bytes of the log. What it decodes is queued when
// it returns, one chunk per stream.
func (d *logDecoder) write(p []byte) {
	for len(p) > 0 {
		s := d.cur()
		i := bytes.IndexAny(p, "\x01\x02\n")
		if i < 0 {
			d.add(s, p)
			break
		}
		d.add(s, p[:i])
		switch p[i] {
		case 1:
			d.errStream = false
		case 2:
			d.errStream = true
		case '\n':
			d.doLine(s, d.line[s])
			d.line[s], d.long[s] = d.line[s][:0], false
		}
		p = p[i+1:]
	}
	d.queue()
}

// add appends b to stream s's line, up to lineMax bytes.
func (d *logDecoder) add(s int, b []byte) {
	if room := lineMax - len(d.line[s]); len(b) > room {
		b, d.long[s] = b[:room], true
	}
	d.line[s] = append(d.line[s], b...)
}

func (d *logDecoder) cur() int {
	if d.errStream {
		return 1
	}
	return 0
}

// flush decodes what is left of unfinished lines, at the log's end.
func (d *logDecoder) flush() {
	for s := range 2 {
		if len(d.line[s]) > 0 {
			d.doLine(s, d.line[s])
			d.line[s], d.long[s] = nil, false
		}
	}
	d.queue()
}

// queue hands the decoded output on to the process.
func (d *logDecoder) queue() {
	for s, b := range d.out {
		if len(b) > 0 {
			d.put[s](b)
			d.out[s] = nil
		}
	}
}

func (d *logDecoder) doLine(s int, line []byte) {
	if d.long[s] {
		d.complain(line)
		return
	}
	if s == 0 {
		if m, ok := startMarker(line); ok {
			d.marker(m)
			return
		}
	}
	if len(line) > 0 && len(line)%4 == 0 {
		// Each line of base64's output (76 characters, 57 bytes) decodes
		// on its own, wherever a chunk ended.
		n := len(d.out[s])
		out, err := base64.StdEncoding.AppendDecode(d.out[s], line)
		if err == nil {
			d.out[s] = out
			return
		}
		d.out[s] = out[:n]
	}
	d.complain(line)
}

// complain keeps a line that is not the wrapper's protocol: the shell's or
// a tool's complaint, which says why a command did not start.
func (d *logDecoder) complain(line []byte) {
	d.raw = append(append(d.raw, line...), '\n')
	if len(d.raw) > rawMax {
		d.raw = d.raw[len(d.raw)-rawMax:]
	}
}

// startMarker reads a wrapper's line that says whether the command
// started: "!S", or "!E" and the errno of entering its directory.
func startMarker(line []byte) (byte, bool) {
	switch string(line) {
	case "!S":
		return providers.MarkerStarted, true
	case "!E2": // ENOENT
		return providers.MarkerNoDir, true
	case "!E20": // ENOTDIR
		return providers.MarkerNotDir, true
	case "!E13": // EACCES
		return providers.MarkerDirDenied, true
	}
	return 0, false
}
