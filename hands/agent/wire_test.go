package agent

import (
	"encoding/binary"
	"net/url"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSyntheticPathSurvivesCleaning: pkg/sftp's request server runs every
// request path through filepath.Clean (cleanPathWithBase); a reserved
// operation's query must come out of it byte for byte.
func TestSyntheticPathSurvivesCleaning(t *testing.T) {
	for _, p := range []string{
		"/", "/a/b", "/a//b/../c/./d/", "/with space", "/new\nline", `/q"uo'te`, "/-dash",
		"/\xff\xfe", "/a?b=c&d=%2F", "/..", "/.", "/a/..", "/" + string(make([]byte, 3)),
	} {
		q := url.Values{"path": {p}, "perm": {"755"}}
		sp := syntheticPath(opMkdir, q)
		cleaned := filepath.ToSlash(filepath.Clean(sp))
		if cleaned != sp {
			t.Errorf("path %q: Clean changed %q to %q", p, sp, cleaned)
		}
		op, got, ok, err := parseSynthetic(cleaned)
		if !ok || err != nil || op != opMkdir || got.Get("path") != p || got.Get("perm") != "755" {
			t.Errorf("path %q: parsed %q %v %v %v", p, op, got, ok, err)
		}
	}
	if _, _, ok, _ := parseSynthetic("/.boxfs-agentx/walk"); ok {
		t.Error("a path beside the reserved directory parsed as reserved")
	}
}

func TestStatNSRoundTrip(t *testing.T) {
	s := statNS{Mode: 0o100644, UID: 1000, GID: 1001, Nlink: 3, Size: 1 << 40,
		Mtime: 1714979289123456789, Atime: -1, Ctime: 1, Ino: 1<<63 + 5, Dev: 1<<64 - 1, Rdev: 1<<40 + 3}
	got, err := unmarshalStatNS(s.marshal())
	if err != nil || got != s {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := unmarshalStatNS(s.marshal()[1:]); err == nil {
		t.Error("a short stat-ns accepted")
	}
	fi := s.info("x")
	if fi.Mtime.UnixNano() != s.Mtime || fi.Mode != 0o644 || fi.Ino != s.Ino || fi.Rdev != s.Rdev {
		t.Errorf("info %+v", fi)
	}
}

func TestUtimesEncoding(t *testing.T) {
	mt := time.Unix(5, 987654321)
	a, m, err := unmarshalUtimes(marshalUtimes(time.Time{}, mt))
	if err != nil || a != utimeOmit || m != mt.UnixNano() {
		t.Fatalf("got %d %d %v", a, m, err)
	}
}

func TestErrnoStatusCodes(t *testing.T) {
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.ENOENT, syscall.ENOTEMPTY, syscall.EXDEV, syscall.ENAMETOOLONG} {
		n, ok := errnoFromStatus(errnoStatusCode(e))
		if !ok || syscall.Errno(n) != e {
			t.Errorf("%v: %d %v", e, n, ok)
		}
	}
	for _, code := range []uint32{0, 1, 2, 3, 4, 8, errnoStatusBase, errnoStatusBase + 1<<16} {
		if _, ok := errnoFromStatus(code); ok {
			t.Errorf("status %#x read as an errno", code)
		}
	}
	if got := errnoMessage(syscall.ENOTEMPTY); got != "errno=39: directory not empty" {
		t.Errorf("message %q", got)
	}
}

func TestWalkListing(t *testing.T) {
	s := statNS{Mode: 0o120777, Size: 3, Mtime: 10, Atime: 11, Ctime: 12, Ino: 1<<64 - 2, Nlink: 1, UID: 2, GID: 3, Dev: 1<<64 - 1}
	b := appendWalkRecord(nil, s, "a/odd \n\xff name", "tar get")
	b = appendWalkRecord(b, statNS{Mode: 0o040755}, "b", "")
	b = appendWalkRecord(b, statNS{Mode: 0o060600, Rdev: 1<<64 - 3}, "dev", "")
	fis, err := parseWalk(b)
	if err != nil || len(fis) != 3 {
		t.Fatalf("parse: %v %v", fis, err)
	}
	if fis[0].Name != "a/odd \n\xff name" || fis[0].Target != "tar get" || fis[0].Ino != s.Ino || fis[0].Dev != s.Dev ||
		fis[0].Mtime.UnixNano() != 10 || !fis[0].IsSymlink() || !fis[1].IsDir() || fis[2].Rdev != 1<<64-3 {
		t.Errorf("parsed %+v", fis)
	}
	for _, bad := range []string{"1 2 3\x00a\x00\x00", "1 2 3 4 5 6 7 8 9 10 11\x00a\x00", "x 2 3 4 5 6 7 8 9 10 11\x00a\x00\x00", "1 2 3 4 5 6 7 8 9 10 11\x00\x00\x00", "1 2 3 4 5 6 7 8 9 10\x00a\x00\x00"} {
		if _, err := parseWalk([]byte(bad)); err == nil {
			t.Errorf("malformed listing %q accepted", bad)
		}
	}
}

// TestFrames: packets are counted however the stream is cut.
func TestFrames(t *testing.T) {
	var stream []byte
	for _, n := range []int{1, 5, 0, 300, 2} {
		stream = binary.BigEndian.AppendUint32(stream, uint32(n))
		stream = append(stream, make([]byte, n)...)
	}
	for _, cut := range []int{1, 2, 3, 7, 64, len(stream)} {
		var f frames
		var began, ended int64
		for i := 0; i < len(stream); i += cut {
			b, e := f.feed(stream[i:min(i+cut, len(stream))])
			began += b
			ended += e
		}
		if began != 5 || ended != 5 {
			t.Errorf("cut %d: began %d ended %d, want 5 and 5", cut, began, ended)
		}
	}
	var f frames
	b, e := f.feed([]byte{0, 0, 0, 9, 1, 2})
	if b != 1 || e != 0 {
		t.Errorf("half a packet: began %d ended %d", b, e)
	}
}
