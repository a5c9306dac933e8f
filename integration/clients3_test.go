package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clients3Suite is more real programs on work/ (rsync, git's heavier
// commands, locks, sparse files, descriptors shared by processes), each
// compared with the same steps on the host's disk where that makes sense.
var clients3Suite = []suiteCase{
	{"rsync", testRsync},
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
