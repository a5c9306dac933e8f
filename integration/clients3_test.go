package integration

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// clients3Suite is more real programs on work/ (rsync, git's heavier
// commands, locks, sparse files, descriptors shared by processes), each
// compared with the same steps on the host's disk where that makes sense.
var clients3Suite = []suiteCase{
	{"rsync", testRsync},
	{"syscalls-vs-disk", testSyscallsVsDisk},
	{"locks-host-local", testLocks},
	{"git-clone-switch-gc", testGitHeavy},
	{"host-and-box-write-one-file", testHostAndBoxWrite},
	{"hard-link-names", testHardLinkNames},
	{"box-made-hard-links-one-inode", testBoxHardLinkInode},
	{"follow-a-file-the-box-appends", testFollowBoxAppends},
	{"box-disk-full-at-close", testDiskFullAtClose},
	{"box-changes-a-names-kind", testBoxChangesKind},
}

func TestClients3(t *testing.T) { runSuite(t, clients3Suite) }

// treeListing is one line per entry under dir: kind, mode, size, mtime to
// the nanosecond, path and link target; sorted.
func treeListing(t *testing.T, dir string) string {
	t.Helper()
	return sortLines(host(t, dir, "find", ".", "-printf", `%y %m %s %T@ %p>%l\n`))
}

// boxTreeListing is treeListing computed in the box.
func boxTreeListing(t *testing.T, b *boxT, dir string) string {
	t.Helper()
	return sortLines(b.must(t, fmt.Sprintf(`cd %q && find . -printf '%%y %%m %%s %%T@ %%p>%%l\n'`, b.relBox(dir))))
}

// noLinkTimes blanks the times of links in a treeListing: rsync makes a
// link with the time of its making (it does not set a link's times), so
// two copies never agree on them.
func noLinkTimes(listing string) string {
	lines := strings.Split(listing, "\n")
	for i, l := range lines {
		if f := strings.SplitN(l, " ", 5); len(f) == 5 && f[0] == "l" {
			f[3] = "-"
			lines[i] = strings.Join(f, " ")
		}
	}
	return strings.Join(lines, "\n")
}

// rsyncSrc makes a tree with modes, old times, a link and a subdirectory;
// the directories' times are set last, as an archive leaves them.
func rsyncSrc(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	for i := range 12 {
		p := filepath.Join(src, "a", fmt.Sprintf("f%d", i))
		os.WriteFile(p, []byte(strings.Repeat(fmt.Sprintf("%d", i), 700*i+1)), 0o644)
		ft := time.Date(2011, 1, 1, 0, 0, i, 1000*i, time.UTC)
		os.Chtimes(p, ft, ft)
	}
	os.Chmod(filepath.Join(src, "a", "f3"), 0o600)
	os.Chmod(filepath.Join(src, "a", "f4"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "b", "x"), []byte("x\n"), 0o640)
	os.Symlink("f1", filepath.Join(src, "a", "sym"))
	resetDirTimes(t, src)
	return src
}

// resetDirTimes gives src's directories fixed old times again.
func resetDirTimes(t *testing.T, src string) {
	t.Helper()
	for i, d := range []string{"a/b", "a", "."} {
		dt := time.Date(2010, 2, 2, 0, 0, 0, 123456789+i, time.UTC)
		if err := os.Chtimes(filepath.Join(src, d), dt, dt); err != nil {
			t.Fatal(err)
		}
	}
}

// testRsync: rsync -a into work/ (temporary name, rename, times, modes,
// then each directory's times again), --inplace, --delete, and out of
// work/ again; a second run finds nothing to do. The same runs into a
// host directory say what the tree must be, through the mount and in the
// box, directory times included: rsync re-stats each directory it filled
// and resets its times only when they moved, so a directory whose change
// the mount did not show kept the time of rsync's last rename in the box.
func testRsync(t *testing.T, b *boxT) {
	needTool(t, "rsync")
	src := rsyncSrc(t)
	ref := filepath.Join(t.TempDir(), "r")
	dst := filepath.Join(b.work, "r")
	same := func(step string) {
		t.Helper()
		want := noLinkTimes(treeListing(t, ref))
		if got := noLinkTimes(treeListing(t, dst)); got != want {
			t.Errorf("%s, through the mount:\n%s\nwant\n%s", step, got, want)
		}
		if got := noLinkTimes(boxTreeListing(t, b, dst)); got != want {
			t.Errorf("%s, in the box:\n%s\nwant\n%s", step, got, want)
		}
		if out := host(t, b.work, "rsync", "-ai", "--dry-run", "--delete", src+"/", "r/"); out != "" {
			t.Errorf("%s: a second rsync would still do:\n%s", step, out)
		}
	}
	sync := func(step string, opts ...string) {
		t.Helper()
		for _, to := range []string{ref, dst} {
			host(t, b.work, "rsync", append(append([]string{"-a"}, opts...), src+"/", to+"/")...)
		}
		same(step)
	}
	sync("rsync -a into an empty directory")

	// New content in existing files: each goes to a temporary name and is
	// renamed over the old one; the directories' times must come back.
	edit := func(names ...string) {
		for _, n := range names {
			p := filepath.Join(src, "a", n)
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("more\n")
			f.Close()
			ft := time.Date(2012, 2, 2, 0, 0, 0, len(n), time.UTC)
			os.Chtimes(p, ft, ft)
		}
		resetDirTimes(t, src)
	}
	edit("f2", "f9")
	sync("rsync -a of changed files")
	edit("f5", "f10")
	sync("rsync -a --inplace", "--inplace")
	edit("f6")
	sync("rsync -a --inplace --no-whole-file (delta)", "--inplace", "--no-whole-file")
	os.Remove(filepath.Join(src, "a", "f7"))
	os.Remove(filepath.Join(src, "a", "b", "x"))
	os.Chmod(filepath.Join(src, "a", "f8"), 0o700)
	resetDirTimes(t, src)
	sync("rsync -a --delete", "--delete")

	// And out of work/ into a host directory.
	out := filepath.Join(t.TempDir(), "o")
	host(t, b.work, "rsync", "-a", "r/", out+"/")
	if got, want := noLinkTimes(treeListing(t, out)), noLinkTimes(treeListing(t, ref)); got != want {
		t.Errorf("rsync -a out of work/:\n%s\nwant\n%s", got, want)
	}
	sameSums(t, "rsync -a out of work/", sums(t, src), sums(t, out))
}

// syscallsScript does what programs do to files beyond open/read/write and
// prints what it saw, one line per step; run on a host directory and on
// work/, the two outputs must be the same.
const syscallsScript = `
import os, sys, errno, tempfile, shutil
os.chdir(sys.argv[1])
def step(name, fn):
    try: r = fn()
    except OSError as e: r = "error " + errno.errorcode.get(e.errno, str(e.errno))
    print(name, r)
def sparse():
    fd = os.open("sparse", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    os.pwrite(fd, b"head", 0); os.pwrite(fd, b"tail", 3 << 20)
    mid = os.pread(fd, 8, 1 << 20)
    os.close(fd)
    d = open("sparse", "rb").read()
    return len(d), d[:4], d[-4:], mid, d.count(0)
step("sparse write past EOF", sparse)
def falloc():
    fd = os.open("falloc", os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, b"abc"); os.posix_fallocate(fd, 0, 65536); size = os.fstat(fd).st_size; os.close(fd)
    return size, os.stat("falloc").st_size, open("falloc", "rb").read(4)
step("posix_fallocate", falloc)
def cfr():
    open("cfr-src", "wb").write(bytes(range(256)) * 4096)
    s = os.open("cfr-src", os.O_RDONLY); d = os.open("cfr-dst", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    n = 0
    while True:
        k = os.copy_file_range(s, d, 1 << 20)
        if not k: break
        n += k
    os.close(s); os.close(d)
    return n, open("cfr-dst", "rb").read() == open("cfr-src", "rb").read()
step("copy_file_range", cfr)
def replace_open():
    open("victim", "w").write("old\n")
    f = open("victim")
    fd, tmp = tempfile.mkstemp(dir=".", prefix=".victim.")
    os.write(fd, b"new\n"); os.fchmod(fd, 0o640); os.close(fd)
    os.replace(tmp, "victim")
    return f.read(), open("victim").read(), oct(os.stat("victim").st_mode & 0o777)
step("os.replace over an open file", replace_open)
def two_rdwr():
    open("shared", "wb").write(b"." * 16)
    a = os.open("shared", os.O_RDWR); b = os.open("shared", os.O_RDWR)
    os.pwrite(a, b"AAAA", 0); os.pwrite(b, b"BBBB", 8)
    seen = os.pread(b, 16, 0)
    os.close(a); os.pwrite(b, b"CC", 14); os.close(b)
    return seen, open("shared", "rb").read()
step("two O_RDWR opens", two_rdwr)
def rename_open():
    os.mkdir("d")
    fd = os.open("d/f", os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, b"a\n")
    os.rename("d/f", "d/g"); os.write(fd, b"b\n"); os.rename("d", "e"); os.write(fd, b"c\n"); os.close(fd)
    return sorted(os.listdir(".")), os.listdir("e"), open("e/g").read()
step("rename of an open file and its directory", rename_open)
def scandir():
    bad = []
    for e in os.scandir("."):
        a, b = e.stat(follow_symlinks=False), os.lstat(e.name)
        if e.inode() != b.st_ino or (a.st_ino, a.st_mode, a.st_size, a.st_mtime_ns, a.st_nlink) != (b.st_ino, b.st_mode, b.st_size, b.st_mtime_ns, b.st_nlink):
            bad.append(e.name)
    return bad
step("os.scandir stat fields", scandir)
def copytree_rmtree():
    shutil.copytree("e", "e2"); shutil.move("e2", "e3"); shutil.rmtree("e3")
    return sorted(os.listdir("."))
step("shutil copytree move rmtree", copytree_rmtree)
def dirsync():
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY); os.fsync(fd); os.close(fd); return "ok"
step("fsync of a directory", dirsync)
def readonly():
    open("ro", "w").write("x"); os.chmod("ro", 0o444)
    os.replace("victim", "ro")  # renamed over a read-only file, as git gc does
    return open("ro").read(), oct(os.stat("ro").st_mode & 0o777)
step("rename over a 0444 file", readonly)
def rename_same_file():
    open("n1", "w").write("n\n"); os.link("n1", "n2"); os.rename("n1", "n2")
    r = sorted(n for n in os.listdir(".") if n.startswith("n")), os.stat("n2").st_nlink
    os.unlink("n1"); os.unlink("n2")
    return r
step("rename onto another name of the same file", rename_same_file)
def two_names_open():
    open("k1", "w").write("k\n"); os.link("k1", "k2")
    a = os.open("k1", os.O_WRONLY | os.O_APPEND); b = os.open("k2", os.O_WRONLY | os.O_APPEND)
    os.write(a, b"via k1\n"); os.write(b, b"via k2\n"); os.close(a); os.close(b)
    r = open("k1").read(), open("k2").read(), os.stat("k1").st_ino == os.stat("k2").st_ino
    os.unlink("k1"); os.unlink("k2")
    return r
step("two names of a hard link open at once", two_names_open)
`

// testSyscallsVsDisk: sparse writes past EOF, posix_fallocate,
// copy_file_range, os.replace over an open file, two read-write opens,
// renames of an open file, scandir's stat fields: the same answers as the
// host's disk; what reaches the box is checked in the box. O_TMPFILE is
// an honest EOPNOTSUPP (nothing made); extended attributes say ENOTSUP at once.
func testSyscallsVsDisk(t *testing.T, b *boxT) {
	ref := t.TempDir()
	want := python(t, ref, syscallsScript)
	if got := python(t, b.work, syscallsScript); got != want {
		t.Errorf("through the mount:\n%s\non the host's disk:\n%s", got, want)
	}
	got := b.must(t, fmt.Sprintf("cd %q && stat -c '%%n %%s' sparse falloc cfr-dst && od -An -c -j $((3<<20)) sparse && cmp cfr-src cfr-dst && cat shared e/g ro && echo && echo $(ls -A)", b.relBox(b.work)))
	if want := "sparse 3145732\nfalloc 65536\ncfr-dst 1048576\n   t   a   i   l\nAAAA....BBBB..CCa\nb\nc\nnew\n\ncfr-dst cfr-src e falloc ro shared sparse\n"; got != want {
		t.Errorf("box sees:\n%q\nwant\n%q", got, want)
	}

	// O_TMPFILE: not supported here, said at once, nothing left behind.
	fd, err := unix.Open(b.work, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err == nil {
		unix.Close(fd)
		t.Errorf("O_TMPFILE opened in work/")
	} else if !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("O_TMPFILE: %v, want EOPNOTSUPP", err)
	}
	// Extended attributes: ENOTSUP for get, set and list, fast.
	f := filepath.Join(b.work, "shared")
	start := time.Now()
	for i := 0; i < 50; i++ {
		if _, err := unix.Lgetxattr(f, "user.x", make([]byte, 64)); !errors.Is(err, syscall.ENOTSUP) {
			t.Fatalf("getxattr: %v", err)
		}
		if err := unix.Lsetxattr(f, "user.x", []byte("1"), 0); !errors.Is(err, syscall.ENOTSUP) {
			t.Fatalf("setxattr: %v", err)
		}
		if _, err := unix.Llistxattr(f, make([]byte, 64)); !errors.Is(err, syscall.ENOTSUP) {
			t.Fatalf("listxattr: %v", err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("150 xattr calls took %v", d)
	}
	if got := names(t, b.work); strings.Join(got, " ") != "cfr-dst cfr-src e falloc ro shared sparse" {
		t.Errorf("work/ holds %q", got)
	}
}

// testLocks: flock and fcntl locks are host-local (docs/namespace.md): two
// host processes exclude each other through work/, a lock goes with its
// holder's close, and a process in the box takes the same file's lock
// regardless.
func testLocks(t *testing.T, b *boxT) {
	needTool(t, "flock")
	f := filepath.Join(b.work, "lock")
	if err := os.WriteFile(f, []byte("l\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := unix.Flock(int(h.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if out, err := hostErr(b.work, "flock", "-n", "lock", "true"); err == nil {
		t.Errorf("a second host process took an flock held by another: %s", out)
	}
	// A POSIX lock (F_SETLK) on a read-write open, tried from another process.
	rw, err := os.OpenFile(f, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(rw.Fd(), unix.F_SETLK, &lk); err != nil {
		t.Fatalf("fcntl F_SETLK: %v", err)
	}
	out := python(t, b.work, `
import fcntl, os, sys, errno
fd = os.open("lock", os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print("took it")
except OSError as e: print(errno.errorcode[e.errno])
`)
	if out != "EAGAIN\n" && out != "EACCES\n" {
		t.Errorf("another process's fcntl lock: %q", out)
	}
	// The box does not see host locks.
	if out, st := b.run(t, fmt.Sprintf("flock -n %q true && echo free", b.relBox(f))); st != "exit 0" || out != "free\n" {
		t.Errorf("flock in the box: %q %s", out, st)
	}
	rw.Close()
	h.Close()
	host(t, b.work, "flock", "-n", "lock", "true")
	if got := readString(t, f); got != "l\n" {
		t.Errorf("the lock file holds %q", got)
	}
}

// testGitHeavy: git clone of a local bare repository into work/, a branch
// switch changing, adding and removing many files, stash, gc and repack
// (packs made read-only, loose objects pruned), fsck, a clone of the clone
// inside work/ (hard-linked objects), and the same steps on the host's
// disk leave the same tree.
func testGitHeavy(t *testing.T, b *boxT) {
	needTool(t, "git")
	b.needCheapFileOps(t)
	up := t.TempDir()
	host(t, up, "git", "init", "-q", "-b", "main")
	for d := 0; d < 12; d++ {
		os.MkdirAll(filepath.Join(up, fmt.Sprintf("d%d", d)), 0o755)
		for f := 0; f < 12; f++ {
			os.WriteFile(filepath.Join(up, fmt.Sprintf("d%d/f%d", d, f)), []byte(fmt.Sprintf("%d %d\n", d, f)), 0o644)
		}
	}
	host(t, up, "git", "add", "-A")
	host(t, up, "git", "commit", "-qm", "base")
	host(t, up, "git", "checkout", "-q", "-b", "other")
	for d := 0; d < 12; d++ {
		for f := 0; f < 12; f += 2 {
			os.WriteFile(filepath.Join(up, fmt.Sprintf("d%d/f%d", d, f)), []byte(fmt.Sprintf("other %d %d\n", d, f)), 0o644)
		}
		os.Remove(filepath.Join(up, fmt.Sprintf("d%d/f11", d)))
		os.WriteFile(filepath.Join(up, fmt.Sprintf("d%d/new", d)), []byte("new\n"), 0o755)
	}
	os.MkdirAll(filepath.Join(up, "only", "other"), 0o755)
	os.WriteFile(filepath.Join(up, "only", "other", "x"), []byte("x\n"), 0o644)
	host(t, up, "git", "add", "-A")
	host(t, up, "git", "commit", "-qm", "other")
	host(t, up, "git", "checkout", "-q", "main")
	bare := filepath.Join(t.TempDir(), "up.git")
	host(t, up, "git", "clone", "-q", "--bare", up, bare)

	steps := func(dir string) string {
		host(t, dir, "git", "clone", "-q", bare, "c")
		c := filepath.Join(dir, "c")
		var log strings.Builder
		note := func(what string, args ...string) {
			fmt.Fprintf(&log, "%s: %s", what, host(t, c, "git", args...))
		}
		host(t, c, "git", "checkout", "-q", "other")
		note("status on other", "status", "--porcelain")
		os.WriteFile(filepath.Join(c, "d1", "f1"), []byte("dirty\n"), 0o644)
		host(t, c, "git", "stash", "-q")
		host(t, c, "git", "checkout", "-q", "main")
		note("status on main", "status", "--porcelain")
		host(t, c, "git", "stash", "pop", "-q")
		note("after stash pop", "status", "--porcelain")
		host(t, c, "git", "checkout", "-q", "--", ".")
		host(t, c, "git", "gc", "-q", "--prune=now")
		host(t, c, "git", "repack", "-adq")
		host(t, c, "git", "fsck", "--strict", "--no-dangling")
		note("loose objects after gc", "count-objects")
		host(t, c, "git", "checkout", "-q", "other")
		note("ls-files on other", "ls-files", "-s", "only")
		// A local clone hard-links the objects and checks that each link
		// has its source's inode number.
		host(t, dir, "git", "clone", "-q", "c", "c-local")
		fmt.Fprintf(&log, "local clone: %s", host(t, filepath.Join(dir, "c-local"), "git", "log", "--format=%s", "-1", "origin/other"))
		host(t, filepath.Join(dir, "c-local"), "git", "fsck", "--strict", "--no-dangling")
		os.RemoveAll(filepath.Join(dir, "c-local"))
		return log.String()
	}
	ref := t.TempDir()
	want := steps(ref)
	if got := steps(b.work); got != want {
		t.Errorf("git through the mount:\n%s\non the host's disk:\n%s", got, want)
	}
	if got, want := sortLines(host(t, filepath.Join(b.work, "c"), "find", ".", "-path", "./.git", "-prune", "-o", "-printf", `%y %m %s %p\n`)),
		sortLines(host(t, filepath.Join(ref, "c"), "find", ".", "-path", "./.git", "-prune", "-o", "-printf", `%y %m %s %p\n`)); got != want {
		t.Errorf("work tree after the switches:\n%s\non the host's disk:\n%s", got, want)
	}
	noGit := func(m map[string]string) map[string]string {
		for k := range m {
			if strings.HasPrefix(k, ".git/") {
				delete(m, k)
			}
		}
		return m
	}
	sameSums(t, "the checkout, in the box", noGit(sums(t, filepath.Join(ref, "c"))), noGit(boxSums(t, b, b.relBox(filepath.Join(b.work, "c")))))
}

// testHostAndBoxWrite: a host program and a command in the box write one
// file. The rule (docs/namespace.md, Writes): the host's writes reach the box
// as the whole file at close (or before a command starts), and the later
// close wins: nothing the host wrote before its close is lost, and what the
// box writes after that close is what both sides read. A local box's file
// is written in place instead, as on a disk.
func testHostAndBoxWrite(t *testing.T, b *boxT) {
	f := filepath.Join(b.work, "f")
	rel := b.relBox(f)
	h, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	h.WriteString("host 1\n")
	// A command started while the host holds writes sees them (pushed
	// first), and writes the file itself.
	if got := b.must(t, fmt.Sprintf("cat %q && echo box > %q", rel, rel)); got != "host 1\n" {
		t.Errorf("the box saw %q while the host held writes", got)
	}
	h.WriteString("host 2\n")
	if err := h.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	want := "host 1\nhost 2\n"
	inPlace := factsMap(t, b)["provider"] == "local"
	if inPlace {
		// A local box's own file is written in place (docs/namespace.md,
		// Writes), as on a disk: the box's truncate and line, then the
		// host's second write at its own offset, past a hole.
		want = "box\n\x00\x00\x00host 2\n"
	}
	if got := readString(t, f); got != want {
		t.Errorf("host reads %q after its close, want %q", got, want)
	}
	// The box's write was replaced: said in the box's err, not only the log.
	if got := readString(t, filepath.Join(b.dir, "err")); !inPlace && !strings.Contains(got, "/f: the push at close replaced a change the box made") {
		t.Errorf("err after the host's close replaced the box's write: %q", got)
	}
	if got := b.must(t, fmt.Sprintf("cat %q", rel)); got != want {
		t.Errorf("box reads %q after the host's close, want %q", got, want)
	}
	// The box writes after the host's close: both sides read the box's.
	b.must(t, fmt.Sprintf("echo box2 >> %q", rel))
	want += "box2\n"
	if got := readString(t, f); got != want {
		t.Errorf("host reads %q after the box appended, want %q", got, want)
	}
	// A shell's >> right after the box's: it lands after the box's line.
	b.must(t, fmt.Sprintf("echo box3 >> %q", rel))
	host(t, b.work, "bash", "-c", "echo host3 >> f")
	want += "box3\nhost3\n"
	if got := b.must(t, fmt.Sprintf("cat %q", rel)); got != want {
		t.Errorf("box reads %q after appends by the box and the host, want %q", got, want)
	}
	// A command still running while the host rewrites the file: the host's
	// close lands first (the command waits for a gate file the host makes
	// after it), the command's append after it; nothing waits on a clock.
	// Where no process outlives its command, a write is itself a command
	// and waits for the running one.
	b.needLiveProcesses(t)
	ex, err := os.OpenFile(filepath.Join(b.dir, "exec"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	gate := b.relBox(filepath.Join(b.work, "gate"))
	if _, err := ex.WriteString(fmt.Sprintf("i=0; while [ ! -e %q ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo late >> %q\n", gate, rel)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("host 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.work, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(ex); err != nil {
		t.Fatal(err)
	}
	want = "host 3\nlate\n"
	if got := readString(t, f); got != want {
		t.Errorf("host reads %q after the command ended, want %q", got, want)
	}
	if got := b.must(t, fmt.Sprintf("cat %q", rel)); got != want {
		t.Errorf("box reads %q, want %q", got, want)
	}
}

// testHardLinkNames: writes, appends and attribute changes through each
// name of a hard link, one after another, as on the host's disk: each name
// reads what the last write through any name left, no write undoes
// another (shell appends start at the end the kernel knows of that name),
// every name's link count follows ln and rm at once, and a write through
// a name removed while open lands in the file's remaining name.
func testHardLinkNames(t *testing.T, b *boxT) {
	script := `set -e
echo a > h1; stat -c %h h1; ln h1 h2; stat -c %h h1 h2; ln h1 h3; stat -c %h h1 h2 h3
cat h2 h3 > /dev/null; stat -c %s h2 h3 > /dev/null
echo b >> h1
cat h2 h3
echo c >> h2
cat h1
printf Z | dd of=h3 bs=1 conv=notrunc status=none
cat h1 h2
chmod 600 h2; stat -c %a h1 h3
truncate -s 4 h3; cat h1; echo; stat -c '%s %h' h2
rm h1; stat -c %h h2 h3; echo d >> h2; cat h3
exec 3>>h2; rm h2; echo e >&3; exec 3>&-; cat h3; stat -c %h h3
`
	ref := t.TempDir()
	want := host(t, ref, "bash", "-c", script)
	if got := host(t, b.work, "bash", "-c", script); got != want {
		t.Errorf("through the mount:\n%s\non the host's disk:\n%s", got, want)
	}
	if got := b.must(t, fmt.Sprintf("cd %q && ls && cat h3 && stat -c '%%a %%h' h3", b.relBox(b.work))); got != "h3\nZ\nb\nd\ne\n600 1\n" {
		t.Errorf("box sees %q", got)
	}
}

// testBoxHardLinkInode: names of a hard link the box made show one inode
// number on the host, however they are reached (stat, a listing), with the
// box's link count; a name removed in the box leaves the others' number.
func testBoxHardLinkInode(t *testing.T, b *boxT) {
	rel := b.relBox(b.work)
	b.must(t, fmt.Sprintf("cd %q && echo x > a && mkdir d && ln a d/b && ln a c && echo y > other", rel))
	ino := func(name string) (uint64, uint64) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(b.work, name), &st); err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		return st.Ino, uint64(st.Nlink)
	}
	ents, err := os.ReadDir(filepath.Join(b.work, "d"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("listing d: %v %v", ents, err)
	}
	a, n := ino("a")
	if n != 3 {
		t.Errorf("a has %d links, want 3", n)
	}
	for _, name := range []string{"d/b", "c"} {
		if got, _ := ino(name); got != a {
			t.Errorf("%s has inode %d, a has %d: one file, one number", name, got, a)
		}
	}
	if o, _ := ino("other"); o == a {
		t.Errorf("another file has a's number %d", a)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(b.work, "d", ents[0].Name()), &st); err != nil || st.Ino != a {
		t.Errorf("d/b through its listing: inode %d (%v), want %d", st.Ino, err, a)
	}
	b.must(t, fmt.Sprintf("cd %q && rm a", rel)) // a command's changes show when it ends
	if got, n := ino("c"); got != a || n != 2 {
		t.Errorf("after the box removed a: c is inode %d with %d links, want %d with 2", got, n, a)
	}
}

// testFollowBoxAppends: a host program holding a file open (tail -f, a log
// viewer) reads what commands in the box append to it, at the old end, on
// the same descriptor, as it would on a disk; and a new open too.
func testFollowBoxAppends(t *testing.T, b *boxT) {
	name := filepath.Join(b.work, "log")
	if err := os.WriteFile(name, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil || string(got) != "0\n" {
		t.Fatalf("first read: %q %v", got, err)
	}
	for i := 1; i <= 3; i++ {
		b.must(t, fmt.Sprintf("echo %d >> %q", i, b.relBox(name)))
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		more, err := io.ReadAll(f) // from where the last read ended
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, more...)
		if want := int64(2 * (i + 1)); fi.Size() != want || int64(len(got)) != want {
			t.Errorf("after the box's append %d: fstat says %d bytes, the open read %q", i, fi.Size(), got)
		}
	}
	if string(got) != "0\n1\n2\n3\n" {
		t.Errorf("the open read %q", got)
	}
	if again := readString(t, name); again != "0\n1\n2\n3\n" {
		t.Errorf("a new open reads %q", again)
	}
}

// testDiskFullAtClose: a box whose file system fills up during the push of
// a file: close(2) says ENOSPC, nothing is lost (the file stays dirty on
// the host, readable through the mount, and the box's err file names it),
// no temporary name is left in the box, and removing the file ends it. A
// Docker box's /dev/shm (64 MB) is the small file system; a local box has
// none of its own.
func testDiskFullAtClose(t *testing.T, b *boxT) {
	var prov string
	for _, f := range strings.Fields(readString(t, filepath.Join(b.dir, "ctl"))) {
		if v, ok := strings.CutPrefix(f, "provider="); ok {
			prov = v
		}
	}
	if prov != "docker" {
		t.Skipf("a %s box has no small file system of its own to fill", prov)
	}
	name := "full"
	small := b.m.newBox(t, name, "provider=docker", "workspace=/dev/shm/w")
	defer ctlWrite(filepath.Join(b.m.mnt, "ctl"), "forget "+name+"\n")
	defer ctlWrite(filepath.Join(small.dir, "ctl"), "destroy\n")
	big := filepath.Join(small.work, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(strings.Repeat("x", 1<<20))
	for i := 0; i < 80; i++ {
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("close of 80 MB into a 64 MB box: %v, want ENOSPC", err)
	}
	if fi, err := os.Stat(big); err != nil || fi.Size() != 80<<20 {
		t.Errorf("the file through the mount after the failed push: %v %v", fi, err)
	}
	if st := readString(t, filepath.Join(small.dir, "ctl")); !strings.Contains(st, " dirty=1 ") {
		t.Errorf("box status after the failed push: %q", st)
	}
	if e := readString(t, filepath.Join(small.dir, "err")); !strings.Contains(e, "big") {
		t.Errorf("err file: %q", e)
	}
	// The file was made on the host (its directory's listing was known):
	// nothing of it, no temporary name either, is in the box.
	if got := small.must(t, "ls -A"); got != "" {
		t.Errorf("the box holds %q", got)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	if st := readString(t, filepath.Join(small.dir, "ctl")); !strings.Contains(st, " dirty=0 ") {
		t.Errorf("box status after rm: %q", st)
	}
	if got := small.must(t, "ls -A"); got != "" {
		t.Errorf("the box holds %q after rm", got)
	}
}

// testBoxChangesKind: a command replaces a directory with a file, a file
// with a link, a link with a directory; right after each, host tools see
// the new kind and its content.
func testBoxChangesKind(t *testing.T, b *boxT) {
	x := filepath.Join(b.work, "x")
	rel := b.relBox(x)
	os.MkdirAll(filepath.Join(x, "sub"), 0o755)
	os.WriteFile(filepath.Join(x, "sub", "f"), []byte("f\n"), 0o644)
	host(t, b.work, "find", "x") // the kernel knows the tree
	b.must(t, fmt.Sprintf("rm -r %q && echo file > %q", rel, rel))
	if got := host(t, b.work, "cat", "x"); got != "file\n" {
		t.Errorf("cat x after the box made it a file: %q", got)
	}
	b.must(t, fmt.Sprintf("rm %q && ln -s elsewhere %q", rel, rel))
	if got := host(t, b.work, "readlink", "x"); got != "elsewhere\n" {
		t.Errorf("readlink x after the box made it a link: %q", got)
	}
	b.must(t, fmt.Sprintf("rm %q && mkdir -p %q/d && echo in > %q/d/g", rel, rel, rel))
	if got := host(t, b.work, "find", "x", "-type", "f"); got != "x/d/g\n" {
		t.Errorf("find x after the box made it a directory: %q", got)
	}
}
