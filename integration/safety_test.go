package integration

// The findings of issue 34 ("Safety, second round") through a real mount,
// on a local and on a Docker box where both apply: each test does what the
// finding did and checks the behaviour that replaced it. The relative
// links out of work/ are TestBoxLinksStayInWork (linkout_test.go); a
// request made to hang among 200 boxes is TestManyBoxesUnderLoad.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// bothProviders runs fn on a fresh mount whose default provider is each of
// local and docker.
func bothProviders(t *testing.T, fn func(t *testing.T, m *mountT, prov string)) {
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) {
			fn(t, startMount(t, prov, 20*time.Second), prov)
		})
	}
}

// rootErr is the text of the mount's err file.
func rootErr(m *mountT) string {
	b, _ := os.ReadFile(filepath.Join(m.mnt, "err"))
	return string(b)
}

// noCommands fails the test if a command ran in box.
func noCommands(t *testing.T, b *boxT) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(b.dir, "cmds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("box %s ran a command: cmds/%s", b.name, e.Name())
	}
}

// exists says whether name is there (lstat).
func exists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}

// Finding 2: `attach NAME2 provider=P id=ID` of a box already presented
// as NAME1 is refused with EEXIST, err names NAME1, and no second name
// appears; once NAME1 is forgotten the box attaches as NAME2 and runs.
func TestTwinAttachRefused(t *testing.T) {
	bothProviders(t, func(t *testing.T, m *mountT, prov string) {
		one := m.newBox(t, "one", "provider="+prov)
		one.must(t, "echo one > f")
		id := boxID(t, one)
		ctl := filepath.Join(m.mnt, "ctl")
		err := ctlWrite(ctl, "attach two provider="+prov+" id="+id+"\n")
		if !errors.Is(err, syscall.EEXIST) {
			t.Fatalf("attach of a box presented as one under the name two: %v, want EEXIST", err)
		}
		if e := rootErr(m); !strings.Contains(e, `already attached as "one"`) {
			t.Errorf("err %q does not name the existing name", e)
		}
		if exists(filepath.Join(m.mnt, "two")) {
			t.Fatal("the box is presented under a second name")
		}
		if got := readString(t, filepath.Join(one.work, "f")); got != "one\n" {
			t.Errorf("one/work/f reads %q", got)
		}
		if err := ctlWrite(ctl, "forget one\n"); err != nil {
			t.Fatalf("forget one: %v (%s)", err, rootErr(m))
		}
		if err := ctlWrite(ctl, "attach two provider="+prov+" id="+id+"\n"); err != nil {
			t.Fatalf("attach two after forget one: %v (%s)", err, rootErr(m))
		}
		two := &boxT{m: m, name: "two", dir: filepath.Join(m.mnt, "two"), work: filepath.Join(m.mnt, "two", "work")}
		if got := two.must(t, "cat f"); got != "one\n" {
			t.Errorf("two's f: %q", got)
		}
	})
}

// Finding 6, names: a box name holding '=' (no ctl message can name it)
// or a Unicode format character (U+202E turns a name around on screen) is
// refused by mkdir, new and attach with EINVAL, err says why, and no box
// is made.
func TestBoxNamesRefused(t *testing.T) {
	bothProviders(t, func(t *testing.T, m *mountT, prov string) {
		ctl := filepath.Join(m.mnt, "ctl")
		for _, tc := range []struct{ name, says string }{
			{"a=b", "'='"},
			{"evil\u202etxt", "U+202E"},
			{"zero\u200bwidth", "U+200B"},
		} {
			if err := os.Mkdir(filepath.Join(m.mnt, tc.name), 0o755); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("mkdir %q: %v, want EINVAL", tc.name, err)
			} else if e := rootErr(m); !strings.Contains(e, tc.says) {
				t.Errorf("mkdir %q: err %q does not say %s", tc.name, e, tc.says)
			}
			if strings.Contains(tc.name, "=") { // a ctl word with '=' is a key
				continue
			}
			for _, msg := range []string{"new " + tc.name + " provider=" + prov, "attach " + tc.name + " provider=" + prov + " id=x"} {
				if err := ctlWrite(ctl, msg+"\n"); !errors.Is(err, syscall.EINVAL) {
					t.Errorf("%q: %v, want EINVAL", msg, err)
				} else if e := rootErr(m); !strings.Contains(e, tc.says) {
					t.Errorf("%q: err %q does not say %s", msg, e, tc.says)
				}
			}
		}
		if got := readString(t, ctl); got != "" {
			t.Errorf("the root ctl lists %q: a box was made", got)
		}
	})
}

// Finding 6, env.* values: a refused new quotes its env.* values
// redacted in err and in the log, however the keys are quoted.
func TestRefusedNewRedactsEnv(t *testing.T) {
	bothProviders(t, func(t *testing.T, m *mountT, prov string) {
		msg := `new x provider=` + prov + ` 'env'.TOKEN=sekrit-q env."B"='sekrit b' lifetime=-5` + "\n"
		if err := ctlWrite(filepath.Join(m.mnt, "ctl"), msg); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%q: %v, want EINVAL", msg, err)
		}
		e := rootErr(m)
		if !strings.Contains(e, "env.TOKEN=<redacted> env.B=<redacted>") || strings.Contains(e, "sekrit") {
			t.Errorf("err %q", e)
		}
		if strings.Contains(m.log.String(), "sekrit") {
			t.Errorf("the daemon's log holds an env.* value")
		}
	})
}

// writerEnv, set, makes the test binary a writer: it opens the file named
// by its first argument, writes the second in one write(2), says
// "written" and waits, the file open, to be killed. A shell cannot stand
// in: its redirections dup the file and close the copy, and a close runs
// a message written without its newline.
const writerEnv = "BOXFS_IT_WRITER"

func init() {
	if os.Getenv(writerEnv) == "" {
		return
	}
	f, err := os.OpenFile(os.Args[1], os.O_RDWR, 0)
	if err == nil {
		_, err = f.Write([]byte(os.Args[2]))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("written")
	time.Sleep(time.Hour)
	os.Exit(3)
}

// killMidLine writes text to name from a process that is then killed with
// SIGKILL, the file still open, and waits for it to end.
func killMidLine(t *testing.T, name, text string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], name, text)
	cmd.Env = append(os.Environ(), writerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	werr := cmd.Wait()
	if err != nil || line != "written\n" {
		t.Fatalf("writer to %s said %q, %v", name, line, err)
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("writer not ended by its kill: %v", werr)
	}
}

// Finding 6, killed writer: a ctl message or command line whose writer
// was killed before its newline is dropped (a fragment of `new`, of a
// box's `destroy`, of a command line), and err says so; a whole line
// written before the kill runs.
func TestKilledWriterFragmentDropped(t *testing.T) {
	bothProviders(t, func(t *testing.T, m *mountT, prov string) {
		ctl := filepath.Join(m.mnt, "ctl")
		killMidLine(t, ctl, "new frag provider="+prov)
		if exists(filepath.Join(m.mnt, "frag")) {
			t.Error("a killed writer's fragment made a box")
		}
		if e := rootErr(m); !strings.Contains(e, "killed by signal 9") {
			t.Errorf("root err %q", e)
		}
		killMidLine(t, ctl, "new full provider="+prov+"\n")
		if !exists(filepath.Join(m.mnt, "full")) {
			t.Fatalf("a line whose newline came did not run: %s", rootErr(m))
		}
		b := &boxT{m: m, name: "full", dir: filepath.Join(m.mnt, "full"), work: filepath.Join(m.mnt, "full", "work")}

		killMidLine(t, filepath.Join(b.dir, "ctl"), "destroy")
		if st := readString(t, filepath.Join(b.dir, "ctl")); !strings.Contains(st, "state=ready") {
			t.Errorf("box after a killed writer's destroy: %q", st)
		}
		killMidLine(t, filepath.Join(b.dir, "exec"), "touch frag")
		noCommands(t, b)
		if e := readString(t, filepath.Join(b.dir, "err")); !strings.Contains(e, "killed by signal 9") {
			t.Errorf("box err %q", e)
		}
		if out := b.must(t, "ls -A"); out != "" {
			t.Errorf("the box holds %q", out)
		}
	})
}

// writeShort writes text to name in one write(2) from a buffer skew bytes
// into a page, so that the kernel splits it unaligned, then closes; it
// returns both answers.
func writeShort(t *testing.T, name, text string, skew int) (n int, werr, cerr error) {
	t.Helper()
	buf, err := unix.Mmap(-1, 0, len(text)+skew+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	p := buf[skew : skew+len(text)]
	copy(p, text)
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	n, werr = unix.Write(fd, p)
	return n, werr, unix.Close(fd)
}

// Finding 6, E2BIG: a ctl message or command line over 1 MiB in one
// unaligned write(2) fails whole with E2BIG (at the write, or at the
// close after a short count), and nothing of it runs.
func TestCtlWriteOverLimitE2BIG(t *testing.T) {
	bothProviders(t, func(t *testing.T, m *mountT, prov string) {
		b := m.newBox(t, "a", "provider="+prov)
		long := "new big provider=" + prov + " label.x=" + strings.Repeat("q", 1<<20) + "\n"
		line := "touch big #" + strings.Repeat("q", 1<<20) + "\n"
		for _, tc := range []struct{ file, text string }{
			{filepath.Join(m.mnt, "ctl"), long},
			{filepath.Join(b.dir, "ctl"), "flush " + strings.Repeat("q", 1<<20) + "\n"},
			{filepath.Join(b.dir, "exec"), line},
		} {
			n, werr, cerr := writeShort(t, tc.file, tc.text, 100)
			switch {
			case werr != nil:
				if !errors.Is(werr, syscall.E2BIG) {
					t.Errorf("%s: write: %v, want E2BIG", tc.file, werr)
				}
			case n == len(tc.text):
				t.Errorf("%s: the whole message taken (close: %v)", tc.file, cerr)
			case !errors.Is(cerr, syscall.E2BIG):
				t.Errorf("%s: close after a short write of %d: %v, want E2BIG", tc.file, n, cerr)
			}
		}
		if exists(filepath.Join(m.mnt, "big")) {
			t.Error("the long new made a box")
		}
		noCommands(t, b)
		if out := b.must(t, "ls -A"); out != "" {
			t.Errorf("the box holds %q", out)
		}
	})
}

// Finding 6, chmod/chown: control files refuse chmod and chown with EPERM
// and keep their mode and owner.
func TestControlFilesRefuseChmodChown(t *testing.T) {
	bothProviders(t, func(t *testing.T, m *mountT, prov string) {
		b := m.newBox(t, "a", "provider="+prov)
		b.must(t, "true")
		launch := filepath.Join(b.dir, "launch", "web")
		if err := os.Mkdir(launch, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{
			filepath.Join(m.mnt, "ctl"), filepath.Join(m.mnt, "err"),
			filepath.Join(b.dir, "ctl"), filepath.Join(b.dir, "exec"), filepath.Join(b.dir, "err"),
			filepath.Join(b.dir, "facts.json"), filepath.Join(b.dir, "cmds", "1", "ctl"),
			filepath.Join(launch, "ctl"), filepath.Join(launch, "secrets"),
		} {
			before, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o777); !errors.Is(err, syscall.EPERM) {
				t.Errorf("chmod %s: %v, want EPERM", p, err)
			}
			if err := os.Chown(p, 1, 1); !errors.Is(err, syscall.EPERM) {
				t.Errorf("chown %s: %v, want EPERM", p, err)
			}
			after, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			bs, as := before.Sys().(*syscall.Stat_t), after.Sys().(*syscall.Stat_t)
			if before.Mode() != after.Mode() || bs.Uid != as.Uid || bs.Gid != as.Gid {
				t.Errorf("%s: %v %d:%d, then %v %d:%d", p, before.Mode(), bs.Uid, bs.Gid, after.Mode(), as.Uid, as.Gid)
			}
		}
		if got := b.must(t, "echo hi"); got != "hi\n" {
			t.Errorf("exec after: %q", got)
		}
	})
}

// Finding 6, debug log: a mount with debug on logs the requests and their
// sizes, never the bytes of a file written or read, nor a launch's
// secrets.
func TestDebugLogHasNoData(t *testing.T) {
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMountCfg(t, mountCfg{provider: prov, opTimeout: 20 * time.Second, attr: time.Second, env: []string{envDebug + "=1"}})
			b := m.newBox(t, "a", "provider="+prov)
			f := filepath.Join(b.work, "f")
			if err := os.WriteFile(f, []byte("FILEDATA-1234567"), 0o644); err != nil {
				t.Fatal(err)
			}
			b.must(t, "echo BOXDATA-7654321 > g")
			for name, want := range map[string]string{"f": "FILEDATA-1234567", "g": "BOXDATA-7654321\n"} {
				if got := readString(t, filepath.Join(b.work, name)); got != want {
					t.Errorf("%s reads %q", name, got)
				}
			}
			launch := filepath.Join(b.dir, "launch", "web")
			if err := os.Mkdir(launch, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(launch, "secrets"), []byte("TOKEN=s3cret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			log := m.log.String()
			if !strings.Contains(log, "WRITE") || !strings.Contains(log, "READ") {
				t.Fatalf("the debug log has no writes and reads")
			}
			for _, secret := range []string{"FILEDATA", "BOXDATA", "s3cret"} {
				if strings.Contains(log, secret) {
					t.Errorf("the debug log holds %q", secret)
				}
			}
		})
	}
}

// asideCopy reads from a box's err where setaside put the copy.
func asideCopy(t *testing.T, b *boxT) string {
	t.Helper()
	e := readString(t, filepath.Join(b.dir, "err"))
	i := strings.Index(e, " are in ")
	if i < 0 {
		t.Fatalf("err does not say where the copy went: %q", e)
	}
	return strings.TrimSuffix(strings.Fields(e[i+len(" are in "):])[0], ";")
}

// checkSetAside: with a file of b's work/ whose push the box refuses
// (rel, holding want on the host), flush fails and keeps failing, until
// setaside rel moves the host's copy to where err says (0600, under the
// state directory); then flush and sync pass and the name is the box's
// again (gone, when the box never had it).
func checkSetAside(t *testing.T, b *boxT, rel, want string) {
	t.Helper()
	ctl := filepath.Join(b.dir, "ctl")
	for i := range 2 {
		if err := ctlWrite(ctl, "flush\n"); err == nil {
			t.Fatalf("flush %d with a refused push passed", i)
		}
	}
	if st := readString(t, ctl); strings.Contains(st, " dirty=0 ") {
		t.Fatalf("the refused file is not dirty: %q", st)
	}
	if err := ctlWrite(ctl, "setaside ../x\n"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("setaside ../x: %v, want EINVAL", err)
	}
	if err := ctlWrite(ctl, "setaside "+rel+"\n"); err != nil {
		t.Fatalf("setaside %s: %v (%s)", rel, err, readString(t, filepath.Join(b.dir, "err")))
	}
	cp := asideCopy(t, b)
	if !strings.HasPrefix(cp, filepath.Join(b.m.state, "aside")+"/") {
		t.Errorf("the copy is at %s, not under the state directory's aside/", cp)
	}
	if fi, err := os.Stat(cp); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the copy: %v %v", fi, err)
	} else if got, _ := os.ReadFile(cp); string(got) != want {
		t.Errorf("the copy holds %d bytes, want %d", len(got), len(want))
	}
	for _, msg := range []string{"flush\n", "sync\n"} {
		if err := ctlWrite(ctl, msg); err != nil {
			t.Errorf("%s after setaside: %v (%s)", strings.TrimSpace(msg), err, readString(t, filepath.Join(b.dir, "err")))
		}
	}
	if st := readString(t, ctl); !strings.Contains(st, " dirty=0 ") {
		t.Errorf("status after setaside: %q", st)
	}
}

// Finding 6, setaside: a dirty file whose push the box refuses blocks
// every later flush until `setaside PATH` moves the host's copy aside.
// Docker: the box's workspace is on its 64 MB /dev/shm, filled. Local
// (the box's files are the host's own): a write-behind mount, and the
// box's file made immutable on the host before the host's change is
// pushed.
func TestSetAsideRefusedPush(t *testing.T) {
	t.Run("provider=docker", func(t *testing.T) {
		m := startMount(t, "docker", 20*time.Second)
		b := m.newBox(t, "full", "provider=docker", "workspace=/dev/shm/w")
		b.must(t, "dd if=/dev/zero of=/dev/shm/fill bs=1M count=62 2>/dev/null; true")
		data := strings.Repeat("x", 8<<20)
		err := os.WriteFile(filepath.Join(b.work, "big"), []byte(data), 0o644)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write of 8 MB into a full box: %v, want ENOSPC", err)
		}
		checkSetAside(t, b, "big", data)
		if exists(filepath.Join(b.work, "big")) {
			t.Error("work/big is there after setaside; the box never had it")
		}
		if got := b.must(t, "ls -A"); got != "" {
			t.Errorf("the box holds %q", got)
		}
	})
	t.Run("provider=local", func(t *testing.T) {
		m := startMountCfg(t, mountCfg{provider: "local", opTimeout: 20 * time.Second, attr: time.Second,
			write: "behind", behindDelay: time.Hour})
		b := m.newBox(t, "ro", "provider=local")
		b.must(t, "echo box > f")
		if got := readString(t, filepath.Join(b.work, "f")); got != "box\n" {
			t.Fatalf("f reads %q", got)
		}
		boxFile := filepath.Join(whereIs(t, b).ws, "f")
		if out, err := exec.Command("chattr", "+i", boxFile).CombinedOutput(); err != nil {
			t.Skipf("chattr +i: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", boxFile).Run() })
		if err := os.WriteFile(filepath.Join(b.work, "f"), []byte("host\n"), 0o644); err != nil {
			t.Fatalf("write-behind write: %v", err)
		}
		checkSetAside(t, b, "f", "host\n")
		if got := readString(t, filepath.Join(b.work, "f")); got != "box\n" {
			t.Errorf("f after setaside reads %q, want the box's", got)
		}
	})
}

// procStatus reads a field of /proc/PID/status, in bytes for the kB ones.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			var n int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &n)
			return n << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// Finding 3: a box lists a directory of 200,000 entries (which took the
// daemon from 39 MB to 652 MB and kept it there): readdir fails with
// EFBIG, err says why, a name in it still opens, and the daemon's peak
// RSS while it lists stays under 200 MB and back near idle after. The
// entries are made behind boxfs's back (on the host for a local box,
// with docker exec in a Docker box, on its tmpfs, as hard links), so
// that no command's walk of the workspace comes before the listing.
func TestHugeListingBounded(t *testing.T) {
	const entries, rssBound = 200_000, 200 << 20
	makeEntries := fmt.Sprintf(`mkdir big && cd big && perl -e 'for (0..%d) { if ($_ %% 60000 == 0) { $s="s$_"; open(F,">",$s) or die; close F } else { link($s,"h$_") or die } }'`, entries-1)
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMountAttr(t, prov, 60*time.Second, time.Second, false)
			args := []string{"provider=" + prov}
			if prov == "docker" {
				args = append(args, "workspace=/dev/shm/w")
			}
			b := m.newBox(t, "many", args...)
			boxSees(t, b, makeEntries)
			time.Sleep(1100 * time.Millisecond) // past the attribute timeout
			pid := m.cmd.Process.Pid
			idle := procStatus(t, pid, "VmRSS")
			// Reset the peak: what follows is the listing's.
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := os.ReadDir(filepath.Join(b.work, "big"))
			took := time.Since(start)
			if !errors.Is(err, syscall.EFBIG) {
				t.Fatalf("readdir of %d entries: %v, want EFBIG", entries, err)
			}
			if e := readString(t, filepath.Join(b.dir, "err")); !strings.Contains(e, "100000 entries") {
				t.Errorf("err %q", e)
			}
			if _, err := os.Stat(filepath.Join(b.work, "big", "h123457")); err != nil {
				t.Errorf("a name in the refused directory: %v", err)
			}
			rss, hwm := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
			t.Logf("daemon RSS %d MB before the listing, %d MB after, peak %d MB; readdir refused in %v",
				idle>>20, rss>>20, hwm>>20, took.Round(time.Millisecond))
			if hwm > rssBound {
				t.Errorf("the daemon's RSS peaked at %d MB listing %d entries, past %d MB", hwm>>20, entries, rssBound>>20)
			}
			if rss > idle+idle/5+(16<<20) {
				t.Errorf("the daemon holds %d MB after the refused listing, %d MB before", rss>>20, idle>>20)
			}
		})
	}
}

// Finding 4, fetch past the cache budget: a 4 GiB sparse file a Docker
// box makes, read through a mount whose cache budget is 32 MiB (twice
// over in the middle, and at both ends), is read from the box in ranged
// reads, never copied whole: the host's cache stays within the budget
// plus one bounded stream buffer. (A local box's files are read where
// they are, without copies.)
func TestFetchPastBudgetStreamed(t *testing.T) {
	const budget, size = 32 << 20, 4 << 30
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 60 * time.Second, attr: time.Second, budget: budget})
	b := m.newBox(t, "sparse", "provider=docker")
	b.must(t, fmt.Sprintf(`truncate -s %d f && printf head | dd of=f conv=notrunc 2>/dev/null && printf tail | dd of=f bs=1 seek=%d conv=notrunc 2>/dev/null`, int64(size), int64(size-4)))
	name := filepath.Join(b.work, "f")
	fi, err := os.Stat(name)
	if err != nil || fi.Size() != size {
		t.Fatalf("stat: %v %v", fi, err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cache := filepath.Join(m.state, "cache")
	buf := make([]byte, 1<<20)
	for _, off := range []int64{0, size - 4} {
		if _, err := f.ReadAt(buf[:4], off); err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if want := map[int64]string{0: "head", size - 4: "tail"}[off]; string(buf[:4]) != want {
			t.Errorf("at %d: %q, want %q", off, buf[:4], want)
		}
	}
	// 64 MiB from the middle, twice the budget.
	off := int64(size / 2)
	for range 64 {
		n, err := f.ReadAt(buf, off)
		if err != nil || n != len(buf) {
			t.Fatalf("read at %d: %d %v", off, n, err)
		}
		for _, c := range buf {
			if c != 0 {
				t.Fatalf("a non-zero byte in the hole at %d", off)
			}
		}
		off += int64(n)
		if got := du(t, cache); got > budget+1<<20 {
			t.Fatalf("the cache takes %d bytes on the host, past the budget %d and one buffer", got, budget)
		}
	}
	if got := du(t, m.state); got > budget+(8<<20) {
		t.Errorf("the state directory takes %d bytes", got)
	}
}

// Finding 5 on a Docker box: with the mount's request bound at 3 s (and
// the op timeout far above it), a read from a paused box is answered
// ETIMEDOUT at the bound, the daemon logs its goroutines, and the file
// reads once the box runs again. (A request made to hang through a test
// hook, among 200 boxes of mixed providers: TestManyBoxesUnderLoad.)
func TestRequestBoundPausedDocker(t *testing.T) {
	const bound = 3 * time.Second
	m := startMountCfg(t, mountCfg{provider: "docker", opTimeout: 2 * time.Minute, attr: time.Second,
		env: []string{envBound + "=" + bound.String()}})
	b := m.newBox(t, "paused", "provider=docker")
	b.must(t, "echo from-box > f")
	id := boxID(t, b)
	dockerCLI(t, "pause", id)
	unpaused := false
	defer func() {
		if !unpaused {
			dockerCLI(t, "unpause", id)
		}
	}()
	start := time.Now()
	err := bounded(t, "read of a paused box", bound+10*time.Second, func() error {
		_, err := os.ReadFile(filepath.Join(b.work, "f"))
		return err
	})
	took := time.Since(start)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("read of a paused box: %v, want ETIMEDOUT", err)
	}
	if took < bound-500*time.Millisecond {
		t.Errorf("answered after %v, before the bound %v", took, bound)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		log := m.log.String()
		if strings.Contains(log, "request passed its bound") && strings.Contains(log, "goroutine ") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the daemon's log lacks the late request and its goroutines")
			break
		}
	}
	dockerCLI(t, "unpause", id)
	unpaused = true
	if got := b.must(t, "cat f"); got != "from-box\n" {
		t.Errorf("in the box: %q", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := os.ReadFile(filepath.Join(b.work, "f"))
		if err == nil && string(got) == "from-box\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read after unpause: %q %v", got, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Finding 6, agent binary trust, on a Docker box (a local box has no
// agent): a file of the agent's size planted at the agent's shared path
// in the box's /tmp, owned by another user, is never run when the box is
// attached again; the agent runs from a private directory instead.
func TestPlantedAgentNotRun(t *testing.T) {
	m := startMount(t, "docker", 20*time.Second)
	a := m.newBox(t, "a", "provider=docker")
	a.must(t, "echo hi > f")
	id := boxID(t, a)
	shared := strings.TrimSpace(a.must(t, "ls -d /tmp/.boxfs-agent-* | grep -v '[.]tmp-' | head -1"))
	if shared == "" {
		t.Fatal("no agent binary in the box's /tmp")
	}
	if err := ctlWrite(filepath.Join(m.mnt, "ctl"), "forget a\n"); err != nil {
		t.Fatal(err)
	}
	// The planted file: a script of the agent binary's size that leaves
	// a mark when run, owned by nobody.
	plant := `set -e; b=$0; n=$(wc -c < "$b"); rm -f "$b"; printf '#!/bin/sh\ntouch /tmp/planted-ran\nexit 1\n' > "$b"; ` +
		`head -c $((n - $(wc -c < "$b"))) /dev/zero | tr '\0' '#' >> "$b"; chown 65534:65534 "$b"; chmod 755 "$b"; [ $(wc -c < "$b") = $n ]`
	if out, err := exec.Command("docker", "exec", id, "sh", "-c", plant, shared).CombinedOutput(); err != nil {
		t.Fatalf("planting: %v\n%s", err, out)
	}
	if err := ctlWrite(filepath.Join(m.mnt, "ctl"), "attach b provider=docker id="+id+"\n"); err != nil {
		t.Fatalf("attach: %v (%s)", err, rootErr(m))
	}
	b := &boxT{m: m, name: "b", dir: filepath.Join(m.mnt, "b"), work: filepath.Join(m.mnt, "b", "work")}
	if got := readString(t, filepath.Join(b.work, "f")); got != "hi\n" {
		t.Errorf("f reads %q", got)
	}
	if out, _ := exec.Command("docker", "exec", id, "ls", "/tmp/planted-ran").CombinedOutput(); !strings.Contains(string(out), "No such file") {
		t.Errorf("the planted agent ran: %s", out)
	}
	if !strings.Contains(m.log.String(), "the binary in the box is not trusted; installing one in a private directory") {
		t.Error("the daemon's log does not say it distrusted the planted binary")
	}
	if roundTrips(t, b) == 0 {
		t.Error("no agent serves the attached box")
	}
}

// Finding 6, pprof: a boxfs daemon run with BOXFS_PPROF serves its
// profiles on a 0600 unix socket in its state directory, and a TCP
// address (which served every local user and every process of a local
// box) serves nothing. The daemon's, whatever the provider.
func TestPprofUnixSocketOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := startDaemon(t, "local", "BOXFS_PPROF="+addr)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("BOXFS_PPROF=%s: the daemon serves on TCP", addr)
	}
	if exists(filepath.Join(m.state, "pprof.sock")) {
		t.Errorf("BOXFS_PPROF=%s made a socket", addr)
	}

	m = startDaemon(t, "local", "BOXFS_PPROF=1")
	sock := filepath.Join(m.state, "pprof.sock")
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (os.ModeType | os.ModePerm); got != os.ModeSocket|0o600 {
		t.Errorf("the profile socket's mode %v, want a 0600 socket", got)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://boxfs/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Errorf("the profile socket answers %s: %.200s", resp.Status, body)
	}
}
