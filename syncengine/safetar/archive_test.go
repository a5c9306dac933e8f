package safetar_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// arc builds test archives: well-formed members through archive/tar, and
// hostile ones byte by byte.
type arc struct {
	buf bytes.Buffer
	tw  *tar.Writer
}

var testTime = time.Unix(1700000000, 123456789)

func newArc() *arc {
	a := &arc{}
	a.tw = tar.NewWriter(&a.buf)
	return a
}

func (a *arc) hdr(h *tar.Header) *arc {
	if h.ModTime.IsZero() {
		h.ModTime = testTime
	}
	if h.Format == tar.FormatUnknown {
		h.Format = tar.FormatPAX
	}
	if err := a.tw.WriteHeader(h); err != nil {
		panic(fmt.Sprintf("WriteHeader %q: %v", h.Name, err))
	}
	return a
}

func (a *arc) file(name string, mode int64, content string) *arc {
	a.hdr(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(content))})
	if _, err := a.tw.Write([]byte(content)); err != nil {
		panic(err)
	}
	return a
}

func (a *arc) dir(name string, mode int64) *arc {
	return a.hdr(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode})
}

func (a *arc) symlink(name, target string) *arc {
	return a.hdr(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777})
}

func (a *arc) hardlink(name, target string) *arc {
	return a.hdr(&tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target, Mode: 0o644})
}

// raw appends bytes after flushing the writer's padding.
func (a *arc) raw(b []byte) *arc {
	if err := a.tw.Flush(); err != nil {
		panic(err)
	}
	a.buf.Write(b)
	return a
}

// rawFile appends a ustar member written by hand: any name, any type.
func (a *arc) rawFile(name string, typ byte, mode int64, content string) *arc {
	a.raw(rawHeader(name, typ, int64(len(content)), mode, ""))
	a.buf.WriteString(content)
	if pad := (512 - len(content)%512) % 512; pad > 0 {
		a.buf.Write(make([]byte, pad))
	}
	return a
}

// end closes the archive with its end marker.
func (a *arc) end() []byte {
	if err := a.tw.Close(); err != nil {
		panic(err)
	}
	return a.buf.Bytes()
}

// open returns the bytes so far, with no end marker.
func (a *arc) open() []byte {
	if err := a.tw.Flush(); err != nil {
		panic(err)
	}
	return a.buf.Bytes()
}

func octal(b []byte, v int64) {
	s := fmt.Sprintf("%0*o", len(b)-1, v)
	copy(b, s)
	b[len(b)-1] = 0
}

// rawHeader is one ustar header block with a correct checksum.
func rawHeader(name string, typ byte, size, mode int64, link string) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	octal(b[100:108], mode)
	octal(b[108:116], 0)
	octal(b[116:124], 0)
	octal(b[124:136], size)
	octal(b[136:148], testTime.Unix())
	b[156] = typ
	copy(b[157:257], link)
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// paxHeader is a pax extended header ('x' or 'g') carrying records.
func paxHeader(typ byte, records map[string]string) []byte {
	var body strings.Builder
	for k, v := range records {
		size := len(k) + len(v) + 3
		size += len(strconv.Itoa(size))
		rec := strconv.Itoa(size) + " " + k + "=" + v + "\n"
		if len(rec) != size {
			rec = strconv.Itoa(len(rec)) + " " + k + "=" + v + "\n"
		}
		body.WriteString(rec)
	}
	data := body.String()
	out := rawHeader("PaxHeaders/x", typ, int64(len(data)), 0o644, "")
	out = append(out, data...)
	if pad := (512 - len(data)%512) % 512; pad > 0 {
		out = append(out, make([]byte, pad)...)
	}
	return out
}

var zeroBlock = make([]byte, 512)

// hostile is the named set of hostile archives: the table tests use them and
// the fuzz seed corpus is made of them.
func hostile() map[string][]byte {
	long := strings.Repeat("n", 70<<10)
	m := map[string][]byte{
		"traversal":         newArc().file("../escape", 0o644, "x").file("a/../../escape2", 0o644, "x").file("ok", 0o644, "ok").end(),
		"absolute":          newArc().file("/tmp/boxfs-absolute", 0o644, "x").file("//etc/x", 0o644, "x").end(),
		"dotdot-dir":        newArc().dir("../up/", 0o755).dir("..", 0o755).end(),
		"link-then-file":    newArc().symlink("l", "../sentinel").file("l/owned", 0o644, "pwned").end(),
		"abslink-then-file": newArc().symlink("l", "/").file("l/tmp/boxfs-owned", 0o644, "pwned").end(),
		"hardlink-then-file": newArc().file("f", 0o644, "x").hardlink("h", "../sentinel/keep").
			file("h", 0o644, "over").end(),
		"dir-file-swap": newArc().file("a", 0o644, "file").dir("a/", 0o755).file("a/b", 0o644, "x").
			dir("d/", 0o755).file("d", 0o644, "x").end(),
		"link-in-dst":      newArc().file("link/owned", 0o644, "pwned").dir("link2/", 0o755).file("link", 0o644, "replaced").end(),
		"duplicate":        newArc().file("dup", 0o644, "first").file("dup", 0o644, "second").end(),
		"devices":          newArc().rawFile("c", tar.TypeChar, 0o666, "").rawFile("b", tar.TypeBlock, 0o666, "").rawFile("p", tar.TypeFifo, 0o666, "").end(),
		"modes":            newArc().file("suid", 0o4777, "x").file("rw", 0o666, "x").dir("d/", 0o7777).end(),
		"pax-global":       newArc().raw(paxHeader('g', map[string]string{"path": "../global"})).file("g", 0o644, "x").end(),
		"huge-pax":         newArc().raw(paxHeader('x', map[string]string{"comment": long})).file("p", 0o644, "x").end(),
		"huge-longname":    newArc().rawFile("././@LongLink", 'L', 0o644, long).file("q", 0o644, "x").end(),
		"long-segment":     newArc().file(strings.Repeat("s", 256), 0o644, "x").file(strings.Repeat("s", 255), 0o644, "x").end(),
		"long-path":        newArc().file(strings.Repeat("d/", 2048)+"f", 0o644, "x").end(),
		"huge-size":        newArc().raw(rawHeader("big", tar.TypeReg, 1<<40, 0o644, "")).end(),
		"truncated-data":   newArc().file("whole", 0o644, "whole").raw(rawHeader("half", tar.TypeReg, 4096, 0o644, "")).raw(bytes.Repeat([]byte("h"), 1000)).buf.Bytes(),
		"truncated-header": append(newArc().file("whole", 0o644, "whole").open(), rawHeader("cut", tar.TypeReg, 0, 0o644, "")[:300]...),
		"no-end-marker":    newArc().file("whole", 0o644, "whole").open(),
		"lone-zero-block":  newArc().file("whole", 0o644, "whole").raw(zeroBlock).open(),
		"zero-then-data":   newArc().file("whole", 0o644, "whole").raw(zeroBlock).raw(rawHeader("after", tar.TypeReg, 0, 0o644, "")).end(),
		"empty":            {},
	}
	bad := rawHeader("bad", tar.TypeReg, 0, 0o644, "")
	bad[0] ^= 'x' // the checksum no longer matches
	m["bad-checksum"] = newArc().file("whole", 0o644, "whole").raw(bad).end()
	return m
}
