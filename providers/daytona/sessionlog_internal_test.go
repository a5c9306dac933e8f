package daytona

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

// decoded is what a logDecoder handed on.
type decoded struct {
	markers        []byte
	stdout, stderr []byte
	puts           int
}

func newTestDecoder(got *decoded) *logDecoder {
	return &logDecoder{
		marker: func(m byte) { got.markers = append(got.markers, m) },
		put: [2]func([]byte){
			func(b []byte) { got.stdout = append(got.stdout, b...); got.puts++ },
			func(b []byte) { got.stderr = append(got.stderr, b...); got.puts++ },
		},
	}
}

// b64 is data as the wrapper's encoder prints it: base64 lines of 76.
func b64(data string) string {
	s := base64.StdEncoding.EncodeToString([]byte(data))
	var b strings.Builder
	for len(s) > 76 {
		b.WriteString(s[:76] + "\n")
		s = s[76:]
	}
	if s != "" {
		b.WriteString(s + "\n")
	}
	return b.String()
}

const (
	toStdout = "\x01\x01\x01"
	toStderr = "\x02\x02\x02"
)

// TestLogDecoder: a session log decodes to the same markers, output and
// complaints however the toolbox splits it into messages.
func TestLogDecoder(t *testing.T) {
	long := strings.Repeat("0123456789abcdef\x01\x02\n", 20)
	for _, c := range []struct {
		name, log      string
		markers        []byte
		stdout, stderr string
		raw            string
	}{
		{name: "started", log: toStdout + "!S\n" + b64(long) + toStderr + b64("oops\n"),
			markers: []byte{providers.MarkerStarted}, stdout: long, stderr: "oops\n"},
		{name: "interleaved", log: toStdout + "!S\n" + toStdout + b64("a") + toStderr + b64("b") + toStdout + b64("c") + toStderr + b64("d"),
			markers: []byte{providers.MarkerStarted}, stdout: "ac", stderr: "bd"},
		{name: "nodir", log: toStdout + "!E2\n", markers: []byte{providers.MarkerNoDir}},
		{name: "notdir", log: toStdout + "!E20\n", markers: []byte{providers.MarkerNotDir}},
		{name: "denied", log: toStdout + "!E13\n", markers: []byte{providers.MarkerDirDenied}},
		// The wrapper prints no other errno, nor a marker on stderr.
		{name: "other-errno", log: toStdout + "!E0\n!E5\n", raw: "!E0\n!E5\n"},
		{name: "marker-on-stderr", log: toStderr + "!S\n", raw: "!S\n"},
		{name: "complaint", log: toStderr + "sh: mkfifo: Permission denied\n", raw: "sh: mkfifo: Permission denied\n"},
		{name: "unfinished-line", log: toStdout + "!S\n" + strings.TrimSuffix(b64("end"), "\n"),
			markers: []byte{providers.MarkerStarted}, stdout: "end"},
	} {
		t.Run("log="+c.name, func(t *testing.T) {
			for _, size := range []int{len(c.log), 1, 2, 3, 7, 1024} {
				var got decoded
				d := newTestDecoder(&got)
				for p := c.log; p != ""; {
					n := min(size, len(p))
					d.write([]byte(p[:n]))
					p = p[n:]
				}
				d.flush()
				if !bytes.Equal(got.markers, c.markers) || string(got.stdout) != c.stdout || string(got.stderr) != c.stderr || string(d.raw) != c.raw {
					t.Errorf("in messages of %d bytes: markers %v, stdout %q, stderr %q, raw %q\nwant %v, %q, %q, %q",
						size, got.markers, got.stdout, got.stderr, d.raw, c.markers, c.stdout, c.stderr, c.raw)
				}
			}
		})
	}
}

// TestLogDecoderBatches: the output of one message of the log goes on in
// one piece per stream, not one per base64 line.
func TestLogDecoderBatches(t *testing.T) {
	var got decoded
	d := newTestDecoder(&got)
	data := strings.Repeat("x", 57*13)
	d.write([]byte(toStdout + b64(data) + toStderr + b64(data)))
	if got.puts != 2 || string(got.stdout) != data || string(got.stderr) != data {
		t.Errorf("%d puts of %d+%d bytes, want 2 of %d each", got.puts, len(got.stdout), len(got.stderr), len(data))
	}
}

// TestLogDecoderLongLine: a line past lineMax (the wrapper's are 76
// bytes) is neither held whole nor taken as output, however valid its
// base64, and the lines after it decode.
func TestLogDecoderLongLine(t *testing.T) {
	var got decoded
	d := newTestDecoder(&got)
	d.write([]byte(toStdout + "!S\n"))
	chunk := []byte(strings.Repeat("AAAA", 256))
	held := 0
	for range 1024 { // 1 MiB without a newline, 1 KiB a message
		d.write(chunk)
		held = max(held, len(d.line[0]))
	}
	d.write([]byte("\n" + b64("ok")))
	d.flush()
	if held > lineMax {
		t.Errorf("held %d bytes of an unfinished line, want at most %d", held, lineMax)
	}
	if string(got.stdout) != "ok" {
		t.Errorf("stdout: %d bytes %.20q, want %q", len(got.stdout), got.stdout, "ok")
	}
	if len(d.raw) > rawMax {
		t.Errorf("kept %d bytes of complaints, want at most %d", len(d.raw), rawMax)
	}
}
