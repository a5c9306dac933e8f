package hands_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// row is one way of reaching a box's files, compared with the os package on
// a host directory.
type row struct {
	name   string
	files  providers.Files
	walker providers.Walker // nil: no Walk step
	root   string           // an empty box-side directory for the row
	// partial: stat carries only kind, mode, size, mtime and a symlink's
	// target (Docker's stat-path API).
	partial bool
	// known lists the steps (and "Walk") known to differ from the os
	// package on this row, with the reason. A known step that stops
	// differing fails the test, so the list cannot go stale.
	known map[string]string
}

// check compares one step's rendering.
func (rw row) check(t *testing.T, step, got, want string) {
	t.Helper()
	reason, known := rw.known[step]
	switch {
	case got != want && known:
		t.Logf("known divergence in step %q (%s):\n got: %s\nwant: %s", step, reason, got, want)
	case got != want:
		t.Errorf("step %q:\n got: %s\nwant: %s", step, got, want)
	case known:
		t.Errorf("step %q is listed as a known divergence (%s) but now matches: remove it from the list", step, reason)
	}
}

// step is one operation of the table, rendered as text that holds results
// and errno, never the root path.
type step struct {
	name string
	do   func(ctx context.Context, f providers.Files, r string, partial bool) string
}

func errs(err error) string {
	if err == nil {
		return "ok"
	}
	errno, _ := providers.ErrnoOf(err)
	return fmt.Sprintf("err code=%s errno=%d(%v)", providers.CodeOf(err), int(errno), errno)
}

func info(fi providers.FileInfo, partial, times bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %v", fi.Name, fi.Mode)
	if !fi.IsDir() {
		fmt.Fprintf(&b, " size=%d", fi.Size)
	}
	if !partial {
		if !fi.IsDir() {
			fmt.Fprintf(&b, " nlink=%d", fi.Nlink)
		}
		fmt.Fprintf(&b, " uid=%d gid=%d", fi.UID, fi.GID)
	}
	if fi.IsSymlink() {
		fmt.Fprintf(&b, " target=%q", fi.Target)
	}
	if fi.Mode&os.ModeDevice != 0 && !partial {
		fmt.Fprintf(&b, " rdev=%d:%d", providers.DevMajor(fi.Rdev), providers.DevMinor(fi.Rdev))
	}
	if times {
		fmt.Fprintf(&b, " mtime=%d", fi.Mtime.UnixNano())
		if !partial {
			fmt.Fprintf(&b, " atime=%d", fi.Atime.UnixNano())
		}
	}
	return b.String()
}

func statStr(fi providers.FileInfo, err error, partial bool) string {
	if err != nil {
		return errs(err)
	}
	return info(fi, partial, false)
}

func readStr(ctx context.Context, f providers.Files, name string) string {
	rc, err := f.ReadFile(ctx, name)
	if err != nil {
		return errs(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return errs(err)
	}
	return fmt.Sprintf("%q", b)
}

func dirStr(ctx context.Context, f providers.Files, name string, partial bool) string {
	ents, err := f.ReadDir(ctx, name)
	if err != nil {
		return errs(err)
	}
	var parts []string
	for _, e := range ents {
		parts = append(parts, info(e, partial, false))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// timedEntries renders the listed entries names of dir with their times.
func timedEntries(ctx context.Context, f providers.Files, dir string, partial bool, names ...string) string {
	ents, err := f.ReadDir(ctx, dir)
	if err != nil {
		return errs(err)
	}
	var parts []string
	for _, e := range ents {
		for _, n := range names {
			if e.Name == n {
				parts = append(parts, info(e, partial, true))
			}
		}
	}
	return strings.Join(parts, "; ")
}

func readAtStr(ctx context.Context, f providers.Files, name string, n int, off int64) string {
	p := make([]byte, n)
	got, err := f.ReadAt(ctx, name, p, off)
	e := "nil"
	if err == io.EOF {
		e = "EOF"
	} else if err != nil {
		e = errs(err)
	}
	return fmt.Sprintf("n=%d %q %s", got, p[:got], e)
}

var (
	t1 = time.Unix(1714979289, 123456789)
	t2 = time.Unix(1600000000, 987654321)
	t3 = time.Unix(1700000000, 5)
	t4 = time.Unix(-2, 500000000) // 1.5 s before the epoch
)

// steps is the conformance table. Each step runs on the row's files and on
// a host directory through os, in order, and must render the same.
var steps = []step{
	{"mkdir d", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		return errs(f.Mkdir(ctx, r+"/d", 0o755))
	}},
	{"mkdir d again", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		return errs(f.Mkdir(ctx, r+"/d", 0o755))
	}},
	{"mkdir missing parent", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		return errs(f.Mkdir(ctx, r+"/no/x", 0o755))
	}},
	{"writefile d/f", func(ctx context.Context, f providers.Files, r string, p bool) string {
		err := f.WriteFile(ctx, r+"/d/f", strings.NewReader("hello, world\n"), 0o644)
		fi, serr := f.Stat(ctx, r+"/d/f")
		return errs(err) + " " + statStr(fi, serr, p) + " " + readStr(ctx, f, r+"/d/f")
	}},
	{"mkdir under file", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		return errs(f.Mkdir(ctx, r+"/d/f/x", 0o755))
	}},
	{"stat", func(ctx context.Context, f providers.Files, r string, p bool) string {
		var out []string
		for _, name := range []string{"/d/f", "/d", "/missing", "/d/f/x", "/d/missing/x", "/" + strings.Repeat("n", 300), "/d/" + strings.Repeat("n", 256)} {
			fi, err := f.Stat(ctx, r+name)
			out = append(out, statStr(fi, err, p))
			fi, err = f.Lstat(ctx, r+name)
			out = append(out, statStr(fi, err, p))
		}
		return strings.Join(out, "\n")
	}},
	{"readfile", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		return readStr(ctx, f, r+"/d/f") + " " + readStr(ctx, f, r+"/missing") + " " + readStr(ctx, f, r+"/d") + " " + readStr(ctx, f, r+"/d/f/x")
	}},
	{"readat", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		return strings.Join([]string{
			readAtStr(ctx, f, r+"/d/f", 5, 0),
			readAtStr(ctx, f, r+"/d/f", 100, 7),
			readAtStr(ctx, f, r+"/d/f", 10, 1000),
			readAtStr(ctx, f, r+"/missing", 10, 0),
			readAtStr(ctx, f, r+"/d", 10, 0),
		}, "\n")
	}},
	{"chmod 0600", func(ctx context.Context, f providers.Files, r string, p bool) string {
		err := f.Chmod(ctx, r+"/d/f", 0o600)
		fi, serr := f.Stat(ctx, r+"/d/f")
		return errs(err) + " " + statStr(fi, serr, p)
	}},
	{"writefile keeps mode", func(ctx context.Context, f providers.Files, r string, p bool) string {
		err := f.WriteFile(ctx, r+"/d/f", strings.NewReader("new content"), 0o644)
		fi, serr := f.Stat(ctx, r+"/d/f")
		return errs(err) + " " + statStr(fi, serr, p) + " " + readStr(ctx, f, r+"/d/f")
	}},
	{"writefile new file mode", func(ctx context.Context, f providers.Files, r string, p bool) string {
		err := f.WriteFile(ctx, r+"/d/g", strings.NewReader("g"), 0o640)
		fi, serr := f.Stat(ctx, r+"/d/g")
		return errs(err) + " " + statStr(fi, serr, p)
	}},
	{"writefile errors", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		return errs(f.WriteFile(ctx, r+"/d", strings.NewReader("x"), 0o644)) + " " +
			errs(f.WriteFile(ctx, r+"/no/x", strings.NewReader("x"), 0o644)) + " " +
			errs(f.WriteFile(ctx, r+"/d/f/x", strings.NewReader("x"), 0o644))
	}},
	{"writefile empty and big", func(ctx context.Context, f providers.Files, r string, p bool) string {
		big := bytes.Repeat([]byte("0123456789abcdef"), 80000) // 1.25 MiB
		e1 := f.WriteFile(ctx, r+"/empty", bytes.NewReader(nil), 0o644)
		e2 := f.WriteFile(ctx, r+"/big", bytes.NewReader(big), 0o644)
		rc, err := f.ReadFile(ctx, r+"/big")
		same := "read " + errs(err)
		if err == nil {
			got, _ := io.ReadAll(rc)
			rc.Close()
			same = fmt.Sprintf("same=%v", bytes.Equal(got, big))
		}
		fi, serr := f.Stat(ctx, r+"/empty")
		return errs(e1) + " " + errs(e2) + " " + same + " " + statStr(fi, serr, p)
	}},
	{"writeat", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		n, err := f.WriteAt(ctx, r+"/d/f", []byte("ZZ"), 15)
		n2, err2 := f.WriteAt(ctx, r+"/d/f", []byte("ab"), 1)
		_, err3 := f.WriteAt(ctx, r+"/missing", []byte("x"), 0)
		_, err4 := f.WriteAt(ctx, r+"/d", []byte("x"), 0)
		return fmt.Sprintf("%d %s %d %s %s %s %s", n, errs(err), n2, errs(err2), errs(err3), errs(err4), readStr(ctx, f, r+"/d/f"))
	}},
	{"truncate", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Truncate(ctx, r+"/d/f", 30)
		fi, serr := f.Stat(ctx, r+"/d/f")
		e2 := f.Truncate(ctx, r+"/d/f", 4)
		return errs(e1) + " " + statStr(fi, serr, p) + " " + errs(e2) + " " + readStr(ctx, f, r+"/d/f") + " " +
			errs(f.Truncate(ctx, r+"/missing", 1)) + " " + errs(f.Truncate(ctx, r+"/d", 1))
	}},
	{"create", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Create(ctx, r+"/d/c", 0o644, true)
		fi, serr := f.Stat(ctx, r+"/d/c")
		e2 := f.Create(ctx, r+"/d/c", 0o644, true)
		f.WriteFile(ctx, r+"/d/c", strings.NewReader("abc"), 0o644)
		e3 := f.Create(ctx, r+"/d/c", 0o600, false)
		fi2, serr2 := f.Stat(ctx, r+"/d/c")
		e4 := f.Create(ctx, r+"/d", 0o644, false)
		e5 := f.Create(ctx, r+"/no/c", 0o644, false)
		return strings.Join([]string{errs(e1), statStr(fi, serr, p), errs(e2), errs(e3), statStr(fi2, serr2, p), errs(e4), errs(e5)}, " ")
	}},
	{"symlink", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Symlink(ctx, "f", r+"/d/l")
		lfi, lerr := f.Lstat(ctx, r+"/d/l")
		sfi, serr := f.Stat(ctx, r+"/d/l")
		t, terr := f.Readlink(ctx, r+"/d/l")
		e2 := f.Symlink(ctx, "g", r+"/d/l")
		_, e3 := f.Readlink(ctx, r+"/d/f")
		_, e4 := f.Readlink(ctx, r+"/missing")
		return strings.Join([]string{errs(e1), statStr(lfi, lerr, p), statStr(sfi, serr, p), fmt.Sprintf("%q", t), errs(terr), errs(e2), errs(e3), errs(e4), readStr(ctx, f, r+"/d/l")}, "\n")
	}},
	{"dangling symlink", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Symlink(ctx, "nowhere", r+"/d/dl")
		sfi, serr := f.Stat(ctx, r+"/d/dl")
		lfi, lerr := f.Lstat(ctx, r+"/d/dl")
		return strings.Join([]string{errs(e1), statStr(sfi, serr, p), statStr(lfi, lerr, p), readStr(ctx, f, r+"/d/dl")}, " ")
	}},
	{"symlink to dir", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Symlink(ctx, "d", r+"/dl")
		fi, err := f.Stat(ctx, r+"/dl/f")
		return errs(e1) + " " + statStr(fi, err, p)
	}},
	{"link", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Link(ctx, r+"/d/f", r+"/d/h")
		fi, serr := f.Stat(ctx, r+"/d/f")
		e2 := f.Link(ctx, r+"/d", r+"/d2")
		e3 := f.Link(ctx, r+"/d/g", r+"/d/h")
		e4 := f.Link(ctx, r+"/missing", r+"/d/m")
		e5 := f.Link(ctx, r+"/d/f", r+"/no/h")
		return strings.Join([]string{errs(e1), statStr(fi, serr, p), errs(e2), errs(e3), errs(e4), errs(e5)}, " ")
	}},
	{"rmdir and remove", func(ctx context.Context, f providers.Files, r string, _ bool) string {
		f.Mkdir(ctx, r+"/e", 0o755)
		f.Mkdir(ctx, r+"/e/sub", 0o700)
		return strings.Join([]string{
			errs(f.Rmdir(ctx, r+"/e")), errs(f.Rmdir(ctx, r+"/d/f")), errs(f.Rmdir(ctx, r+"/missing")),
			errs(f.Rmdir(ctx, r+"/dl")), errs(f.Remove(ctx, r+"/e")), errs(f.Remove(ctx, r+"/missing")),
			errs(f.Remove(ctx, r+"/d/f/x")),
		}, " ")
	}},
	{"rename", func(ctx context.Context, f providers.Files, r string, p bool) string {
		var out []string
		out = append(out, errs(f.Rename(ctx, r+"/d/g", r+"/d/c")))         // file over file
		out = append(out, errs(f.Rename(ctx, r+"/d/c", r+"/e")))           // file over dir
		f.Mkdir(ctx, r+"/x", 0o755)                                        //
		out = append(out, errs(f.Rename(ctx, r+"/x", r+"/e")))             // dir over non-empty dir
		out = append(out, errs(f.Rename(ctx, r+"/x", r+"/d/f")))           // dir over file
		out = append(out, errs(f.Rename(ctx, r+"/e", r+"/e/sub/in")))      // dir into itself
		out = append(out, errs(f.Rename(ctx, r+"/x", r+"/e/sub")))         // dir over empty dir
		out = append(out, errs(f.Rename(ctx, r+"/missing", r+"/y")))       // missing
		out = append(out, errs(f.Rename(ctx, r+"/d/c", r+"/no/y")))        // missing parent
		out = append(out, errs(f.Rename(ctx, r+"/d/f", r+"/d/h")))         // hard links of one file
		out = append(out, errs(f.Rename(ctx, r+"/d/l", r+"/d/l2")))        // a symlink
		out = append(out, errs(f.Rename(ctx, r+"/d/dl", r+"/d/dl")))       // onto itself
		out = append(out, errs(f.Rename(ctx, r+"/dl", r+"/dl2")))          // a symlink to a dir
		out = append(out, errs(f.Rename(ctx, r+"/d/c", r+"/dl2")))         // file over a symlink to a dir
		out = append(out, dirStr(ctx, f, r+"/d", p), dirStr(ctx, f, r, p)) //
		out = append(out, dirStr(ctx, f, r+"/e", p))
		return strings.Join(out, "\n")
	}},
	{"chmod", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Chmod(ctx, r+"/d/f", 0o755|os.ModeSetuid)
		fi, serr := f.Stat(ctx, r+"/d/f")
		e2 := f.Chmod(ctx, r+"/e", 0o700|os.ModeSticky)
		fi2, serr2 := f.Stat(ctx, r+"/e")
		e3 := f.Chmod(ctx, r+"/missing", 0o644)
		return strings.Join([]string{errs(e1), statStr(fi, serr, p), errs(e2), statStr(fi2, serr2, p), errs(e3)}, " ")
	}},
	{"chown", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Chown(ctx, r+"/d/f", os.Getuid(), os.Getgid())
		e2 := f.Chown(ctx, r+"/d/f", -1, -1)
		e3 := f.Chown(ctx, r+"/missing", -1, -1)
		return strings.Join([]string{errs(e1), errs(e2), errs(e3)}, " ")
	}},
	{"utimes", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Utimes(ctx, r+"/d/f", t1, t2)
		fi, serr := f.Stat(ctx, r+"/d/f")
		s1 := errs(serr)
		if serr == nil {
			s1 = info(fi, p, true)
		}
		e2 := f.Utimes(ctx, r+"/d/f", time.Time{}, t3)
		fi, serr = f.Stat(ctx, r+"/d/f")
		s2 := errs(serr)
		if serr == nil {
			s2 = info(fi, p, true)
		}
		e3 := f.Utimes(ctx, r+"/missing", t1, t1)
		e4 := f.Utimes(ctx, r+"/d/c", t4, t4)
		s4 := timedEntries(ctx, f, r+"/d", p, "c", "f") // listings carry times too
		fi, serr = f.Stat(ctx, r+"/d/c")
		s3 := errs(serr)
		if serr == nil {
			s3 = info(fi, p, true)
		}
		return strings.Join([]string{errs(e1), s1, errs(e2), s2, errs(e3), errs(e4), s3, s4}, "\n")
	}},
	{"mknod", mknodStep},
	{"mkdir in a set-group-ID directory", func(ctx context.Context, f providers.Files, r string, p bool) string {
		e1 := f.Mkdir(ctx, r+"/sg", 0o755)
		e2 := f.Chmod(ctx, r+"/sg", 0o775|os.ModeSetgid)
		e3 := f.Mkdir(ctx, r+"/sg/sub", 0o700)
		fi, serr := f.Lstat(ctx, r+"/sg/sub")
		e4 := f.Rmdir(ctx, r+"/sg/sub")
		e5 := f.Rmdir(ctx, r+"/sg")
		return strings.Join([]string{errs(e1), errs(e2), errs(e3), statStr(fi, serr, p), errs(e4), errs(e5)}, " ")
	}},
	{"readdir", func(ctx context.Context, f providers.Files, r string, p bool) string {
		return dirStr(ctx, f, r+"/d", p) + "\n" + dirStr(ctx, f, r+"/d/f", p) + "\n" + dirStr(ctx, f, r+"/missing", p) + "\n" + dirStr(ctx, f, r+"/e/sub", p)
	}},
	{"statfs and fsync", func(ctx context.Context, f providers.Files, r string, p bool) string {
		st, err := f.Statfs(ctx, r)
		_, err2 := f.Statfs(ctx, r+"/missing")
		return fmt.Sprintf("namelen=%d %s %s %s %s", st.NameLen, errs(err), errs(err2), errs(f.Fsync(ctx, r+"/d/f")), errs(f.Fsync(ctx, r+"/missing")))
	}},
	{"remove", func(ctx context.Context, f providers.Files, r string, p bool) string {
		return strings.Join([]string{errs(f.Remove(ctx, r+"/d/l2")), errs(f.Remove(ctx, r+"/dl2")), errs(f.Rmdir(ctx, r+"/e/sub")), dirStr(ctx, f, r, p), dirStr(ctx, f, r+"/d", p)}, "\n")
	}},
}

// runConformance runs the table on a row and on a host directory.
func runConformance(t *testing.T, rw row) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ref := t.TempDir()
	for _, s := range steps {
		want := s.do(ctx, osFiles{}, ref, rw.partial)
		got := s.do(ctx, rw.files, rw.root, rw.partial)
		rw.check(t, s.name, got, want)
	}
	if rw.walker == nil {
		return
	}
	want, err := osWalk(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rw.walker.Walk(ctx, rw.root)
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	rw.check(t, "Walk", walkStr(got, rw.partial), walkStr(want, rw.partial))
}

func walkStr(fis []providers.FileInfo, partial bool) string {
	var parts []string
	for _, fi := range fis {
		parts = append(parts, info(fi, partial, false))
	}
	return strings.Join(parts, "\n")
}

// hostileNames are names that break scripts which splice paths into their
// text or read tools' line output.
var hostileNames = []string{
	"sp ace", " lead", "new\nline", "trail\n", `quo"te`, "it's", "-dash", "--", "-n",
	"\xff\xfe\x80bytes", "back\\slash", "\\0101", "%s%b%n", "$(touch pwned)", "`touch pwned`",
	"*", "?", "semi;colon", "tab\there", "a=b", "é-ü", "..dots",
}

// hostileCore is the part of hostileNames the rows that spend an exec per
// operation in a container run: one name for each way a script can break.
var hostileCore = []string{"sp ace", "new\nline", `quo"te`, "-dash", "\xff\xfe\x80bytes", "back\\slash", "$(touch pwned)"}

// hostileMin is the least a row whose scripts another row already covers
// runs: what its own transport (the stat-path API, busybox's tools) could
// get wrong.
var hostileMin = []string{"new\nline", "-dash", "\xff\xfe\x80bytes"}

// hostileSteps does every operation a script serves on each hostile name.
func hostileSteps(ctx context.Context, f providers.Files, r string, p bool, names []string) string {
	var out []string
	for i, n := range names {
		name := r + "/" + n
		out = append(out, errs(f.WriteFile(ctx, name, strings.NewReader(n), 0o644)))
		fi, err := f.Stat(ctx, name)
		out = append(out, statStr(fi, err, p), readStr(ctx, f, name), readAtStr(ctx, f, name, 3, 1))
		_, err = f.WriteAt(ctx, name, []byte(n), 2)
		out = append(out, errs(err), errs(f.Truncate(ctx, name, 5)), errs(f.Chmod(ctx, name, 0o640)))
		out = append(out, errs(f.Utimes(ctx, name, t1, t2)))
		out = append(out, errs(f.Rename(ctx, name, name+"2")), errs(f.Link(ctx, name+"2", name)))
		link := fmt.Sprintf("%s/ln-%d", r, i)
		out = append(out, errs(f.Symlink(ctx, n, link)))
		tgt, err := f.Readlink(ctx, link)
		out = append(out, fmt.Sprintf("%q %s", tgt, errs(err)))
		out = append(out, errs(f.Mkdir(ctx, name+".d", 0o755)), errs(f.Create(ctx, name+".d/"+n, 0o600, true)))
		out = append(out, dirStr(ctx, f, name+".d", p))
		out = append(out, errs(f.Remove(ctx, name+".d/"+n)), errs(f.Rmdir(ctx, name+".d")), errs(f.Remove(ctx, name+"2")))
		fi, err = f.Lstat(ctx, link)
		out = append(out, statStr(fi, err, p))
	}
	out = append(out, dirStr(ctx, f, r, p))
	return strings.Join(out, "\n")
}

func runHostile(t *testing.T, rw row, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ref := t.TempDir()
	want := hostileSteps(ctx, osFiles{}, ref, rw.partial, names)
	got := hostileSteps(ctx, rw.files, rw.root, rw.partial, names)
	if got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Errorf("line %d:\n got: %s\nwant: %s", i, gl[i], wl[i])
			}
		}
		if len(gl) != len(wl) {
			t.Errorf("got %d lines, want %d", len(gl), len(wl))
		}
	}
	if !strings.Contains(want, `"\xff\xfe\x80bytes"`) {
		t.Fatalf("the reference lost a name: %s", want)
	}
	if rw.walker != nil {
		w, err := osWalk(ref)
		if err != nil {
			t.Fatal(err)
		}
		g, err := rw.walker.Walk(ctx, rw.root)
		if err != nil {
			t.Fatalf("Walk: %v", err)
		}
		if gs, ws := walkStr(g, rw.partial), walkStr(w, rw.partial); gs != ws {
			t.Errorf("Walk:\n got: %s\nwant: %s", gs, ws)
		}
	}
}
