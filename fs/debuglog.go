package fs

import (
	"bytes"
	"io"
	"log"
	"regexp"
	"sync"
)

// go-fuse's debug log (mount --debug) quotes the first bytes of every
// write's data and of every read's answer: file contents, a launch's
// secrets. The mount's debug log keeps the sizes and drops the bytes.
var (
	// `}"TOKEN=s3"... 42b p123` of a request: its payload, then its size.
	debugInData = regexp.MustCompile(` ?"(?:[^"\\]|\\.)*"(?:\.\.\.)? (\d+)b( p\d+)?$`)
	// `42b data "TOKEN=s3"...` of an answer.
	debugOutData = regexp.MustCompile(`(\d+b data) "(?:[^"\\]|\\.)*"(?:\.\.\.)?`)
)

// redactDebug returns a line of go-fuse's debug log without data bytes.
func redactDebug(line []byte) []byte {
	line = debugInData.ReplaceAll(line, []byte(" [${1} bytes]${2}"))
	return debugOutData.ReplaceAll(line, []byte("${1}"))
}

// redactWriter passes each line written to w without its data bytes.
type redactWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (r *redactWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []byte
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		nl := bytes.HasSuffix(line, []byte("\n"))
		out = append(out, redactDebug(bytes.TrimSuffix(line, []byte("\n")))...)
		if nl {
			out = append(out, '\n')
		}
	}
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// debugLogger is go-fuse's debug log, written to w without data bytes.
func debugLogger(w io.Writer) *log.Logger {
	return log.New(&redactWriter{w: w}, "", log.LstdFlags|log.Lmicroseconds)
}
