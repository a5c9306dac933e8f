package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/boxes"
)

// clientSuite is what real programs (editors, git, python, node, make, an
// agent's edit tool) do in work/, each checked against what a local disk
// would show and against what the box sees.
var clientSuite = []suiteCase{
	{"vim-swap-backup", testClientVim},
	{"sed-perl-in-place", testClientInPlace},
	{"git-workflow", testClientGit},
	{"python-fs", testClientPython},
	{"python-tempfile-unlinked", testClientUnlinkedOpen},
	{"node-fs", testClientNode},
	{"symlink-own-times", testClientSymlinkTimes},
	{"coreutils", testClientCoreutils},
	{"odd-names", testClientNames},
	{"make-gcc-run-in-box", testClientMake},
	{"agent-edit-loop", testClientAgentEdits},
	{"concurrent-writers", testClientConcurrent},
	{"concurrent-writers-host-listing", testClientConcurrentListing},
	{"control-files", testClientControl},
	{"hard-link-write", testClientHardLinkWrite},
}

func TestClients(t *testing.T) { runSuite(t, clientSuite) }

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed (scripts/setup)", name)
	}
}

// names lists dir's entries, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func readString(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testClientVim(t *testing.T, b *boxT) {
	needTool(t, "vim")
	// Swap file on (no -n), backup and writebackup on; the same edit on
	// the host's disk says what must be left.
	edit := func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("line one\nline two\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		host(t, dir, "vim", "-u", "DEFAULTS", "-i", "NONE", "-N", "-es",
			"-c", "set swapfile backup writebackup backupcopy=auto", "-c", "%s/one/ONE/", "-c", "w", "-c", "%s/two/TWO/", "-c", "wq", "notes.txt")
	}
	ref := t.TempDir()
	edit(ref)
	edit(b.work)
	want := "line ONE\nline TWO\n"
	if got := readString(t, filepath.Join(b.work, "notes.txt")); got != want {
		t.Errorf("after vim: %q", got)
	}
	if got := b.must(t, fmt.Sprintf("cat %q/notes.txt", b.relBox(b.work))); got != want {
		t.Errorf("box sees %q after vim", got)
	}
	if fi, err := os.Stat(filepath.Join(b.work, "notes.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after vim: %v %v", fi, err)
	}
	if got, want := names(t, b.work), names(t, ref); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("left in the directory: %q, on the host's disk %q", got, want)
	}
}

func testClientInPlace(t *testing.T, b *boxT) {
	name := filepath.Join(b.work, "conf")
	if err := os.WriteFile(name, []byte("alpha\nbeta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host(t, b.work, "sed", "-i", "s/alpha/ALPHA/", "conf")
	if _, err := exec.LookPath("perl"); err == nil {
		host(t, b.work, "perl", "-pi.bak", "-e", "s/beta/BETA/", "conf")
		if got := readString(t, name+".bak"); got != "ALPHA\nbeta\n" {
			t.Errorf("perl's backup: %q", got)
		}
	} else {
		host(t, b.work, "sed", "-i", "s/beta/BETA/", "conf")
	}
	if got := b.must(t, fmt.Sprintf("cat %q; stat -c %%a %q", b.relBox(name), b.relBox(name))); got != "ALPHA\nBETA\n600\n" {
		t.Errorf("box sees %q", got)
	}
}

func testClientGit(t *testing.T, b *boxT) {
	needTool(t, "git")
	// A small upstream with history, made on the host's disk.
	up := t.TempDir()
	host(t, up, "git", "init", "-q", "-b", "main")
	for i := 1; i <= 4; i++ {
		os.WriteFile(filepath.Join(up, "a.txt"), []byte(strings.Repeat(fmt.Sprintf("v%d\n", i), i)), 0o644)
		os.MkdirAll(filepath.Join(up, "dir", "sub"), 0o755)
		os.WriteFile(filepath.Join(up, "dir", "sub", fmt.Sprintf("f%d", i)), []byte("x\n"), 0o644)
		host(t, up, "git", "add", "-A")
		host(t, up, "git", "commit", "-qm", fmt.Sprintf("c%d", i))
	}
	host(t, b.work, "git", "clone", "-q", up, "repo")
	repo := filepath.Join(b.work, "repo")
	status := func() string { return host(t, repo, "git", "status", "--porcelain") }
	if st := status(); st != "" {
		t.Fatalf("status after clone: %q", st)
	}
	// branch + rebase
	host(t, repo, "git", "checkout", "-q", "-b", "feat", "HEAD~2")
	os.WriteFile(filepath.Join(repo, "feat.txt"), []byte("feat\n"), 0o644)
	host(t, repo, "git", "add", "feat.txt")
	host(t, repo, "git", "commit", "-qm", "feat")
	host(t, repo, "git", "rebase", "-q", "main")
	if got := host(t, repo, "git", "log", "--format=%s"); got != "feat\nc4\nc3\nc2\nc1\n" {
		t.Errorf("log after rebase: %q", got)
	}
	// stash
	os.WriteFile(filepath.Join(repo, "a.txt"), []byte("dirty\n"), 0o644)
	host(t, repo, "git", "stash", "-q")
	if st := status(); st != "" {
		t.Errorf("status after stash: %q", st)
	}
	host(t, repo, "git", "stash", "pop", "-q")
	if st := status(); st != " M a.txt\n" {
		t.Errorf("status after stash pop: %q", st)
	}
	host(t, repo, "git", "checkout", "-q", "a.txt")
	// worktree, gc, checkout of an old commit
	host(t, repo, "git", "worktree", "add", "-q", "../wt", "HEAD~3")
	if got := names(t, filepath.Join(b.work, "wt", "dir", "sub")); strings.Join(got, " ") != "f1 f2" {
		t.Errorf("worktree at c2 has %q", got)
	}
	host(t, repo, "git", "gc", "-q", "--aggressive")
	host(t, repo, "git", "checkout", "-q", "HEAD~4")
	if got := names(t, filepath.Join(repo, "dir", "sub")); strings.Join(got, " ") != "f1" {
		t.Errorf("checkout of c1 leaves %q", got)
	}
	host(t, repo, "git", "checkout", "-q", "feat")
	host(t, repo, "git", "fsck", "--strict", "--no-dangling")
	// A command in the box changes files: status is exact at once.
	rel := b.relBox(repo)
	b.must(t, fmt.Sprintf("cd %q && printf x | dd of=a.txt bs=1 seek=1 conv=notrunc status=none && rm dir/sub/f2 && echo n > new.txt && chmod +x feat.txt", rel))
	const want = " M a.txt\n D dir/sub/f2\n M feat.txt\n?? new.txt\n"
	if st := status(); st != want {
		// Which layer held the old view: the kernel's entries and
		// attributes live for the attribute timeout (1 s), boxfs's own
		// until the watch or a refresh says otherwise.
		ls := func() string {
			out, _ := exec.Command("ls", "-la", filepath.Join(repo, "dir", "sub")).CombinedOutput()
			return string(out)
		}
		before := ls()
		time.Sleep(1500 * time.Millisecond)
		t.Errorf("status after the box changed files: %q\nls at once:\n%s\nafter 1.5 s: status %q, ls:\n%s", st, before, status(), ls())
	}
	// format-patch / am / apply
	host(t, repo, "git", "add", "-A")
	host(t, repo, "git", "commit", "-qm", "box edits")
	patch := filepath.Join(t.TempDir(), "p")
	host(t, repo, "git", "format-patch", "-q", "-1", "-o", patch)
	diff := host(t, repo, "git", "diff", "HEAD~1")
	host(t, repo, "git", "checkout", "-q", "-b", "am", "HEAD~1")
	pf, _ := filepath.Glob(filepath.Join(patch, "*.patch"))
	// git am refuses a patch when a file's stat data differs from what its
	// index recorded ("does not match index"): what the mount reported of
	// each file right after the checkout wrote it must stay what it reports.
	host(t, repo, "git", "am", "-q", pf[0])
	if got := host(t, repo, "git", "diff", "feat"); got != "" {
		t.Errorf("am differs from the original commit:\n%s", got)
	}
	host(t, repo, "git", "checkout", "-q", "HEAD~1")
	dfile := filepath.Join(t.TempDir(), "d.diff")
	os.WriteFile(dfile, []byte(diff), 0o644)
	host(t, repo, "git", "apply", dfile)
	if st := status(); st != " M a.txt\n D dir/sub/f2\n M feat.txt\n?? new.txt\n" {
		t.Errorf("status after apply: %q", st)
	}
	if got := b.must(t, fmt.Sprintf("cd %q && cat a.txt new.txt && test -x feat.txt && test ! -e dir/sub/f2 && echo ok", rel)); got != "vx\nv4\nv4\nv4\nn\nok\n" {
		t.Errorf("box sees after apply: %q", got)
	}
}

// python runs a Python script with argv[1] = dir; the script raises on a
// difference from a local disk.
func python(t *testing.T, dir, script string) string {
	t.Helper()
	needTool(t, "python3")
	f := filepath.Join(t.TempDir(), "s.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return host(t, dir, "python3", f, dir)
}

const pythonFS = `
import os, sys, tempfile, shutil, mmap, errno, stat
os.chdir(sys.argv[1])
for i in range(5):
    fd, tmp = tempfile.mkstemp(dir=".", prefix=".cfg", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write("v%d\n" % i); f.flush(); os.fsync(f.fileno())
    os.replace(tmp, "cfg.txt")
assert open("cfg.txt").read() == "v4\n"
assert os.listdir(".") == ["cfg.txt"], os.listdir(".")
src = tempfile.mkdtemp()
for d in range(3):
    os.makedirs(f"{src}/a{d}/b")
    for j in range(4):
        open(f"{src}/a{d}/b/f{j}", "w").write("x" * j * 100)
os.symlink("a0/b/f1", f"{src}/link")
os.symlink("missing", f"{src}/dangling")
shutil.copytree(src, "tree", symlinks=True)
assert os.readlink("tree/link") == "a0/b/f1" and os.readlink("tree/dangling") == "missing"
assert sum(len(fs) for _, _, fs in os.walk("tree")) == 14
shutil.move("tree", "tree2")
assert not os.path.exists("tree") and os.path.isdir("tree2/a1/b")
shutil.copytree("tree2", "tree3", symlinks=True)
shutil.rmtree("tree2")
shutil.move(src, "moved-in")  # across file systems: copytree(symlinks=True) + rmtree
assert os.readlink("moved-in/dangling") == "missing"
with open("mm.bin", "wb") as f: f.write(b"\0" * 8192)
with open("mm.bin", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[0:5] = b"hello"; m[4096:4101] = b"world"; m.flush(); m.close()
data = open("mm.bin", "rb").read()
assert data[:5] == b"hello" and data[4096:4101] == b"world"
fd = os.open("excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600); os.close(fd)
try:
    os.open("excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600); raise SystemExit("second O_EXCL create worked")
except FileExistsError: pass
try: os.rmdir("tree3"); raise SystemExit("rmdir of a full dir worked")
except OSError as e: assert e.errno == errno.ENOTEMPTY, e
os.mkfifo("fifo", 0o640); os.mknod("node", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
assert stat.S_ISFIFO(os.lstat("fifo").st_mode) and stat.S_IMODE(os.lstat("fifo").st_mode) == 0o640
assert stat.S_ISCHR(os.lstat("node").st_mode) and os.lstat("node").st_rdev == os.makedev(1, 3)
os.unlink("fifo"); os.unlink("node")
print(" ".join(sorted(os.listdir("."))))
`

func testClientPython(t *testing.T, b *boxT) {
	out := python(t, b.work, pythonFS)
	if out != "cfg.txt excl mm.bin moved-in tree3\n" {
		t.Errorf("python left %q", out)
	}
	got := b.must(t, fmt.Sprintf("cd %q && cat cfg.txt && readlink moved-in/link && find tree3 -type f | wc -l && od -An -c -j4096 -N5 mm.bin | tr -d ' '", b.relBox(b.work)))
	if got != "v4\na0/b/f1\n12\nworld\n" {
		t.Errorf("box sees %q", got)
	}
}

// testClientUnlinkedOpen: a file unlinked while open stays readable and
// fstat-able (tmpfile(3), Python's TemporaryFile without O_TMPFILE).
func testClientUnlinkedOpen(t *testing.T, b *boxT) {
	out := python(t, b.work, `
import os, sys, tempfile
os.chdir(sys.argv[1])
f = tempfile.TemporaryFile(dir=".")
f.write(b"hello" * 1000); f.seek(0)
assert f.read() == b"hello" * 1000
st = os.fstat(f.fileno()); assert (st.st_size, st.st_nlink) == (5000, 0), st
f.truncate(3); f.seek(0); assert f.read() == b"hel"
assert os.fstat(f.fileno()).st_size == 3
f.close()
fd = os.open("u", os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"data"); os.unlink("u"); os.write(fd, b"more")
assert os.pread(fd, 100, 0) == b"datamore"; os.close(fd)
print(os.listdir("."))
`)
	if out != "[]\n" {
		t.Errorf("python: %q", out)
	}
	if got := b.must(t, fmt.Sprintf("ls -A %q | wc -l", b.relBox(b.work))); got != "0\n" {
		t.Errorf("box has %q entries left", got)
	}
}

const nodeFS = `
const fs = require('fs'), path = require('path'), assert = require('assert');
process.chdir(process.argv[2]);
for (let i = 0; i < 20; i++) { fs.writeFileSync('a.json.tmp', JSON.stringify({v: i})); fs.renameSync('a.json.tmp', 'a.json'); }
assert.strictEqual(fs.readFileSync('a.json', 'utf8'), '{"v":19}');
const d = fs.mkdtempSync(path.join('.', 'tmp-')); fs.writeFileSync(path.join(d, 'x'), '1'); fs.rmSync(d, {recursive: true});
fs.mkdirSync('p/q/r', {recursive: true}); fs.writeFileSync('p/q/r/s', 's'); fs.cpSync('p', 'p2', {recursive: true});
fs.appendFileSync('log', 'a\n'); fs.appendFileSync('log', 'b\n');
const fd = fs.openSync('rw', 'w+'); fs.writeSync(fd, 'hello world'); fs.ftruncateSync(fd, 5);
const buf = Buffer.alloc(20); assert.strictEqual(fs.readSync(fd, buf, 0, 20, 0), 5); fs.closeSync(fd);
fs.utimesSync('rw', 1000, 2000); assert.strictEqual(fs.statSync('rw').mtimeMs, 2000000);
fs.symlinkSync('nowhere', 'dl'); fs.lutimesSync('dl', 1000, 3000); assert.strictEqual(fs.lstatSync('dl').mtimeMs, 3000000);
fs.copyFileSync('rw', 'rw2'); assert.throws(() => fs.copyFileSync('rw', 'rw2', fs.constants.COPYFILE_EXCL), {code: 'EEXIST'});
console.log(fs.readdirSync('.').sort().join(' '));
`

func testClientNode(t *testing.T, b *boxT) {
	needTool(t, "node")
	f := filepath.Join(t.TempDir(), "s.js")
	os.WriteFile(f, []byte(nodeFS), 0o644)
	if out := host(t, b.work, "node", f, b.work); out != "a.json dl log p p2 rw rw2\n" {
		t.Errorf("node: %q", out)
	}
	got := b.must(t, fmt.Sprintf("cd %q && cat a.json log p2/q/r/s rw2 && stat -c %%Y rw && readlink dl", b.relBox(b.work)))
	if got != "{\"v\":19}a\nb\nshello2000\nnowhere\n" {
		t.Errorf("box sees %q", got)
	}
}

// testClientSymlinkTimes: lutimes and lchown act on the link, never its
// target (cp -a, tar and rsync set them on every link they make).
func testClientSymlinkTimes(t *testing.T, b *boxT) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "target"), []byte("data\n"), 0o644)
	old := time.Date(2003, 3, 3, 0, 0, 0, 0, time.UTC)
	older := time.Date(2001, 1, 1, 0, 0, 0, 500, time.UTC)
	os.Chtimes(filepath.Join(src, "target"), old, old)
	os.Symlink("target", filepath.Join(src, "link"))
	os.Symlink("missing", filepath.Join(src, "dangling"))
	for _, l := range []string{"link", "dangling"} {
		ts := []unix.Timespec{unix.NsecToTimespec(older.UnixNano()), unix.NsecToTimespec(older.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(src, l), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	host(t, b.work, "cp", "-a", src+"/.", "cpa")
	for name, want := range map[string]time.Time{"cpa/target": old, "cpa/link": older, "cpa/dangling": older} {
		fi, err := os.Lstat(filepath.Join(b.work, name))
		if err != nil || !fi.ModTime().Equal(want) {
			t.Errorf("%s after cp -a: %v %v, want %v", name, fi.ModTime(), err, want)
		}
	}
	// touch -h on the link leaves the target alone.
	host(t, b.work, "touch", "-h", "-d", "2010-10-10 00:00:00Z", "cpa/link")
	got := b.must(t, fmt.Sprintf("cd %q/cpa && stat -c '%%n %%y' target link dangling", b.relBox(b.work)))
	want := "target 2003-03-03 00:00:00.000000000 +0000\nlink 2010-10-10 00:00:00.000000000 +0000\ndangling 2001-01-01 00:00:00.000000500 +0000\n"
	if got != want {
		t.Errorf("box sees:\n%s\nwant\n%s", got, want)
	}
	if fi, err := os.Lstat(filepath.Join(b.work, "cpa", "link")); err != nil || fi.ModTime().Year() != 2010 {
		t.Errorf("link's time through the mount: %v %v", fi, err)
	}
	host(t, b.work, "chown", "-h", "1234:1234", "cpa/dangling")
	if got := b.must(t, fmt.Sprintf("stat -c '%%u:%%g' %q/cpa/dangling %q/cpa/target", b.relBox(b.work), b.relBox(b.work))); got != "1234:1234\n0:0\n" {
		t.Errorf("after chown -h the box says %q", got)
	}
	// tar x of links: exit 0, link times kept.
	tarball := filepath.Join(t.TempDir(), "l.tar")
	host(t, src, "tar", "-cf", tarball, ".")
	os.Mkdir(filepath.Join(b.work, "tx"), 0o755)
	host(t, filepath.Join(b.work, "tx"), "tar", "-xf", tarball)
	if fi, err := os.Lstat(filepath.Join(b.work, "tx", "dangling")); err != nil || fi.ModTime().Unix() != older.Unix() {
		t.Errorf("tar x link time: %v %v", fi, err)
	}

	// tar x of a tree of 50 symlinks (node_modules/.bin, a venv's bin/):
	// every link, resolving or dangling, keeps the archive's time, through
	// the mount to the nanosecond and in the box, and each target keeps
	// its own.
	src50 := t.TempDir()
	os.Mkdir(filepath.Join(src50, "lib"), 0o755)
	os.Mkdir(filepath.Join(src50, "bin"), 0o755)
	libTime := time.Date(1999, 9, 9, 9, 9, 9, 0, time.UTC)
	linkTime := func(i int) time.Time {
		return time.Date(2004, 4, 4, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Hour + time.Duration(i+1)*1001)
	}
	for i := range 50 {
		lib := filepath.Join(src50, "lib", fmt.Sprintf("t%02d", i))
		if i%5 != 4 { // every fifth link dangles
			os.WriteFile(lib, []byte(fmt.Sprintf("#!/bin/sh\necho %d\n", i)), 0o755)
			os.Chtimes(lib, libTime, libTime)
		}
		l := filepath.Join(src50, "bin", fmt.Sprintf("l%02d", i))
		if err := os.Symlink("../lib/"+filepath.Base(lib), l); err != nil {
			t.Fatal(err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(linkTime(i).UnixNano()), unix.NsecToTimespec(linkTime(i).UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, l, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	tar50 := filepath.Join(t.TempDir(), "links.tar")
	host(t, src50, "tar", "--format=posix", "-cf", tar50, "lib", "bin")
	os.Mkdir(filepath.Join(b.work, "tx50"), 0o755)
	host(t, filepath.Join(b.work, "tx50"), "tar", "-xf", tar50)
	var wantBox strings.Builder
	for i := range 50 {
		name := fmt.Sprintf("l%02d", i)
		fi, err := os.Lstat(filepath.Join(b.work, "tx50", "bin", name))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 || !fi.ModTime().Equal(linkTime(i)) {
			t.Errorf("tar x: link %s through the mount: %v %v, want a link of %v", name, fi, err, linkTime(i))
		}
		fmt.Fprintf(&wantBox, "%s %d\n", name, linkTime(i).Unix())
	}
	got = b.must(t, fmt.Sprintf("cd %q/tx50/bin && for f in l*; do stat -c '%%n %%Y' \"$f\"; done", b.relBox(b.work)))
	if got != wantBox.String() {
		t.Errorf("tar x: the box sees the links' times\n%s\nwant\n%s", got, wantBox.String())
	}
	if got := b.must(t, fmt.Sprintf("cd %q/tx50/lib && stat -c %%Y t00 t48", b.relBox(b.work))); got != fmt.Sprintf("%d\n%d\n", libTime.Unix(), libTime.Unix()) {
		t.Errorf("tar x: the targets' times in the box: %q, want %d", got, libTime.Unix())
	}
}

func testClientCoreutils(t *testing.T, b *boxT) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b", "c"), 0o755)
	for i, m := range []os.FileMode{0o600, 0o755, 0o644} {
		os.WriteFile(filepath.Join(src, "a", fmt.Sprintf("f%d", i)), []byte(fmt.Sprintf("%d\n", i)), m)
		os.Chmod(filepath.Join(src, "a", fmt.Sprintf("f%d", i)), m)
	}
	os.WriteFile(filepath.Join(src, "a", "b", "c", "deep"), []byte("deep\n"), 0o644)
	os.Chtimes(filepath.Join(src, "a", "f2"), time.Unix(1e9, 0), time.Unix(1e9, 0))
	os.Link(filepath.Join(src, "a", "f0"), filepath.Join(src, "a", "hard0"))
	os.Symlink("f1", filepath.Join(src, "a", "sym1"))
	host(t, b.work, "cp", "-a", src+"/a", "cpa")
	host(t, b.work, "cp", "-p", src+"/a/f2", "cpp")
	host(t, b.work, "cp", "-rp", src+"/a", "cprp")
	listing := func(dir string) string {
		return host(t, dir, "find", ".", "-printf", `%y %m %n %s %T@ %p>%l\n`)
	}
	want := sortLines(listing(filepath.Join(src, "a")))
	// find's %n (the link count) is compared; a pair of names the box
	// made itself may show two inode numbers (docs/namespace.md), so tar
	// and du are not asked to see the link.
	if got := sortLines(listing(filepath.Join(b.work, "cpa"))); got != want {
		t.Errorf("cp -a through the mount:\n%s\nwant\n%s", got, want)
	}
	if got := sortLines(b.must(t, fmt.Sprintf("cd %q/cpa && find . -printf '%%y %%m %%n %%s %%T@ %%p>%%l\\n'", b.relBox(b.work)))); got != want {
		t.Errorf("cp -a, in the box:\n%s\nwant\n%s", got, want)
	}
	if fi, err := os.Stat(filepath.Join(b.work, "cpp")); err != nil || fi.ModTime().Unix() != 1e9 || fi.Mode().Perm() != 0o644 {
		t.Errorf("cp -p: %v %v", fi, err)
	}
	// tar c of work/ reads back what went in.
	tarball := filepath.Join(t.TempDir(), "w.tar")
	host(t, b.work, "tar", "-cf", tarball, "cpa")
	ref := t.TempDir()
	host(t, ref, "tar", "-xf", tarball)
	sameSums(t, "tar c of work/, extracted", sums(t, filepath.Join(src, "a")), sums(t, filepath.Join(ref, "cpa")))
	if target, err := os.Readlink(filepath.Join(ref, "cpa", "sym1")); err != nil || target != "f1" {
		t.Errorf("tar c of work/: link %q %v", target, err)
	}
	// touch -d / -r, find -newer, du
	host(t, b.work, "touch", "-d", "2010-10-10", "ref")
	host(t, b.work, "touch", "-r", "ref", "cpa/f1")
	if got := host(t, b.work, "find", "cpa", "-newer", "ref", "-type", "f"); sortLines(got) != "cpa/b/c/deep\ncpa/f0\ncpa/hard0" {
		t.Errorf("find -newer: %q", got)
	}
	if got, want := host(t, b.work, "du", "-sbl", "cpa"), host(t, src, "du", "-sbl", "a"); strings.Fields(got)[0] != strings.Fields(want)[0] {
		t.Errorf("du: %q, on the host's disk %q", got, want)
	}
	// chmod -R, mv of a tree, rm -rf of a deep tree
	host(t, b.work, "chmod", "-R", "go-rwx", "cprp")
	if got := b.must(t, fmt.Sprintf("cd %q && stat -c '%%a %%n' cprp cprp/f2 cprp/b/c", b.relBox(b.work))); got != "700 cprp\n600 cprp/f2\n700 cprp/b/c\n" {
		t.Errorf("chmod -R, box sees %q", got)
	}
	host(t, b.work, "mv", "cprp", "moved")
	deep := filepath.Join(b.work, "deep", strings.Repeat("d/", 30))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(deep, "z"), []byte("z"), 0o644)
	if got := b.must(t, fmt.Sprintf("cd %q && ls moved/b/c && cat deep/%sz", b.relBox(b.work), strings.Repeat("d/", 30))); got != "deep\nz" {
		t.Errorf("box sees %q", got)
	}
	host(t, b.work, "rm", "-rf", "deep", "moved")
	if got := b.must(t, fmt.Sprintf("ls %q", b.relBox(b.work))); got != "cpa\ncpp\nref\n" {
		t.Errorf("box after rm -rf: %q", got)
	}
	// Special files are made in the box.
	host(t, b.work, "mkfifo", "-m", "600", "fifo")
	host(t, b.work, "mknod", "-m", "640", "null", "c", "1", "3")
	if got := b.must(t, fmt.Sprintf("cd %q && stat -c '%%F %%a %%t:%%T' fifo null", b.relBox(b.work))); got != "fifo 600 0:0\ncharacter special file 640 1:3\n" {
		t.Errorf("mkfifo, mknod: box sees %q", got)
	}
	host(t, b.work, "rm", "fifo", "null")
}

func testClientNames(t *testing.T, b *boxT) {
	long := strings.Repeat("x", 255)
	odd := []string{long, "with space", "new\nline", "\xff\xfe non-utf8", "tab\there", "-dash", "ünïcödé"}
	for _, n := range odd {
		if err := os.WriteFile(filepath.Join(b.work, n), []byte(n), 0o644); err != nil {
			t.Errorf("create %q: %v", n, err)
		}
	}
	if err := os.WriteFile(filepath.Join(b.work, long+"x"), nil, 0o644); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("256-byte name: %v", err)
	}
	sort.Strings(odd)
	if got := names(t, b.work); strings.Join(got, "/") != strings.Join(odd, "/") {
		t.Errorf("listing: %q", got)
	}
	out := b.must(t, fmt.Sprintf("cd %q && for f in *; do printf '%%s=' \"$f\"; cat -- \"$f\"; printf '\\0'; done", b.relBox(b.work)))
	var got []string
	for _, rec := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
		k, v, _ := strings.Cut(rec, "=")
		if k != v {
			t.Errorf("in the box %q holds %q", k, v)
		}
		got = append(got, k)
	}
	sort.Strings(got)
	if strings.Join(got, "/") != strings.Join(odd, "/") {
		t.Errorf("box lists %q", got)
	}
	for _, n := range odd {
		host(t, b.work, "mv", "--", n, n[:min(len(n), 253)]+".2")
	}
	if got := b.must(t, fmt.Sprintf("find %q -name '*.2' -printf x | wc -c", b.relBox(b.work))); got != fmt.Sprintf("%d\n", len(odd)) {
		t.Errorf("box after renames: %q", got)
	}
}

func testClientMake(t *testing.T, b *boxT) {
	needTool(t, "make")
	needTool(t, "gcc")
	w := b.work
	os.WriteFile(filepath.Join(w, "m.c"), []byte("#include <stdio.h>\n#include \"h.h\"\nint main(void){printf(\"v%d\\n\", V);return 3;}\n"), 0o644)
	os.WriteFile(filepath.Join(w, "h.h"), []byte("#define V 1\n"), 0o644)
	os.WriteFile(filepath.Join(w, "Makefile"), []byte("prog: m.o\n\tgcc -static -o prog m.o\nm.o: m.c h.h\n\tgcc -c m.c\n"), 0o644)
	host(t, w, "make", "-s")
	if out := host(t, w, "make"); !strings.Contains(out, "up to date") {
		t.Errorf("second make: %q", out)
	}
	// Edit right away (same second): make sees it by the ns mtime.
	os.WriteFile(filepath.Join(w, "h.h"), []byte("#define V 2\n"), 0o644)
	host(t, w, "make", "-s")
	if out := host(t, w, "make"); !strings.Contains(out, "up to date") {
		t.Errorf("make after the rebuild: %q", out)
	}
	out, st := b.run(t, fmt.Sprintf("cd %q && ./prog", b.relBox(w)))
	if out != "v2\n" || st != "exit 3" {
		t.Errorf("the built program in the box: %q %s", out, st)
	}
}

// testClientAgentEdits: an agent's edit tool reads, replaces a string and
// writes the whole file (O_TRUNC) many times; then a box command reads it.
// And the reverse: a box command writes, the host reads right after.
func testClientAgentEdits(t *testing.T, b *boxT) {
	name := filepath.Join(b.work, "code.go")
	var sb strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	os.WriteFile(name, []byte(sb.String()), 0o644)
	for i := 0; i < 60; i++ {
		s := readString(t, name)
		s = strings.Replace(s, fmt.Sprintf("line %d\n", i), fmt.Sprintf("LINE %d edited\n", i), 1)
		if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	final := []byte(readString(t, name))
	sum := sha256.Sum256(final)
	got := b.must(t, fmt.Sprintf("grep -c edited %q; sha256sum < %q", b.relBox(name), b.relBox(name)))
	if want := "60\n" + hex.EncodeToString(sum[:]) + "  -\n"; got != want {
		t.Errorf("box after 60 edits: %q want %q", got, want)
	}
	rev := filepath.Join(b.work, "rev")
	for i := 0; i < 10; i++ {
		b.must(t, fmt.Sprintf("printf 'box %d\\n' > %q && echo extra%d >> %q", i, b.relBox(rev), i, b.relBox(name)))
		if got := readString(t, rev); got != fmt.Sprintf("box %d\n", i) {
			t.Errorf("host reads %q after box write %d", got, i)
		}
		if got := readString(t, name); !strings.HasSuffix(got, fmt.Sprintf("extra%d\n", i)) || !strings.HasPrefix(got, string(final)) {
			t.Errorf("host reads ...%q after box append %d", got[max(0, len(got)-20):], i)
		}
	}
}

func testClientConcurrent(t *testing.T, b *boxT) { concurrentWriters(t, b, false) }

// testClientConcurrentListing: the host's own listing right after its
// writers end shows exactly their files.
func testClientConcurrentListing(t *testing.T, b *boxT) {
	concurrentWriters(t, b, true)
}

func concurrentWriters(t *testing.T, b *boxT, hostListing bool) {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, p := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Separate host processes, as two tools would be.
			script := fmt.Sprintf("for i in $(seq 60); do echo %s$i > %s$i || exit 1; done", p, p)
			if out, err := hostErr(b.work, "bash", "-c", script); err != nil {
				errs <- fmt.Errorf("%s: %v %s", p, err, out)
			}
		}()
	}
	for i := 0; i < 3; i++ {
		if _, st := b.run(t, fmt.Sprintf("ls %q | wc -l", b.relBox(b.work))); st != "exit 0" {
			t.Errorf("box listing while hosts write: %s", st)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if hostListing {
		if got := names(t, b.work); len(got) != 120 {
			t.Errorf("host lists %d files right after its writers ended: %q", len(got), got)
		}
	}
	if got := b.must(t, fmt.Sprintf("cd %q && ls | wc -l && cat a* b* | sort | uniq | wc -l", b.relBox(b.work))); got != "120\n120\n" {
		t.Errorf("box: %q", got)
	}
}

func testClientControl(t *testing.T, b *boxT) {
	for _, d := range []string{"cmds"} {
		fi, err := os.Stat(filepath.Join(b.dir, d))
		if err != nil || fi.Mode().Perm() != 0o755 || !fi.IsDir() || fi.ModTime().Year() < 2000 {
			t.Errorf("%s: %v %v", d, fi.Mode(), err)
		}
	}
	// 10 MB of output through exec, and the same again through cmds/N/out.
	f, err := os.OpenFile(filepath.Join(b.dir, "exec"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("head -c 10000000 /dev/zero | tr '\\0' x\n"))
	fi, _ := f.Stat()
	n := fi.Size()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil || buf.Len() != 10000000 || strings.Trim(buf.String(), "x") != "" {
		t.Errorf("10 MB through exec: %d bytes %v", buf.Len(), err)
	}
	f.Close()
	cmd := filepath.Join(b.dir, "cmds", itoa(n))
	if out, err := os.ReadFile(filepath.Join(cmd, "out")); err != nil || len(out) != 10000000 {
		t.Errorf("cmds/%d/out: %d bytes %v", n, len(out), err)
	}
	if st := readString(t, filepath.Join(cmd, "status")); st != "exit 0\n" {
		t.Errorf("status %q", st)
	}
	// A command that never ends, killed through cmds/N/ctl.
	f, err = os.OpenFile(filepath.Join(b.dir, "exec"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("echo started; sleep 1000; echo never\n"))
	fi, _ = f.Stat()
	cmd = filepath.Join(b.dir, "cmds", itoa(fi.Size()))
	live := b.liveProcesses(t)
	if live {
		first := make([]byte, 8)
		if _, err := io.ReadFull(f, first); err != nil || string(first) != "started\n" {
			t.Errorf("first output of the sleeper: %q %v", first, err)
		}
	} else {
		// Its output comes when it ends: cmds/N/out says so at once.
		note := make([]byte, len(boxes.AtEndNote))
		out, err := os.Open(filepath.Join(cmd, "out"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(out, note); err != nil || string(note) != boxes.AtEndNote {
			t.Errorf("cmds/N/out of a running command on a box without live processes: %q %v", note, err)
		}
		out.Close()
	}
	if st := readString(t, filepath.Join(cmd, "status")); st != "running\n" {
		t.Errorf("status of the sleeper: %q", st)
	}
	if err := ctlWrite(filepath.Join(cmd, "ctl"), "kill\n"); err != nil {
		t.Errorf("kill: %v", err)
	}
	var rest bytes.Buffer
	rest.ReadFrom(f)
	f.Close()
	// What was not read yet: nothing where it streamed, all of it (the
	// kill may have come before the echo ran) where it came at the end.
	if r := rest.String(); r != "" && (live || r != "started\n") {
		t.Errorf("output of the killed command: %q", r)
	}
	if st := readString(t, filepath.Join(cmd, "status")); st != "killed\n" {
		t.Errorf("status after kill: %q", st)
	}
	if err := ctlWrite(filepath.Join(cmd, "ctl"), "stop\n"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad verb to cmds/N/ctl: %v", err)
	}
	// Box ctl verbs; a failing command's status.
	for _, v := range []string{"flush\n", "sync\n", "flush\nsync\n"} {
		if err := ctlWrite(filepath.Join(b.dir, "ctl"), v); err != nil {
			t.Errorf("ctl %q: %v", v, err)
		}
	}
	if out, st := b.run(t, "echo oops >&2; exit 7"); out != "oops\n" || st != "exit 7" {
		t.Errorf("failing command: %q %s", out, st)
	}
}

// testClientHardLinkWrite: a write through one name of a hard link shows
// through the other, in the box and on the host, as on a local disk.
func testClientHardLinkWrite(t *testing.T, b *boxT) {
	f, g := filepath.Join(b.work, "f"), filepath.Join(b.work, "g")
	os.WriteFile(f, []byte("a\n"), 0o644)
	if err := os.Link(f, g); err != nil {
		t.Fatal(err)
	}
	af, _ := os.OpenFile(g, os.O_WRONLY|os.O_APPEND, 0)
	af.Write([]byte("more\n"))
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.must(t, fmt.Sprintf("cd %q && stat -c %%h f g && cat f", b.relBox(b.work))); got != "2\n2\na\nmore\n" {
		t.Errorf("box: %q", got)
	}
	if got := readString(t, f); got != "a\nmore\n" {
		t.Errorf("host reads f: %q", got)
	}
}
