package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// providerRows are the providers every tool runs against.
var providerRows = []string{"local", "docker"}

// toolOnlyRows are providers TestTools runs against but the client suites
// do not: boxes reached without an agent, where every file operation is a
// command of its own, so the clients' workloads (git clone, a Python
// script's thousands of calls) outlast the suites' bounds.
var toolOnlyRows []string

// suiteCase is one entry of a suite run on every provider row: fn gets a
// box whose work is a fresh directory of its own.
type suiteCase struct {
	name string
	fn   func(t *testing.T, b *boxT)
}

// runSuite runs suite on a box of each provider row, one mount per row.
func runSuite(t *testing.T, suite []suiteCase) {
	runSuiteOn(t, providerRows, suite)
}

// runSuiteOn runs suite on a box of each provider in rows, one mount per row.
func runSuiteOn(t *testing.T, rows []string, suite []suiteCase) {
	for _, prov := range rows {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMount(t, prov, 20*time.Second)
			b := m.newBox(t, "box", "provider="+prov)
			for _, tc := range suite {
				t.Run(tc.name, func(t *testing.T) {
					dir := filepath.Join(b.work, tc.name)
					if err := os.Mkdir(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					sub := *b
					sub.work = dir
					sub.small = slices.Contains(toolOnlyRows, prov)
					tc.fn(t, &sub)
				})
			}
		})
	}
}

// toolSuite is what a user does with a box's work/ tree, one entry per tool.
var toolSuite = []suiteCase{
	{"cp-r", testCopyTree},
	{"tar-x", testUntar},
	{"mv-ln-chmod-run", testMoveLinkChmod},
	{"git", testGit},
	{"grep-r", testGrep},
	{"editor-save", testEditorSave},
	{"append-two-opens", testAppend},
	{"truncate", testTruncate},
	{"sqlite3", testSQLite},
	{"shell-control-files", testShellControl},
	{"freshness", testFreshness},
}

func TestTools(t *testing.T) {
	runSuiteOn(t, append(slices.Clone(providerRows), toolOnlyRows...), toolSuite)
}

// relBox is the box-side path of a work/ path, relative to the workspace.
func (b *boxT) relBox(p string) string {
	rel, _ := filepath.Rel(filepath.Join(b.m.mnt, b.name, "work"), p)
	return rel
}

// sums lists relative path -> mode and sha256 of every regular file under dir.
func sums(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		s := sha256.Sum256(b)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fmt.Sprintf("%o %s", fi.Mode().Perm(), hex.EncodeToString(s[:]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// boxSums lists the same as sums, computed inside the box.
func boxSums(t *testing.T, b *boxT, rel string) map[string]string {
	t.Helper()
	out := b.must(t, fmt.Sprintf(`cd %q && find . -type f -print0 | sort -z | while IFS= read -r -d '' f; do printf '%%s %%s %%s\n' "${f#./}" "$(stat -c %%a "$f")" "$(sha256sum < "$f" | cut -d' ' -f1)"; done`, rel))
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		m[f[0]] = f[1] + " " + f[2]
	}
	return m
}

func sameSums(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: %d files, want %d", what, len(got), len(want))
	}
	var bad []string
	for k, v := range want {
		if got[k] != v {
			bad = append(bad, fmt.Sprintf("%s: %q want %q", k, got[k], v))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		if len(bad) > 5 {
			bad = bad[:5]
		}
		t.Errorf("%s differs:\n%s", what, strings.Join(bad, "\n"))
	}
}

// makeTree writes a small tree with files of several sizes and modes.
func makeTree(t *testing.T) string {
	t.Helper()
	return makeTreeOf(t, 40)
}

// makeTreeOf makes a tree of n files (f0.txt in d0/e0 among them).
func makeTreeOf(t *testing.T, n int) string {
	t.Helper()
	src := t.TempDir()
	for i := 0; i < n; i++ {
		dir := filepath.Join(src, fmt.Sprintf("d%d", i%5), fmt.Sprintf("e%d", i%3))
		os.MkdirAll(dir, 0o755)
		size := []int{0, 1, 100, 4096, 70000, 1 << 20}[i%6]
		line := []byte(fmt.Sprintf("file %d\n", i))
		data := bytes.Repeat(line, size/len(line)+1)[:size]
		mode := os.FileMode(0o644)
		if i%4 == 0 {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.txt", i)), data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, fmt.Sprintf("f%d.txt", i)), mode)
	}
	return src
}

// tree makes the tree a suite case copies into b: 40 files, 12 on a box
// reached without the agent, whose every file operation is a command (an
// Archil exec takes half a second).
func (b *boxT) tree(t *testing.T) string {
	t.Helper()
	if b.small {
		return makeTreeOf(t, 12)
	}
	return makeTree(t)
}

func testCopyTree(t *testing.T, b *boxT) {
	src := b.tree(t)
	host(t, b.work, "cp", "-r", src+"/.", ".")
	want := sums(t, src)
	sameSums(t, "through the mount", want, sums(t, b.work))
	sameSums(t, "in the box", want, boxSums(t, b, b.relBox(b.work)))
}

func testUntar(t *testing.T, b *boxT) {
	tarball := filepath.Join(t.TempDir(), "src.tar")
	dirs := []string{"encoding/json", "encoding/csv", "bufio"}
	if b.small {
		dirs = []string{"encoding/csv"} // a command per file operation
	}
	host(t, filepath.Join(runtime.GOROOT(), "src"), "tar", append([]string{"-cf", tarball}, dirs...)...)
	host(t, b.work, "tar", "-xf", tarball)
	ref := t.TempDir()
	host(t, ref, "tar", "-xf", tarball)
	want := sums(t, ref)
	sameSums(t, "untarred through the mount", want, sums(t, b.work))
	sameSums(t, "untarred, seen in the box", want, boxSums(t, b, b.relBox(b.work)))
}

func testMoveLinkChmod(t *testing.T, b *boxT) {
	if err := os.WriteFile(filepath.Join(b.work, "tool.sh"), []byte("#!/bin/sh\necho \"tool says $1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host(t, b.work, "chmod", "+x", "tool.sh")
	host(t, b.work, "mkdir", "bin")
	host(t, b.work, "mv", "tool.sh", "bin/tool")
	host(t, b.work, "ln", "-s", "bin/tool", "run")
	if target, err := os.Readlink(filepath.Join(b.work, "run")); err != nil || target != "bin/tool" {
		t.Errorf("readlink: %q %v", target, err)
	}
	rel := b.relBox(b.work)
	if out := b.must(t, fmt.Sprintf("cd %q && ./run hi", rel)); out != "tool says hi\n" {
		t.Errorf("running the linked tool in the box: %q", out)
	}
	if _, err := os.Stat(filepath.Join(b.work, "tool.sh")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("moved file still at its old name: %v", err)
	}
}

func testGit(t *testing.T, b *boxT) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	if b.small {
		// Every file operation is a command in the box of its own there
		// (Archil: about 3 s each at CI's load), and a commit of even 12
		// files passed a host command's 5 minute bound.
		t.Skip("git's hundreds of file operations, each a command in the box, outlast the step's bound")
	}
	src := b.tree(t)
	host(t, b.work, "cp", "-r", src+"/.", ".")
	host(t, b.work, "git", "init", "-q")
	host(t, b.work, "git", "add", "-A")
	host(t, b.work, "git", "commit", "-qm", "first")
	if st := host(t, b.work, "git", "status", "--porcelain"); st != "" {
		t.Errorf("status after commit: %q", st)
	}
	// A second status stays clean (stable inode numbers and times).
	if st := host(t, b.work, "git", "status", "--porcelain"); st != "" {
		t.Errorf("second status: %q", st)
	}
	if err := os.WriteFile(filepath.Join(b.work, "d0", "e0", "f0.txt"), []byte("changed\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st := host(t, b.work, "git", "status", "--porcelain"); strings.TrimSpace(st) != "M d0/e0/f0.txt" {
		t.Errorf("status after an edit: %q", st)
	}
	host(t, b.work, "git", "commit", "-qam", "second")
	host(t, b.work, "git", "fsck", "--strict")
	if log := host(t, b.work, "git", "log", "--oneline"); strings.Count(log, "\n") != 2 {
		t.Errorf("log: %q", log)
	}
}

func testGrep(t *testing.T, b *boxT) {
	src := b.tree(t)
	host(t, b.work, "cp", "-r", src+"/.", ".")
	want, _ := hostErr(src, "grep", "-rc", "file 1")
	got, _ := hostErr(b.work, "grep", "-rc", "file 1")
	if want == "" || sortLines(want) != sortLines(got) {
		t.Errorf("grep -rc through the mount:\n%s\nwant\n%s", got, want)
	}
}

func sortLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

func testEditorSave(t *testing.T, b *boxT) {
	target := filepath.Join(b.work, "doc.txt")
	if err := os.WriteFile(target, []byte("version 1\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 5; i++ {
		tmp := filepath.Join(b.work, ".doc.txt.tmp")
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "version %d\n", i)
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := os.Rename(tmp, target); err != nil {
			t.Fatal(err)
		}
		if got := b.must(t, fmt.Sprintf("cat %q", b.relBox(target))); got != fmt.Sprintf("version %d\n", i) {
			t.Errorf("box sees %q after save %d", got, i)
		}
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after saves: %v %v", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(b.work)
	if len(ents) != 1 {
		t.Errorf("leftovers after saves: %v", ents)
	}
}

func testAppend(t *testing.T, b *boxT) {
	name := filepath.Join(b.work, "log")
	f1, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		fmt.Fprintf(f1, "one %d\n", i)
		fmt.Fprintf(f2, "two %d\n", i)
	}
	if err := f1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f2.Close(); err != nil {
		t.Fatal(err)
	}
	got := b.must(t, fmt.Sprintf("cat %q", b.relBox(name)))
	if strings.Count(got, "\n") != 10 || !strings.Contains(got, "one 4\n") || !strings.Contains(got, "two 4\n") {
		t.Errorf("appended log in the box:\n%s", got)
	}
}

func testTruncate(t *testing.T, b *boxT) {
	name := filepath.Join(b.work, "t")
	os.WriteFile(name, []byte("0123456789"), 0o644)
	host(t, b.work, "truncate", "-s", "4", "t")
	if got, _ := os.ReadFile(name); string(got) != "0123" {
		t.Errorf("after truncate -s 4: %q", got)
	}
	host(t, b.work, "truncate", "-s", "6", "t")
	if got := b.must(t, fmt.Sprintf("od -An -c %q | tr -d ' \\n'", b.relBox(name))); got != `0123\0\0` {
		t.Errorf("box sees %q after growing", got)
	}
}

func testSQLite(t *testing.T, b *boxT) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("sqlite3 is not installed")
	}
	host(t, b.work, "sqlite3", "t.db", "create table t(x); insert into t values (1),(2),(3);")
	host(t, b.work, "sqlite3", "t.db", "pragma mmap_size=1048576; insert into t select x+3 from t;")
	if got := host(t, b.work, "sqlite3", "t.db", "select sum(x) from t;"); got != "21\n" {
		t.Errorf("sum %q", got)
	}
	if got := host(t, b.work, "sqlite3", "t.db", "pragma integrity_check;"); got != "ok\n" {
		t.Errorf("integrity %q", got)
	}
}

// testShellControl drives the control files the way a shell does: one
// open per redirection.
func testShellControl(t *testing.T, b *boxT) {
	sh := func(script string) (string, error) {
		return hostErr(b.dir, "bash", "-c", script) // dash reports every write error as "I/O error"
	}
	rel := b.relBox(b.work)
	if out, err := sh(fmt.Sprintf(`echo 'cd %s && echo made > by-shell.txt && echo done' > exec && cat exec`, rel)); err != nil || out != "done\n" {
		t.Errorf("echo > exec; cat exec: %q %v", out, err)
	}
	if got, err := os.ReadFile(filepath.Join(b.work, "by-shell.txt")); err != nil || string(got) != "made\n" {
		t.Errorf("by-shell.txt %q %v", got, err)
	}
	if out, err := sh(`cat cmds/last/status`); err != nil || out != "exit 0\n" {
		t.Errorf("cmds/last/status %q %v", out, err)
	}
	out, err := sh(`echo frobnicate > ctl`)
	if err == nil || !strings.Contains(out, "Invalid argument") {
		t.Errorf("bad verb: %q %v", out, err)
	}
	if e, _ := os.ReadFile(filepath.Join(b.dir, "err")); !strings.Contains(string(e), "frobnicate") {
		t.Errorf("err after a bad verb: %q", e)
	}
	if out, err := sh(`cat ctl`); err != nil || !strings.HasPrefix(out, "state=ready ") {
		t.Errorf("cat ctl: %q %v", out, err)
	}
	if out, err := sh(`cat facts.json`); err != nil || !strings.Contains(out, `"workspace"`) {
		t.Errorf("facts.json: %q %v", out, err)
	}
	if out, err := sh(`echo flush > ctl && echo sync > ctl`); err != nil {
		t.Errorf("flush, sync: %q %v", out, err)
	}
	if _, err := sh(`ls work | grep -qx ctl`); err == nil {
		t.Error("a control file shows in work/")
	}
}

func testFreshness(t *testing.T, b *boxT) {
	rel := b.relBox(b.work)
	name := filepath.Join(b.work, "f")
	if err := os.WriteFile(name, []byte("host 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := b.must(t, fmt.Sprintf("cat %q/f", rel)); got != "host 1\n" {
		t.Errorf("box sees %q after close", got)
	}
	// Read it so the kernel caches it, change it in the box, read again.
	os.ReadFile(name)
	b.must(t, fmt.Sprintf("echo 'box 2' > %q/f && echo new > %q/g && mkdir %q/sub", rel, rel, rel))
	if got, _ := os.ReadFile(name); string(got) != "box 2\n" {
		t.Errorf("host sees %q after a box change", got)
	}
	if got, err := os.ReadFile(filepath.Join(b.work, "g")); err != nil || string(got) != "new\n" {
		t.Errorf("new box file: %q %v", got, err)
	}
	if fi, err := os.Stat(filepath.Join(b.work, "sub")); err != nil || !fi.IsDir() {
		t.Errorf("new box dir: %v", err)
	}
	b.must(t, fmt.Sprintf("rm %q/g", rel))
	if _, err := os.Stat(filepath.Join(b.work, "g")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("removed in box, stat says %v", err)
	}
}
