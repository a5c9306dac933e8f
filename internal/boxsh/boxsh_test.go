package boxsh

import (
	"bufio"
	"bytes"
	"maps"
	"strings"
	"testing"
)

func TestHostEnv(t *testing.T) {
	environ := []string{"TERM=xterm", "HOME=/root", "PATH=/bin", "GOFLAGS=-x", "GOPATH=/g", "TOKEN=s", EnvVar + "=GO*, TOKEN"}
	want := map[string]string{"TERM": "xterm", "GOFLAGS": "-x", "GOPATH": "/g", "TOKEN": "s"}
	if got := HostEnv(environ); !maps.Equal(got, want) {
		t.Errorf("HostEnv: %v, want %v", got, want)
	}
	if got := HostEnv([]string{"HOME=/root", "PATH=/bin"}); len(got) != 0 {
		t.Errorf("HostEnv with nothing named: %v, want none", got)
	}
}

// TestFrames round-trips frames, one past the frame bound split in two,
// and refuses a header that claims more than the bound.
func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	fw := &FrameWriter{W: &buf}
	big := bytes.Repeat([]byte("x"), MaxFrame+10)
	for _, f := range []struct {
		typ byte
		p   []byte
	}{{FrameStdout, []byte("out")}, {FrameStdinEOF, nil}, {FrameStderr, big}} {
		if err := fw.Send(f.typ, f.p); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	var got []string
	var total int
	for {
		typ, p, err := ReadFrame(r)
		if err != nil {
			break
		}
		got = append(got, string(typ))
		total += len(p)
	}
	if strings.Join(got, "") != "OCEE" || total != 3+len(big) {
		t.Errorf("frames read: %q, %d bytes; want OCEE, %d", got, total, 3+len(big))
	}
	over := []byte{FrameStdout, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(over))); err == nil {
		t.Errorf("a frame claiming 4 GiB was read")
	}
}
