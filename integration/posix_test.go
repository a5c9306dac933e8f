package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The POSIX comparison: each case of posixCases is a list of steps, each
// a system call made by a user (root, or -u UID -g GID,... as in
// pjdfstest), run once in a fresh directory of the host's own disk and
// once in a fresh directory of a box's work/. Every step's answer (its
// errno, or the attributes a stat shows) must be the same on both.
//
// A step is "[-u UID] [-g GID[,GID...]] [-U UMASK] OP ARGS...", paths
// relative to the case's directory. The ops are the child's (posixOp);
// two are the runner's own, run as root between the others:
//
//	mark P   remember P's change and modification times, and wait until
//	         a new file's change time on that file system is later (so a
//	         change shows)
//	moved P  whether P's change time is later than at mark, and whether
//	         its modification time is another ("ctime moved,mtime same")
//
// Steps of another user than root run in a child process (this test
// binary, envPosixSteps set) with that user's credentials, as pjdfstest
// runs them: the kernel and the box see a real other user.

// envPosixSteps makes the test binary run posix steps (posixChild).
const envPosixSteps = "BOXFS_IT_POSIX_STEPS"

// posixCase is one case of the comparison.
type posixCase struct {
	name  string
	steps []string
}

// posixStep is one parsed step.
type posixStep struct {
	uid    int      // -1: root's own (the test's) credentials
	groups []uint32 // the first is the egid
	umask  string
	op     []string
	text   string
}

func parseStep(s string) (posixStep, error) {
	st := posixStep{uid: -1, umask: "0", text: s}
	f := strings.Fields(s)
	for len(f) >= 2 && strings.HasPrefix(f[0], "-") && len(f[0]) == 2 {
		switch f[0] {
		case "-u":
			n, err := strconv.Atoi(f[1])
			if err != nil {
				return st, err
			}
			st.uid = n
		case "-g":
			for _, g := range strings.Split(f[1], ",") {
				n, err := strconv.ParseUint(g, 10, 32)
				if err != nil {
					return st, err
				}
				st.groups = append(st.groups, uint32(n))
			}
		case "-U":
			st.umask = f[1]
		default:
			return st, fmt.Errorf("step %q: unknown option %s", s, f[0])
		}
		f = f[2:]
	}
	if len(f) == 0 {
		return st, fmt.Errorf("step %q: no op", s)
	}
	st.op = f
	return st, nil
}

// other reports whether the step runs as another user than root.
func (s posixStep) other() bool { return s.uid > 0 }

// same reports whether s and o run with the same credentials.
func (s posixStep) same(o posixStep) bool {
	return s.uid == o.uid && fmt.Sprint(s.groups) == fmt.Sprint(o.groups)
}

// posixBinary is a copy of this test binary that every user can run
// (go test keeps its own in a directory of mode 0700), set by
// TestPOSIXCompare.
var posixBinary string

// copyTestBinary copies this test binary into a directory every user can
// enter, for the life of t.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "boxfs-posix-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	p := filepath.Join(dir, "integration.test")
	require.NoError(t, os.WriteFile(p, b, 0o755))
	return p
}

// posixRun runs a case's steps in dir and returns each step's answer.
func posixRun(t *testing.T, dir string, steps []string) []string {
	t.Helper()
	var parsed []posixStep
	for _, s := range steps {
		st, err := parseStep(s)
		require.NoError(t, err)
		parsed = append(parsed, st)
	}
	var out []string
	marks := map[string][2]time.Time{}
	for i := 0; i < len(parsed); {
		st := parsed[i]
		switch st.op[0] {
		case "mark", "moved":
			out = append(out, posixMark(t, dir, st, marks))
			i++
			continue
		}
		j := i + 1
		for j < len(parsed) && parsed[j].same(st) && parsed[j].op[0] != "mark" && parsed[j].op[0] != "moved" {
			j++
		}
		out = append(out, posixBatch(t, dir, parsed[i:j])...)
		i = j
	}
	return out
}

// posixBatch runs steps of one user in one child process.
func posixBatch(t *testing.T, dir string, steps []posixStep) []string {
	t.Helper()
	args := []string{dir}
	for _, s := range steps {
		args = append(args, s.umask+" "+strings.Join(s.op, " "))
	}
	cmd := exec.Command(posixBinary, args...)
	cmd.Env = append(os.Environ(), envPosixSteps+"=1")
	cmd.Dir = "/"
	st := steps[0]
	if st.uid >= 0 || len(st.groups) > 0 {
		cred := &syscall.Credential{Uid: uint32(max(st.uid, 0)), Gid: 0, Groups: st.groups}
		if len(st.groups) > 0 {
			cred.Gid = st.groups[0]
		} else if st.uid > 0 {
			cred.Gid = uint32(st.uid)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	require.NoError(t, err, "posix steps %v: %s", args[1:], stderr.String())
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	require.Len(t, lines, len(steps), "posix steps %v answered %q", args[1:], b)
	return lines
}

// posixMark runs a mark or moved step, as root.
func posixMark(t *testing.T, dir string, st posixStep, marks map[string][2]time.Time) string {
	t.Helper()
	require.Len(t, st.op, 2, st.text)
	p := filepath.Join(dir, st.op[1])
	var s unix.Stat_t
	if err := unix.Lstat(p, &s); err != nil {
		return errnoName(err)
	}
	ct, mt := time.Unix(s.Ctim.Unix()), time.Unix(s.Mtim.Unix())
	if st.op[0] == "moved" {
		was := marks[p]
		return moved("ctime", ct.After(was[0])) + "," + moved("mtime", !mt.Equal(was[1]))
	}
	marks[p] = [2]time.Time{ct, mt}
	// Wait for the file system's clock to pass ct: its change times are
	// taken at a coarse tick, and a change in the same tick would not
	// show.
	probe := filepath.Join(filepath.Dir(dir), ".posix-probe")
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "the change time of a new file never passed %v", ct)
		require.NoError(t, os.WriteFile(probe, nil, 0o600))
		var ps unix.Stat_t
		require.NoError(t, unix.Stat(probe, &ps))
		require.NoError(t, os.Remove(probe))
		if time.Unix(ps.Ctim.Unix()).After(ct) {
			return "marked"
		}
	}
}

func moved(what string, changed bool) string {
	if changed {
		return what + " moved"
	}
	return what + " same"
}

func errnoName(err error) string {
	var errno syscall.Errno
	if e, ok := err.(syscall.Errno); ok {
		errno = e
	} else if pe, ok := err.(*os.PathError); ok {
		errno, _ = pe.Err.(syscall.Errno)
	} else if le, ok := err.(*os.LinkError); ok {
		errno, _ = le.Err.(syscall.Errno)
	}
	if errno == 0 {
		return "error: " + err.Error()
	}
	return unix.ErrnoName(errno)
}

// posixChild runs steps (each "UMASK OP ARGS...") in the directory args[0]
// with this process's credentials, printing one answer per step.
func posixChild(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "posix steps: no directory")
		return 2
	}
	dir := args[0]
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	// Relative paths where the directory can be entered (a socket's path
	// must fit sockaddr_un); a user the mount keeps out works with whole
	// paths and is refused at each.
	rel := os.Chdir(dir) == nil
	for _, a := range args[1:] {
		f := strings.Fields(a)
		mask, err := strconv.ParseUint(f[0], 8, 32)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad umask", f[0])
			return 2
		}
		unix.Umask(int(mask))
		fmt.Fprintln(w, posixOp(f[1:], func(p string) string {
			if rel {
				return p
			}
			return filepath.Join(dir, p)
		}))
	}
	return 0
}

// posixOp makes one system call and renders its answer: "0", an errno's
// name, or the attributes a stat asked for.
func posixOp(op []string, path func(string) string) string {
	num := func(i int) int64 {
		n, err := strconv.ParseInt(op[i], 0, 64)
		if err != nil {
			panic(fmt.Sprintf("op %v: argument %d: %v", op, i, err))
		}
		return n
	}
	answer := func(err error) string {
		if err != nil {
			return errnoName(err)
		}
		return "0"
	}
	switch op[0] {
	case "create":
		fd, err := unix.Open(path(op[1]), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, uint32(num(2)))
		if err == nil {
			unix.Close(fd)
		}
		return answer(err)
	case "open":
		flags := 0
		for _, fl := range strings.Split(op[2], ",") {
			flags |= openFlags[fl]
		}
		mode := uint32(0)
		if len(op) > 3 {
			mode = uint32(num(3))
		}
		fd, err := unix.Open(path(op[1]), flags|unix.O_NONBLOCK, mode)
		if err == nil {
			unix.Close(fd)
		}
		return answer(err)
	case "write":
		fd, err := unix.Open(path(op[1]), unix.O_WRONLY, 0)
		if err != nil {
			return answer(err)
		}
		_, err = unix.Write(fd, []byte("x"))
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		return answer(err)
	case "mkdir":
		return answer(unix.Mkdir(path(op[1]), uint32(num(2))))
	case "rmdir":
		return answer(unix.Rmdir(path(op[1])))
	case "unlink":
		return answer(unix.Unlink(path(op[1])))
	case "mkfifo":
		return answer(unix.Mkfifo(path(op[1]), uint32(num(2))))
	case "mknod":
		kind := map[string]uint32{"b": unix.S_IFBLK, "c": unix.S_IFCHR, "f": unix.S_IFIFO}[op[2]]
		return answer(unix.Mknod(path(op[1]), kind|uint32(num(3)), int(unix.Mkdev(uint32(num(4)), uint32(num(5))))))
	case "bind":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			return answer(err)
		}
		defer unix.Close(fd)
		return answer(unix.Bind(fd, &unix.SockaddrUnix{Name: path(op[1])}))
	case "symlink":
		return answer(unix.Symlink(op[1], path(op[2])))
	case "link":
		return answer(unix.Link(path(op[1]), path(op[2])))
	case "rename":
		return answer(unix.Rename(path(op[1]), path(op[2])))
	case "chmod":
		return answer(unix.Chmod(path(op[1]), uint32(num(2))))
	case "chown":
		return answer(unix.Chown(path(op[1]), int(num(2)), int(num(3))))
	case "lchown":
		return answer(unix.Lchown(path(op[1]), int(num(2)), int(num(3))))
	case "truncate":
		return answer(unix.Truncate(path(op[1]), num(2)))
	case "utimens":
		ts := make([]unix.Timespec, 2)
		for i, a := range op[2:4] {
			switch a {
			case "now":
				ts[i] = unix.Timespec{Nsec: unix.UTIME_NOW}
			case "omit":
				ts[i] = unix.Timespec{Nsec: unix.UTIME_OMIT}
			default:
				ts[i] = unix.Timespec{Sec: num(2 + i)}
			}
		}
		return answer(unix.UtimesNanoAt(unix.AT_FDCWD, path(op[1]), ts, unix.AT_SYMLINK_NOFOLLOW))
	case "ftruncate", "fchmod", "fchown", "unlinked":
		return fdOp(op, path(op[1]), num)
	case "stat", "lstat":
		var st unix.Stat_t
		var err error
		if op[0] == "stat" {
			err = unix.Stat(path(op[1]), &st)
		} else {
			err = unix.Lstat(path(op[1]), &st)
		}
		if err != nil {
			return answer(err)
		}
		return statFields(&st, op[2])
	}
	panic(fmt.Sprintf("unknown op %v", op))
}

// fdOp makes a call on an open file: ftruncate P FLAGS SIZE, fchmod P
// FLAGS MODE, fchown P FLAGS UID GID, or unlinked P (open P for writing,
// unlink it, write two bytes, and answer the open file's link count and
// size); p is P's path. A failed open answers its errno.
func fdOp(op []string, p string, num func(int) int64) string {
	flags := unix.O_RDWR
	if op[0] != "unlinked" {
		flags = 0
		for _, fl := range strings.Split(op[2], ",") {
			flags |= openFlags[fl]
		}
	}
	fd, err := unix.Open(p, flags, 0)
	if err != nil {
		return errnoName(err)
	}
	defer unix.Close(fd)
	switch op[0] {
	case "ftruncate":
		err = unix.Ftruncate(fd, num(3))
	case "fchmod":
		err = unix.Fchmod(fd, uint32(num(3)))
	case "fchown":
		err = unix.Fchown(fd, int(num(3)), int(num(4)))
	case "unlinked":
		if err = unix.Unlink(p); err != nil {
			break
		}
		if _, err = unix.Write(fd, []byte("xy")); err != nil {
			break
		}
		var st unix.Stat_t
		if err = unix.Fstat(fd, &st); err == nil {
			return statFields(&st, "nlink,size")
		}
	}
	if err != nil {
		return errnoName(err)
	}
	return "0"
}

var openFlags = map[string]int{
	"O_RDONLY": unix.O_RDONLY, "O_WRONLY": unix.O_WRONLY, "O_RDWR": unix.O_RDWR,
	"O_CREAT": unix.O_CREAT, "O_EXCL": unix.O_EXCL, "O_TRUNC": unix.O_TRUNC, "O_APPEND": unix.O_APPEND,
	"O_NOFOLLOW": unix.O_NOFOLLOW, "O_DIRECTORY": unix.O_DIRECTORY,
}

// statFields renders the comma-separated fields of st that what names.
func statFields(st *unix.Stat_t, what string) string {
	var out []string
	for _, f := range strings.Split(what, ",") {
		switch f {
		case "type":
			out = append(out, map[uint32]string{
				unix.S_IFREG: "regular", unix.S_IFDIR: "dir", unix.S_IFLNK: "symlink", unix.S_IFIFO: "fifo",
				unix.S_IFSOCK: "socket", unix.S_IFCHR: "char", unix.S_IFBLK: "block",
			}[st.Mode&unix.S_IFMT])
		case "mode":
			out = append(out, fmt.Sprintf("0%o", st.Mode&0o7777))
		case "uid":
			out = append(out, strconv.Itoa(int(st.Uid)))
		case "gid":
			out = append(out, strconv.Itoa(int(st.Gid)))
		case "nlink":
			out = append(out, strconv.Itoa(int(st.Nlink)))
		case "size":
			out = append(out, strconv.FormatInt(st.Size, 10))
		case "atime":
			out = append(out, strconv.FormatInt(st.Atim.Sec, 10))
		case "mtime":
			out = append(out, strconv.FormatInt(st.Mtim.Sec, 10))
		case "rdev":
			out = append(out, fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		default:
			panic("unknown stat field " + f)
		}
	}
	return strings.Join(out, ",")
}

// reachableDir makes dir and its parents up to the temporary directory
// searchable by every user (t.TempDir makes them 0700).
func reachableDir(t *testing.T, dir string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(dir); d != tmp && d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		if fi.Mode().Perm()&0o111 != 0o111 {
			require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o111))
		}
	}
}

// posixBoxes are the boxes the comparison runs on: a provider, and the
// serving process's settings (a Docker box without the agent is reached
// through its archive API and fixed scripts).
// The scripts' row runs the kinds each path makes differently (special
// files, ownership and modes of new names, the errno of a refused call),
// on a shared mount only: the
// kernel checks permissions the same whatever the path.
var posixBoxes = []struct {
	name, provider string
	env            []string
	cases          func() []posixCase
	private        bool // also on a private mount
}{
	{"local", "local", nil, posixCases, true},
	{"docker", "docker", nil, posixCases, true},
	{"docker-scripts", "docker", []string{envAgent + "="}, func() []posixCase {
		return append(append(specialCases(), ownershipCases()...), errnoCases()...)
	}, false},
}

// TestPOSIXCompare runs posixCases on a local and a Docker box, on a
// mount shared with other users (every answer as on the host's own disk)
// and on a private one (another user gets EACCES for every step).
func TestPOSIXCompare(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the comparison runs as root and switches to other users")
	}
	posixBinary = copyTestBinary(t)
	native := t.TempDir()
	reachableDir(t, native)
	want := map[string][]string{}
	for _, c := range posixCases() {
		dir := filepath.Join(native, c.name)
		require.NoError(t, os.Mkdir(dir, 0o755))
		want[c.name] = posixRun(t, dir, c.steps)
	}
	for _, row := range posixBoxes {
		for _, shared := range []bool{true, false} {
			t.Run(fmt.Sprintf("box=%s/allow_other=%v", row.name, shared), func(t *testing.T) {
				if !shared && !row.private {
					t.Skip("the kernel refuses other users on a private mount whatever the path")
				}
				if len(row.env) > 0 && testing.Short() {
					t.Skip("-short: a command in the box per operation")
				}
				env := row.env
				if shared {
					env = append(env, envAllowOther+"=1")
				}
				m := startMountEnv(t, t.TempDir(), t.TempDir(), row.provider, 20*time.Second, time.Second, env...)
				reachableDir(t, m.mnt)
				b := m.newBox(t, "box", "provider="+row.provider)
				matched, steps := 0, 0
				for _, c := range row.cases() {
					t.Run(c.name, func(t *testing.T) {
						dir := filepath.Join(b.work, c.name)
						require.NoError(t, os.Mkdir(dir, 0o755))
						got := posixRun(t, dir, c.steps)
						if shared {
							matched += comparePosix(t, row.name, c, got, want[c.name])
						} else {
							matched += checkPrivate(t, c, got)
						}
						steps += len(c.steps)
					})
				}
				if shared {
					t.Logf("%d of %d steps answered as on the host's disk", matched, steps)
				} else {
					t.Logf("%d of %d steps answered as a private mount must (EACCES to other users)", matched, steps)
				}
			})
		}
	}
}

// posixKnown are the steps (row, case name, then the step) whose answer
// on a box differs from the host's, with the reason. A known step that
// starts to match fails the test, so the list cannot go stale.
var posixKnown = map[string]string{}

// comparePosix reports each step of c whose answer on the box differs
// from the host's, and returns how many matched.
func comparePosix(t *testing.T, row string, c posixCase, got, want []string) int {
	t.Helper()
	matched := 0
	for i, s := range c.steps {
		reason, known := posixKnown[row+": "+c.name+": "+s]
		switch {
		case got[i] == want[i] && known:
			t.Errorf("case %s, step %d: %s is listed as a known divergence (%s) but now matches: remove it", c.name, i, s, reason)
		case got[i] == want[i]:
			matched++
		case known:
			t.Logf("known divergence: case %s, step %d: %s: got %s, the host %s (%s)", c.name, i, s, got[i], want[i], reason)
		default:
			t.Errorf("case %s, step %d: %s: got %s, the host answered %s", c.name, i, s, got[i], want[i])
		}
	}
	return matched
}

// checkPrivate checks that on a private mount every step of another user
// answered EACCES (root's run as they may), and returns how many steps
// were as they must be.
func checkPrivate(t *testing.T, c posixCase, got []string) int {
	t.Helper()
	matched := 0
	for i, s := range c.steps {
		st, _ := parseStep(s)
		if !st.other() {
			matched++
			continue
		}
		if assert.Equal(t, "EACCES", got[i], "case %s, step %d: %s", c.name, i, s) {
			matched++
		}
	}
	return matched
}

// TestPOSIXBoxUserNotRoot: a box whose user is not root cannot give a new
// name to another user, so another user's create is refused with EPERM
// and leaves nothing; what the user who mounted makes is the box user's,
// and a device node, which the box's user may not make, is EPERM.
func TestPOSIXBoxUserNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test switches to other users")
	}
	posixBinary = copyTestBinary(t)
	m := startMountEnv(t, t.TempDir(), t.TempDir(), "docker", 20*time.Second, time.Second, envAllowOther+"=1")
	reachableDir(t, m.mnt)
	b := m.newBox(t, "box", "provider=docker", "user=1000:1000")
	dir := filepath.Join(b.work, "t")
	require.NoError(t, os.Mkdir(dir, 0o755))
	got := posixRun(t, dir, steps(
		"mkdir d 0777",
		asU1("create d/f 0644"), asU1("mkdir d/e 0755"), asU1("mkfifo d/p 0644"), asU1("symlink x d/l"),
		"lstat d/f type", "lstat d/e type", "lstat d/p type", "lstat d/l type",
		"create d/r 0640", "lstat d/r uid,gid,mode",
		// The box's user lacks CAP_MKNOD: the box refuses a device node
		// root asks for, and makes a named pipe.
		"mknod d/c c 0644 1 3", "lstat d/c type", "mkfifo d/q 0640", "lstat d/q type,uid,mode",
	))
	assert.Equal(t, []string{
		"0",
		"EPERM", "EPERM", "EPERM", "EPERM",
		"ENOENT", "ENOENT", "ENOENT", "ENOENT",
		"0", "1000,1000,0640",
		"EPERM", "ENOENT", "0", "fifo,1000,0640",
	}, got)
	assert.Equal(t, "q\nr\n", b.must(t, "ls -A t/d"), "nothing of the refused creates is left in the box")
}
