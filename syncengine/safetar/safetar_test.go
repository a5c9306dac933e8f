package safetar_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/safetar"
)

// place is a test's host layout: base/dst is extracted into, base/sentinel
// is a directory next to it that nothing may touch.
type place struct {
	base, dst, sentinel string
	links               map[string]bool // links the setup put in dst (relative)
}

func newPlace(t testing.TB) *place {
	base := t.TempDir()
	p := &place{base: base, dst: filepath.Join(base, "dst"), sentinel: filepath.Join(base, "sentinel"), links: map[string]bool{}}
	for _, d := range []string{p.dst, p.sentinel} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(p.sentinel, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// link puts a symlink into dst, as an earlier pull or the user might have.
func (p *place) link(t testing.TB, rel, target string) {
	if err := os.Symlink(target, filepath.Join(p.dst, rel)); err != nil {
		t.Fatal(err)
	}
	p.links[rel] = true
}

// check asserts the invariants every extraction keeps: nothing outside dst
// changed, no symlink in dst that the setup did not put there, no temporary
// file left, and every file the receipt lists is there as listed.
func (p *place) check(t testing.TB, rc safetar.Receipt) {
	t.Helper()
	err := filepath.WalkDir(p.base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(p.base, path)
		switch {
		case rel == "." || rel == "dst" || rel == "sentinel" || rel == filepath.Join("sentinel", "keep"):
			return nil
		case !strings.HasPrefix(rel, "dst"+string(filepath.Separator)):
			t.Errorf("created outside dst: %s", rel)
			return nil
		}
		in, _ := filepath.Rel(p.dst, path)
		if d.Type()&fs.ModeSymlink != 0 && !p.links[filepath.ToSlash(in)] {
			t.Errorf("a symlink inside dst: %s", in)
		}
		if strings.HasPrefix(d.Name(), ".boxfs-") {
			t.Errorf("a temporary file left: %s", in)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(p.sentinel, "keep")); err != nil || string(b) != "keep" {
		t.Errorf("sentinel changed: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(p.sentinel); len(ents) != 1 {
		t.Errorf("sentinel holds %d entries, want 1", len(ents))
	}
	for _, w := range rc.Written {
		fi, err := os.Lstat(filepath.Join(p.dst, filepath.FromSlash(w.Path)))
		if err != nil {
			t.Errorf("receipt lists %s, but: %v", w.Path, err)
			continue
		}
		if fi.IsDir() != w.Dir || fi.Mode().Perm() != w.Mode || (!w.Dir && fi.Size() != w.Size) {
			t.Errorf("receipt lists %s as dir=%v %v %d bytes; the host has %v %d bytes", w.Path, w.Dir, w.Mode, w.Size, fi.Mode(), fi.Size())
		}
	}
}

func (p *place) read(t testing.TB, rel string) (string, fs.FileMode) {
	t.Helper()
	path := filepath.Join(p.dst, filepath.FromSlash(rel))
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	if !fi.Mode().IsRegular() {
		t.Fatalf("%s is %v, want a regular file", rel, fi.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), fi.Mode()
}

func (p *place) absent(t testing.TB, rel string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(p.dst, filepath.FromSlash(rel))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s exists (%v), want absent", rel, err)
	}
}

func TestExtract(t *testing.T) {
	h := hostile()
	tests := []struct {
		name     string
		archive  []byte
		setup    func(t *testing.T, p *place)
		opts     safetar.Options
		stop     safetar.Stop
		code     providers.Code
		skips    map[safetar.Reason]int
		files    int
		check    func(t *testing.T, p *place, rc safetar.Receipt)
		noChecks bool
	}{
		{
			name:    "files and dirs",
			archive: newArc().dir("a/", 0o755).file("a/f", 0o644, "hello").file("top", 0o600, "t").file("x/y/z", 0o644, "deep").end(),
			files:   3,
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if s, m := p.read(t, "a/f"); s != "hello" || m.Perm() != 0o644 {
					t.Errorf("a/f = %q %v", s, m)
				}
				if s, m := p.read(t, "top"); s != "t" || m.Perm() != 0o600 {
					t.Errorf("top = %q %v", s, m)
				}
				if fi, err := os.Stat(filepath.Join(p.dst, "x", "y")); err != nil || fi.Mode().Perm() != 0o755 {
					t.Errorf("implied parent x/y: %v %v", fi, err)
				}
				fi, _ := os.Stat(filepath.Join(p.dst, "a", "f"))
				if !fi.ModTime().Equal(testTime) {
					t.Errorf("mtime %v, want %v to the ns", fi.ModTime(), testTime)
				}
				if rc.Dirs != 1 || rc.Bytes != int64(len("hello")+1+len("deep")) {
					t.Errorf("dirs %d bytes %d", rc.Dirs, rc.Bytes)
				}
				if rc.Written[1].SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
					t.Errorf("sha256 of a/f = %s", rc.Written[1].SHA256)
				}
			},
		},
		{
			name:    "modes capped",
			archive: h["modes"],
			files:   2,
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if _, m := p.read(t, "suid"); m != 0o755 {
					t.Errorf("suid file mode %v, want 0755 and no setuid", m)
				}
				if _, m := p.read(t, "rw"); m != 0o644 {
					t.Errorf("rw file mode %v, want 0644", m)
				}
				if fi, _ := os.Stat(filepath.Join(p.dst, "d")); fi.Mode() != fs.ModeDir|0o755 {
					t.Errorf("dir mode %v, want drwxr-xr-x", fi.Mode())
				}
				if rc.Masked != 3 {
					t.Errorf("masked %d, want 3", rc.Masked)
				}
			},
		},
		{
			name:    "owner keeps a directory",
			archive: newArc().dir("ro/", 0o555).file("ro/f", 0o444, "x").end(),
			files:   1,
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if fi, _ := os.Stat(filepath.Join(p.dst, "ro")); fi.Mode().Perm() != 0o755 {
					t.Errorf("dir mode %v, want 0755", fi.Mode())
				}
				if _, m := p.read(t, "ro/f"); m != 0o444 {
					t.Errorf("file mode %v, want 0444", m)
				}
			},
		},
		{
			name:    "links and specials skipped",
			archive: newArc().symlink("s", "/etc/passwd").hardlink("h", "s").raw(h["devices"][:len(h["devices"])-1024]).end(),
			skips:   map[safetar.Reason]int{safetar.ReasonSymlink: 1, safetar.ReasonHardlink: 1, safetar.ReasonDevice: 2, safetar.ReasonFifo: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				for _, rel := range []string{"s", "h", "c", "b", "p"} {
					p.absent(t, rel)
				}
				if rc.Skipped[0].Target != "/etc/passwd" || rc.Skipped[1].Target != "s" {
					t.Errorf("link targets not kept: %+v", rc.Skipped[:2])
				}
			},
		},
		{
			name:    "traversal",
			archive: h["traversal"],
			files:   1,
			skips:   map[safetar.Reason]int{safetar.ReasonBadName: 2},
		},
		{
			name:    "absolute",
			archive: h["absolute"],
			skips:   map[safetar.Reason]int{safetar.ReasonBadName: 2},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if _, err := os.Lstat("/tmp/boxfs-absolute"); err == nil {
					t.Error("/tmp/boxfs-absolute was written")
				}
			},
		},
		{
			name:    "dot dot directories",
			archive: h["dotdot-dir"],
			skips:   map[safetar.Reason]int{safetar.ReasonBadName: 2},
		},
		{
			name:    "bad names",
			archive: newArc().file("./a", 0o644, "x").file("a//b", 0o644, "x").file("a/./b", 0o644, "x").rawFile("a/", '0', 0o644, "x").end(),
			skips:   map[safetar.Reason]int{safetar.ReasonBadName: 4},
		},
		{
			name:    "NUL in a name",
			archive: newArc().raw(paxHeader('x', map[string]string{"path": "a\x00b"})).raw(rawHeader("x", '0', 0, 0o644, "")).end(),
			stop:    safetar.StopBadHeader,
			code:    providers.Invalid,
		},
		{
			name:    "long names",
			archive: append(h["long-segment"][:len(h["long-segment"])-1024:len(h["long-segment"])-1024], h["long-path"]...),
			files:   1,
			skips:   map[safetar.Reason]int{safetar.ReasonNameTooLong: 2},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				p.read(t, strings.Repeat("s", 255))
			},
		},
		{
			name:    "link then file through it",
			archive: h["link-then-file"],
			files:   1,
			skips:   map[safetar.Reason]int{safetar.ReasonSymlink: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				// The link was never made, so l/ is a plain directory in dst.
				if s, _ := p.read(t, "l/owned"); s != "pwned" {
					t.Errorf("l/owned = %q", s)
				}
			},
		},
		{
			name:    "file through a link already in dst",
			archive: h["link-in-dst"],
			setup: func(t *testing.T, p *place) {
				p.link(t, "link", "../sentinel")
				p.link(t, "link2", "../sentinel")
			},
			files: 1,
			skips: map[safetar.Reason]int{safetar.ReasonThroughLink: 1, safetar.ReasonTypeConflict: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				// The file member replaced the link itself (rename never follows it).
				if s, _ := p.read(t, "link"); s != "replaced" {
					t.Errorf("link = %q", s)
				}
			},
		},
		{
			name:    "absolute link in dst",
			archive: newArc().file("abs/tmp/boxfs-owned", 0o644, "x").dir("abs/tmp/", 0o755).end(),
			setup:   func(t *testing.T, p *place) { p.link(t, "abs", "/") },
			skips:   map[safetar.Reason]int{safetar.ReasonThroughLink: 2},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if _, err := os.Lstat("/tmp/boxfs-owned"); err == nil {
					t.Error("/tmp/boxfs-owned was written through a link")
				}
			},
		},
		{
			name:    "hardlink then file",
			archive: h["hardlink-then-file"],
			files:   1,
			skips:   map[safetar.Reason]int{safetar.ReasonHardlink: 1, safetar.ReasonDuplicate: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				p.absent(t, "h") // a second member of one path is skipped, whatever the first was
				if rc.Skipped[0].Target != "../sentinel/keep" {
					t.Errorf("hardlink target %q", rc.Skipped[0].Target)
				}
			},
		},
		{
			name:    "dir file swaps in the archive",
			archive: h["dir-file-swap"],
			files:   1,
			skips:   map[safetar.Reason]int{safetar.ReasonDuplicate: 2, safetar.ReasonParentNotDir: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if s, _ := p.read(t, "a"); s != "file" {
					t.Errorf("a = %q", s)
				}
				if fi, err := os.Lstat(filepath.Join(p.dst, "d")); err != nil || !fi.IsDir() {
					t.Errorf("d: %v %v, want the directory kept", fi, err)
				}
			},
		},
		{
			name:    "dir file swaps against dst",
			archive: newArc().file("isdir", 0o644, "x").dir("isfile/", 0o755).file("isfile/x", 0o644, "x").end(),
			setup: func(t *testing.T, p *place) {
				os.Mkdir(filepath.Join(p.dst, "isdir"), 0o755)
				os.WriteFile(filepath.Join(p.dst, "isfile"), []byte("file"), 0o644)
			},
			skips: map[safetar.Reason]int{safetar.ReasonTypeConflict: 2, safetar.ReasonParentNotDir: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if s, _ := p.read(t, "isfile"); s != "file" {
					t.Errorf("isfile = %q", s)
				}
			},
		},
		{
			name:    "duplicate member",
			archive: h["duplicate"],
			files:   1,
			skips:   map[safetar.Reason]int{safetar.ReasonDuplicate: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if s, _ := p.read(t, "dup"); s != "first" {
					t.Errorf("dup = %q, want the first member", s)
				}
			},
		},
		{
			name:    "pax global header not honoured",
			archive: h["pax-global"],
			files:   1,
			skips:   map[safetar.Reason]int{safetar.ReasonPAXGlobal: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				p.read(t, "g")
			},
		},
		{
			name:    "replace an existing file",
			archive: newArc().file("f", 0o644, "new").end(),
			setup:   func(t *testing.T, p *place) { os.WriteFile(filepath.Join(p.dst, "f"), []byte("old"), 0o600) },
			files:   1,
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if s, m := p.read(t, "f"); s != "new" || m != 0o644 {
					t.Errorf("f = %q %v", s, m)
				}
			},
		},
		{
			name:    "overwrite refused",
			archive: newArc().file("dirty", 0o644, "box").file("clean", 0o644, "box").file("new", 0o644, "box").end(),
			setup: func(t *testing.T, p *place) {
				os.WriteFile(filepath.Join(p.dst, "dirty"), []byte("host"), 0o644)
				os.WriteFile(filepath.Join(p.dst, "clean"), []byte("host"), 0o644)
			},
			opts:  safetar.Options{Overwrite: func(rel string) bool { return rel != "dirty" && rel != "new" }},
			files: 2,
			skips: map[safetar.Reason]int{safetar.ReasonRefused: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if s, _ := p.read(t, "dirty"); s != "host" {
					t.Errorf("dirty = %q, want the host's", s)
				}
				if s, _ := p.read(t, "clean"); s != "box" {
					t.Errorf("clean = %q", s)
				}
				if s, _ := p.read(t, "new"); s != "box" {
					t.Errorf("new = %q (Overwrite is asked only when something exists)", s)
				}
			},
		},
		{
			name: "filter and strip",
			archive: newArc().dir("src/", 0o755).file("src/a", 0o644, "a").file("src/b", 0o644, "b").file("other/c", 0o644, "c").
				file("srcx", 0o644, "x").symlink("src/l", "a").hardlink("src/h", "src/a").symlink("src/fl", "b").end(),
			opts:  safetar.Options{Strip: "src", Filter: func(rel string) bool { return rel != "b" && rel != "fl" }},
			files: 1,
			skips: map[safetar.Reason]int{safetar.ReasonFiltered: 2, safetar.ReasonOutsideStrip: 2, safetar.ReasonSymlink: 1, safetar.ReasonHardlink: 1},
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				p.read(t, "a")
				p.absent(t, "b")
				p.absent(t, "src")
				if len(rc.Skipped) != 4 {
					t.Errorf("skipped lists %d, want 4 (filtered ones are only counted)", len(rc.Skipped))
				}
				if s := rc.Skipped[3]; s.Path != "h" || s.Target != "a" {
					t.Errorf("a hard link's name and target are stripped: %+v", s)
				}
			},
		},
		{
			name:    "strip dot",
			archive: newArc().dir("./", 0o755).file("./a", 0o644, "a").end(),
			opts:    safetar.Options{Strip: "."},
			files:   1,
		},
		{
			name:    "max bytes",
			archive: newArc().file("one", 0o644, strings.Repeat("1", 600)).file("two", 0o644, strings.Repeat("2", 600)).end(),
			opts:    safetar.Options{MaxBytes: 1000},
			files:   1,
			stop:    safetar.StopTooLarge,
			code:    providers.TooLarge,
			check:   func(t *testing.T, p *place, rc safetar.Receipt) { p.absent(t, "two") },
		},
		{
			name:    "huge declared size",
			archive: h["huge-size"],
			stop:    safetar.StopTooLarge,
			code:    providers.TooLarge,
		},
		{
			name:    "max entries",
			archive: newArc().file("1", 0o644, "").file("2", 0o644, "").file("3", 0o644, "").end(),
			opts:    safetar.Options{MaxEntries: 2},
			files:   2,
			stop:    safetar.StopTooManyEntries,
			code:    providers.TooLarge,
		},
		{
			name:    "huge pax header",
			archive: h["huge-pax"],
			stop:    safetar.StopHeaderTooLarge,
			code:    providers.TooLarge,
		},
		{
			name:    "huge long name",
			archive: h["huge-longname"],
			stop:    safetar.StopHeaderTooLarge,
			code:    providers.TooLarge,
		},
		{
			name:    "pax header within the limit",
			archive: newArc().raw(paxHeader('x', map[string]string{"comment": strings.Repeat("c", 60<<10)})).raw(rawHeader("p", '0', 0, 0o644, "")).end(),
			files:   1,
		},
		{
			name:    "bad checksum",
			archive: h["bad-checksum"],
			files:   1,
			stop:    safetar.StopBadChecksum,
			code:    providers.Invalid,
		},
		{
			name:    "lone zero block at the end",
			archive: h["lone-zero-block"],
			files:   1,
			stop:    safetar.StopLoneZeroBlock,
			code:    providers.Invalid,
		},
		{
			name:    "zero block then data",
			archive: h["zero-then-data"],
			files:   1,
			stop:    safetar.StopLoneZeroBlock,
			code:    providers.Invalid,
			check:   func(t *testing.T, p *place, rc safetar.Receipt) { p.absent(t, "after") },
		},
		{
			name:    "truncated in data",
			archive: h["truncated-data"],
			files:   1,
			stop:    safetar.StopTruncated,
			code:    providers.Invalid,
			check: func(t *testing.T, p *place, rc safetar.Receipt) {
				if s, _ := p.read(t, "whole"); s != "whole" {
					t.Errorf("whole = %q", s)
				}
				p.absent(t, "half")
			},
		},
		{
			name:    "truncated in a header",
			archive: h["truncated-header"],
			files:   1,
			stop:    safetar.StopTruncated,
			code:    providers.Invalid,
		},
		{
			name:    "no end marker",
			archive: h["no-end-marker"],
			files:   1,
			stop:    safetar.StopTruncated,
			code:    providers.Invalid,
		},
		{
			name:    "empty stream",
			archive: nil,
			stop:    safetar.StopTruncated,
			code:    providers.Invalid,
		},
		{
			name:    "end marker only",
			archive: make([]byte, 1024),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlace(t)
			if tt.setup != nil {
				tt.setup(t, p)
			}
			rc, err := safetar.Extract(context.Background(), bytes.NewReader(tt.archive), p.dst, tt.opts)
			if rc.Stopped != tt.stop {
				t.Errorf("stopped %q, want %q (err %v)", rc.Stopped, tt.stop, err)
			}
			if (err != nil) != (tt.stop != "") {
				t.Errorf("err = %v, want an error iff stopped", err)
			}
			if err != nil {
				var pe *providers.Error
				if !errors.As(err, &pe) || pe.Code != tt.code {
					t.Errorf("err = %v (code %v), want a *providers.Error with code %v", err, providers.CodeOf(err), tt.code)
				}
			}
			if rc.Files != tt.files {
				t.Errorf("files written %d, want %d (%+v)", rc.Files, tt.files, rc.Written)
			}
			for reason, n := range tt.skips {
				if rc.Skips(reason) != n {
					t.Errorf("skips %s = %d, want %d (%+v)", reason, rc.Skips(reason), n, rc.Skipped)
				}
			}
			total := 0
			for _, n := range rc.SkipsBy {
				total += n
			}
			want := 0
			for _, n := range tt.skips {
				want += n
			}
			if total != want {
				t.Errorf("skipped %d in all, want %d: %+v", total, want, rc.SkipsBy)
			}
			p.check(t, rc)
			if tt.check != nil {
				tt.check(t, p, rc)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		want safetar.Reason
	}{
		{"a", ""},
		{"a/b/c", ""},
		{"..a/b..", ""},
		{".hidden", ""},
		{strings.Repeat("x", 255), ""},
		{strings.Repeat("x/", 2047) + "x", ""},
		{"", safetar.ReasonBadName},
		{"/a", safetar.ReasonBadName},
		{"a/", safetar.ReasonBadName},
		{"a//b", safetar.ReasonBadName},
		{".", safetar.ReasonBadName},
		{"..", safetar.ReasonBadName},
		{"a/../b", safetar.ReasonBadName},
		{"a/./b", safetar.ReasonBadName},
		{"a\x00b", safetar.ReasonBadName},
		{strings.Repeat("x", 256), safetar.ReasonNameTooLong},
		{strings.Repeat("x/", 2048) + "x", safetar.ReasonNameTooLong},
	}
	for _, tt := range tests {
		if got := safetar.CheckName(tt.name); got != tt.want {
			t.Errorf("CheckName(%.40q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestCapMode(t *testing.T) {
	tests := []struct {
		in   fs.FileMode
		dir  bool
		want fs.FileMode
	}{
		{0o644, false, 0o644},
		{0o755, false, 0o755},
		{0o777, false, 0o755},
		{0o666, false, 0o644},
		{0o600, false, 0o600},
		{0o755 | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky, false, 0o755},
		{0o777 | fs.ModeSticky, true, 0o755},
		{0o500, true, 0o700},
		{0o000, true, 0o700},
	}
	for _, tt := range tests {
		if got := safetar.CapMode(tt.in, tt.dir); got != tt.want {
			t.Errorf("CapMode(%v, dir=%v) = %v, want %v", tt.in, tt.dir, got, tt.want)
		}
	}
}

func TestExtractCancelled(t *testing.T) {
	p := newPlace(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rc, err := safetar.Extract(ctx, bytes.NewReader(newArc().file("f", 0o644, "x").end()), p.dst, safetar.Options{})
	if rc.Stopped != safetar.StopAborted || providers.CodeOf(err) != providers.Aborted {
		t.Fatalf("stopped %q err %v, want aborted", rc.Stopped, err)
	}
	p.absent(t, "f")
}

func TestExtractMissingDst(t *testing.T) {
	_, err := safetar.Extract(context.Background(), bytes.NewReader(nil), filepath.Join(t.TempDir(), "nope"), safetar.Options{})
	if providers.CodeOf(err) != providers.NotFound {
		t.Fatalf("err %v, want not_found", err)
	}
}

func TestRemove(t *testing.T) {
	p := newPlace(t)
	os.MkdirAll(filepath.Join(p.dst, "d", "e"), 0o755)
	os.WriteFile(filepath.Join(p.dst, "d", "f"), []byte("x"), 0o644)
	p.link(t, "l", "../sentinel")
	tests := []struct {
		rel  string
		code providers.Code
	}{
		{"l/keep", providers.Unsafe}, // through a link: never followed
		{"d/f/x", providers.Unsafe},  // through a file
		{"d", providers.Exists},      // not empty
		{"../sentinel/keep", providers.Invalid},
		{"nope", providers.NotFound},
		{"nope/x", providers.NotFound},
		{"d/f", 0},
		{"d/e", 0},
		{"d", 0},
		{"l", 0}, // the link itself
	}
	for _, tt := range tests {
		if err := safetar.Remove(p.dst, tt.rel); providers.CodeOf(err) != tt.code {
			t.Errorf("Remove(%q) = %v, want code %v", tt.rel, err, tt.code)
		}
	}
	delete(p.links, "l")
	p.check(t, safetar.Receipt{})
	if ents, _ := os.ReadDir(p.dst); len(ents) != 0 {
		t.Errorf("dst holds %d entries, want none", len(ents))
	}
}

// stallReader gives its bytes, then blocks until ctx ends: a box that stops
// sending mid-archive.
type stallReader struct {
	ctx context.Context
	b   []byte
}

func (s *stallReader) Read(p []byte) (int, error) {
	if len(s.b) > 0 {
		n := copy(p, s.b)
		s.b = s.b[n:]
		return n, nil
	}
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

func TestExtractStalledStream(t *testing.T) {
	p := newPlace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	whole := newArc().file("whole", 0o644, "whole").open()
	rc, err := safetar.Extract(ctx, &stallReader{ctx: ctx, b: whole}, p.dst, safetar.Options{})
	if rc.Stopped != safetar.StopAborted || providers.CodeOf(err) != providers.Timeout || rc.Files != 1 {
		t.Fatalf("stopped %q files %d err %v, want aborted with a timeout after one file", rc.Stopped, rc.Files, err)
	}
	p.check(t, rc)
}

// A directory that already exists on the host keeps its mode: only what
// the extraction makes gets the archive's (capped) mode.
func TestExtractKeepsExistingDirModes(t *testing.T) {
	p := newPlace(t)
	for _, d := range []string{"priv", "priv/sub"} {
		if err := os.Mkdir(filepath.Join(p.dst, d), 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(p.dst, d), 0o700)
	}
	arc := newArc().dir("priv", 0o755).dir("priv/sub", 0o777).file("priv/sub/f", 0o644, "x").
		dir("new", 0o750).file("implied/f", 0o644, "y").end()
	if _, err := safetar.Extract(context.Background(), bytes.NewReader(arc), p.dst, safetar.Options{}); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]fs.FileMode{"priv": 0o700, "priv/sub": 0o700, "new": 0o750, "implied": 0o755} {
		fi, err := os.Stat(filepath.Join(p.dst, rel))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", rel, fi.Mode().Perm(), err, want)
		}
	}
}
