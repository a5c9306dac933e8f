package fake_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// The fake's files must answer as Linux does. Each scenario runs the same
// steps on a fake box and on a real temporary directory, and every step
// must give the same errno and the same result (stat fields, contents,
// link targets); then the two trees must hold the same entries.

var scenarios = map[string][]string{
	"dirs": {
		"mkdir d", "mkdir d", "mkdir nope/x", "mkdir d/", "mkdir e/", "stat e",
		"create d/f", "mkdir d/f/x", "stat d/f/", "stat d/f/x", "lstat d/f/",
		"rmdir d", "rmdir d/f", "rmdir d/f/", "rmdir nope", "rmdir d/.", "rmdir d/..", "rmdir .",
		"readdir d", "readdir d/f", "readdir nope", "readdir d/f/",
		"mkdir d/.", "mkdir d/..", "mkdir " + strings.Repeat("n", 256), "mkdir " + strings.Repeat("n", 255),
		"stat d/../d/./f", "stat nope/..", "stat d/f/..",
		"create e/", "createx e/", "createx new/", "create new2/", "createx e", "mkdir d/f/",
		"mkdir e/x", "mkdir e/x/y", "stat e", "rename e/x/y e/y", "stat e/x", "stat e",
		"unlink d/f", "rmdir d", "stat d", "readdir e",
	},
	"files": {
		"mkdir d", "create d/f", "write d/f hello", "read d/f", "readat d/f 1 3", "readat d/f 9 2",
		"read d", "read nope", "create d", "createx d/f", "createx d", "create d/f", "stat d/f",
		"create d/f/", "create d/g/", "create nope/f", "write d hello", "write nope/f x", "write d/f/x x",
		"writeat d/f 3 abc", "read d/f", "writeat nope 0 x", "writeat d 0 x", "writeat d/f -1 x",
		"truncate d/f 10", "read d/f", "truncate d/f 2", "read d/f", "truncate d 0", "truncate nope 0", "truncate d/f -1",
		"chmod d/f 4755", "stat d/f", "chmod d 1777", "stat d", "chmod nope 644",
		"unlink d/f/", "unlink d", "unlink d/f", "unlink d/f", "stat d/f", "readat d/f 0 1",
		"create d/h", "link d/h d/i", "stat d/h", "write d/h new", "read d/i", "stat d/i",
		"link d/h d/i", "link d e", "link nope e", "link d/h nope/e", "link d/h d/j/",
		"readlink d/h", "readlink nope", "statfs d", "statfs nope",
	},
	"rename": {
		"mkdir a", "mkdir a/b", "create f", "rename f a", "rename a f", "rename a a/b/c", "rename a a",
		"mkdir c", "create c/x", "rename a c", "rename a/b c/x", "unlink c/x", "rename a c", "stat a", "stat c/b",
		"rename nope x", "rename f nope/x", "link f g", "rename f g", "stat f", "stat g",
		"rename c .", "rename . z", "rename f/ h", "rename f h/", "rename c/ e/", "stat e/b",
		"rename f e/b/f2", "stat e/b/f2", "rename e/b e/b/x", "mkdir e/b/y", "rename e/b/y e",
		"rename g e/b/y", "stat e/b/y", "rename e/b/f2 e/b/y", "read e/b/y",
	},
	"symlinks": {
		"mkdir d", "create d/f", "write d/f data", "symlink d/f l", "stat l", "lstat l", "read l", "readlink l",
		"symlink nope dang", "stat dang", "lstat dang", "create dang", "stat nope", "lstat dang",
		"symlink nope2 dang2", "createx dang2", "mkdir dang2", "symlink x dang2", "readlink dang2/",
		"symlink d ld", "stat ld/f", "lstat ld/", "lstat ld", "readdir ld", "rmdir ld/", "unlink ld/", "rmdir ld",
		"symlink loop2 loop1", "symlink loop1 loop2", "stat loop1", "lstat loop1", "create loop1", "readlink loop1",
		"stat loop1/x", "mkdir loop1/x", "symlink self self", "stat self",
		"symlink $R/d abs", "stat abs/f", "readdir abs", "symlink ../d/f d/up", "stat d/up", "read d/up",
		"symlink . dot", "stat dot/dot/dot/d/f", "symlink / root", "readlink root", "symlink  empty",
		"chmod l 600", "stat d/f", "lstat l", "truncate l 2", "read d/f", "writeat l 0 XY", "read d/f",
		"link l hl", "lstat hl", "lstat l", "rename l d/l2", "stat d/l2", "unlink ld", "stat d",
		"write l2 x", "symlink d/f l3", "write l3 replaced", "lstat l3", "read d/f",
	},
	"symlink-depth": chain(41),
}

// chain makes c0 -> c1 -> ... -> cN -> f: following c0 takes N+1 links.
func chain(n int) []string {
	steps := []string{"create f"}
	steps = append(steps, fmt.Sprintf("symlink f c%d", n))
	for i := n - 1; i >= 0; i-- {
		steps = append(steps, fmt.Sprintf("symlink c%d c%d", i+1, i))
	}
	return append(steps, "stat c0", "stat c1", "stat c2", "lstat c0", "readlink c0")
}

func TestFilesLikeLinux(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the fake answers as root does; run as root to compare")
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for name, steps := range scenarios {
		t.Run("scenario="+name, func(t *testing.T) {
			ctx := context.Background()
			p := fake.New()
			b, err := p.Create(ctx, providers.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			files := b.(providers.Files)
			if err := files.Mkdir(ctx, "/s", 0o755); err != nil {
				t.Fatal(err)
			}
			fk := fakeFS{ctx: ctx, f: files, root: "/s"}
			real := realFS{root: t.TempDir()}
			for i, step := range steps {
				got, want := fk.do(step), real.do(step)
				if got != want {
					t.Errorf("step %d %q:\n fake:  %s\n linux: %s", i, step, got, want)
				}
			}
			got, want := fk.tree(), real.tree()
			if got != want {
				t.Errorf("trees differ:\n fake:\n%s\n linux:\n%s", got, want)
			}
		})
	}
}

// step parsing, shared by both sides

func parse(step string, root string) (op string, args []string) {
	f := strings.SplitN(step, " ", 2)
	op = f[0]
	if len(f) > 1 {
		args = strings.Split(f[1], " ")
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$R", root)
	}
	return op, args
}

func join(root, rel string) string {
	if rel == "" {
		return ""
	}
	return root + "/" + rel
}

func mode(s string) os.FileMode {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		panic(err)
	}
	return providers.FileModeFromUnix(uint32(m))
}

func num(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

func result(errno syscall.Errno, out string) string {
	if errno != 0 {
		return "errno " + errno.Error()
	}
	return "ok " + out
}

func describe(m os.FileMode, size int64, nlink uint64) string {
	if m.IsDir() {
		size = 0 // directory sizes are the file system's business
	}
	return fmt.Sprintf("%v size=%d nlink=%d", m, size, nlink)
}

// fakeFS runs steps on the fake.
type fakeFS struct {
	ctx  context.Context
	f    providers.Files
	root string
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errno, ok := providers.ErrnoOf(err); ok {
		return errno
	}
	panic(fmt.Sprintf("error without an errno: %v", err))
}

func (fk fakeFS) do(step string) string {
	ctx, f := fk.ctx, fk.f
	op, a := parse(step, fk.root)
	p := func(i int) string { return join(fk.root, a[i]) }
	var err error
	out := ""
	switch op {
	case "mkdir":
		err = f.Mkdir(ctx, p(0), 0o777)
	case "create", "createx":
		err = f.Create(ctx, p(0), 0o666, op == "createx")
	case "write":
		err = f.WriteFile(ctx, p(0), strings.NewReader(a[1]), 0o666)
	case "writeat":
		var n int
		n, err = f.WriteAt(ctx, p(0), []byte(a[2]), num(a[1]))
		out = strconv.Itoa(n)
	case "read":
		var rc io.ReadCloser
		if rc, err = f.ReadFile(ctx, p(0)); err == nil {
			b, _ := io.ReadAll(rc)
			out = fmt.Sprintf("%q", b)
		}
	case "readat":
		buf := make([]byte, num(a[2]))
		var n int
		n, err = f.ReadAt(ctx, p(0), buf, num(a[1]))
		if err == io.EOF {
			err = nil
		}
		out = fmt.Sprintf("%q", buf[:n])
	case "stat", "lstat":
		var fi providers.FileInfo
		if op == "stat" {
			fi, err = f.Stat(ctx, p(0))
		} else {
			fi, err = f.Lstat(ctx, p(0))
		}
		out = describe(fi.Mode, fi.Size, uint64(fi.Nlink))
	case "readdir":
		var fis []providers.FileInfo
		fis, err = f.ReadDir(ctx, p(0))
		var names []string
		for _, fi := range fis {
			names = append(names, fi.Name)
		}
		out = strings.Join(names, ",")
	case "unlink":
		err = f.Remove(ctx, p(0))
	case "rmdir":
		err = f.Rmdir(ctx, p(0))
	case "rename":
		err = f.Rename(ctx, p(0), p(1))
	case "link":
		err = f.Link(ctx, p(0), p(1))
	case "symlink":
		err = f.Symlink(ctx, a[0], p(1))
	case "readlink":
		out, err = f.Readlink(ctx, p(0))
	case "chmod":
		err = f.Chmod(ctx, p(0), mode(a[1]))
	case "truncate":
		err = f.Truncate(ctx, p(0), num(a[1]))
	case "statfs":
		_, err = f.Statfs(ctx, p(0))
	default:
		panic("unknown step " + step)
	}
	errno := errnoOf(err)
	return result(errno, out)
}

func (fk fakeFS) tree() string {
	fis, err := fk.f.(providers.Walker).Walk(fk.ctx, fk.root)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, fi := range fis {
		size, target := fi.Size, strings.ReplaceAll(fi.Target, fk.root, "$R")
		if fi.IsSymlink() {
			size = int64(len(target))
		}
		fmt.Fprintf(&b, "%s %s", fi.Name, describe(fi.Mode, size, uint64(fi.Nlink)))
		if fi.IsSymlink() {
			fmt.Fprintf(&b, " -> %s", target)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// realFS runs steps on a real directory.
type realFS struct{ root string }

func errnoOfOS(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		panic(fmt.Sprintf("error without an errno: %v", err))
	}
	return errno
}

func (r realFS) do(step string) string {
	op, a := parse(step, r.root)
	p := func(i int) string { return join(r.root, a[i]) }
	var err error
	out := ""
	switch op {
	case "mkdir":
		err = syscall.Mkdir(p(0), 0o777)
	case "create", "createx":
		flags := syscall.O_CREAT | syscall.O_TRUNC | syscall.O_WRONLY | syscall.O_CLOEXEC
		if op == "createx" {
			flags |= syscall.O_EXCL
		}
		var fd int
		if fd, err = syscall.Open(p(0), flags, 0o666); err == nil {
			syscall.Close(fd)
		}
	case "write":
		// A temporary name in the same directory, then rename: what
		// WriteFile promises.
		tmp := filepath.Join(filepath.Dir(p(0)), ".tmp-write")
		if err = os.WriteFile(tmp, []byte(a[1]), 0o666); err == nil {
			if st, serr := os.Lstat(p(0)); serr == nil && st.Mode().IsRegular() {
				os.Chmod(tmp, st.Mode())
			}
			if err = syscall.Rename(tmp, p(0)); err != nil {
				os.Remove(tmp)
			}
		}
	case "writeat":
		var fd int
		if fd, err = syscall.Open(p(0), syscall.O_WRONLY|syscall.O_CLOEXEC, 0); err == nil {
			var n int
			n, err = syscall.Pwrite(fd, []byte(a[2]), num(a[1]))
			out = strconv.Itoa(n)
			syscall.Close(fd)
		}
	case "read":
		var b []byte
		b, err = os.ReadFile(p(0))
		out = fmt.Sprintf("%q", b)
	case "readat":
		var fd int
		buf := make([]byte, num(a[2]))
		n := 0
		if fd, err = syscall.Open(p(0), syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
			n, err = syscall.Pread(fd, buf, num(a[1]))
			syscall.Close(fd)
		}
		out = fmt.Sprintf("%q", buf[:max(n, 0)])
	case "stat", "lstat":
		var st syscall.Stat_t
		if op == "stat" {
			err = syscall.Stat(p(0), &st)
		} else {
			err = syscall.Lstat(p(0), &st)
		}
		out = describe(providers.FileModeFromUnix(st.Mode), st.Size, uint64(st.Nlink))
	case "readdir":
		var des []os.DirEntry
		des, err = os.ReadDir(p(0))
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		out = strings.Join(names, ",")
	case "unlink":
		err = syscall.Unlink(p(0))
	case "rmdir":
		err = syscall.Rmdir(p(0))
	case "rename":
		err = syscall.Rename(p(0), p(1))
	case "link":
		err = syscall.Link(p(0), p(1))
	case "symlink":
		err = syscall.Symlink(a[0], p(1))
	case "readlink":
		buf := make([]byte, 4096)
		var n int
		if n, err = syscall.Readlink(p(0), buf); err == nil {
			out = string(buf[:n])
		}
	case "chmod":
		err = syscall.Chmod(p(0), providers.UnixMode(mode(a[1])))
	case "truncate":
		err = syscall.Truncate(p(0), num(a[1]))
	case "statfs":
		var st syscall.Statfs_t
		err = syscall.Statfs(p(0), &st)
	default:
		panic("unknown step " + step)
	}
	return result(errnoOfOS(err), out)
}

func (r realFS) tree() string {
	var b strings.Builder
	filepath.WalkDir(r.root, func(p string, de os.DirEntry, err error) error {
		if err != nil || p == r.root {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.root, p)
		m := providers.FileModeFromUnix(st.Mode)
		size, target := st.Size, ""
		if m&os.ModeSymlink != 0 {
			target, _ = os.Readlink(p)
			target = strings.ReplaceAll(target, r.root, "$R")
			size = int64(len(target))
		}
		fmt.Fprintf(&b, "%s %s", rel, describe(m, size, uint64(st.Nlink)))
		if m&os.ModeSymlink != 0 {
			fmt.Fprintf(&b, " -> %s", target)
		}
		b.WriteByte('\n')
		return nil
	})
	return b.String()
}
