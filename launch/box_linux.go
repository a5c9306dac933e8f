package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/internal/shell"
)

// BoxMain runs "boxfs agent -launch MODE TMPDIR NAME [ARG...]" in a box
// and returns its exit status: the supervisor of launches as the static
// boxfs binary, for boxes that can run it (no shell needed). It keeps a
// launch's files (in TMPDIR/boxfs-launch-UID/NAME/) exactly as the sh
// supervisor does, so either can take over from the other. MODE is start
// or restart (the request on stdin), stop [GRACE], state, list, log OFF
// MAX or remove; supervise, watchdog and run are its own processes.
func BoxMain(args []string) int {
	err := boxMain(args)
	if err == nil {
		return 0
	}
	var e *exitError
	if !errors.As(err, &e) {
		e = &exitError{code: 1, msg: err.Error()}
	}
	if e.msg != "" {
		fmt.Fprintf(os.Stderr, "boxfs-launch: %s\n", e.msg)
	}
	return e.code
}

// exitError ends BoxMain with code, saying msg on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

func boxMain(args []string) error {
	if len(args) < 3 {
		return fail(exitInvalid, "usage: boxfs agent -launch MODE TMPDIR NAME [ARG...]")
	}
	mode, tmp, name := args[0], args[1], args[2]
	args = args[3:]
	spool, err := checkSpool(tmp)
	if err != nil {
		return err
	}
	if mode == "list" {
		return list(spool)
	}
	if err := CheckName(name); err != nil {
		return fail(exitInvalid, "%v", err)
	}
	bl, err := openLaunch(spool, tmp, name)
	if err != nil {
		return err
	}
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch mode {
	case "start":
		return bl.start(false)
	case "restart":
		return bl.restart()
	case "stop":
		return bl.stop(arg(0))
	case "state":
		return bl.printState()
	case "log":
		return bl.log(arg(0), arg(1))
	case "remove":
		return bl.remove()
	case "supervise":
		return bl.supervise()
	case "watchdog":
		return bl.watchdog()
	case "run":
		return bl.run(arg(0))
	}
	return fail(exitInvalid, "unknown mode %q", mode)
}

// checkSpool checks TMPDIR/boxfs-launch-UID and every directory above it
// (made if missing): a directory, not a symbolic link, owned by root or
// this uid, not writable by its group or others unless sticky.
func checkSpool(tmp string) (string, error) {
	if !filepath.IsAbs(tmp) {
		tmp = "/tmp"
	}
	uid := os.Getuid()
	spool := filepath.Join(tmp, fmt.Sprintf("boxfs-launch-%d", uid))
	if err := checkDir("/", uid); err != nil {
		return "", err
	}
	p := "/"
	for _, c := range strings.Split(strings.TrimPrefix(spool, "/"), "/") {
		p = filepath.Join(p, c)
		if p == spool {
			os.Mkdir(p, 0o700) // an existing one is checked as it is
		}
		if err := checkDir(p, uid); err != nil {
			return "", err
		}
	}
	return spool, nil
}

func checkDir(p string, uid int) error {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return fail(exitUnsafe, "unsafe: %s is not a directory: %v", p, err)
	case fi.Mode()&os.ModeSymlink != 0:
		return fail(exitUnsafe, "unsafe: %s is a symbolic link", p)
	case !fi.IsDir():
		return fail(exitUnsafe, "unsafe: %s is not a directory", p)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || (st.Uid != 0 && int(st.Uid) != uid) {
		return fail(exitUnsafe, "unsafe: %s is owned by uid %d, not root or %d", p, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fail(exitUnsafe, "unsafe: %s is writable by its group or others and not sticky", p)
	}
	return nil
}

// boxLaunch is one launch's directory, seen from a process in the box.
type boxLaunch struct {
	spool, tmp, name, d string
	self                string // this binary, to start the launch's other processes
	me, meStart         string // this process
}

func openLaunch(spool, tmp, name string) (*boxLaunch, error) {
	bl := &boxLaunch{spool: spool, tmp: tmp, name: name, d: filepath.Join(spool, name)}
	if fi, err := os.Lstat(bl.d); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, fail(exitUnsafe, "%s is a symbolic link", bl.d)
	}
	bl.self, _ = os.Executable()
	bl.me = strconv.Itoa(os.Getpid())
	if p, ok := readProc(os.Getpid()); ok {
		bl.meStart = p.start
	}
	return bl, nil
}

func (bl *boxLaunch) path(name string) string { return filepath.Join(bl.d, name) }

func (bl *boxLaunch) exists(name string) bool {
	_, err := os.Lstat(bl.path(name))
	return err == nil
}

// writeFile replaces name atomically (a temporary name, then rename).
func (bl *boxLaunch) writeFile(name string, b []byte) error {
	tmp := bl.path(name + ".tmp" + bl.me)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, bl.path(name))
}

// readFirst reads the first line of name ("" when it cannot).
func (bl *boxLaunch) readFirst(name string) string {
	f, err := os.Open(bl.path(name))
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 4096)).ReadString('\n')
	return strings.TrimSpace(line)
}

// lock takes the launch's lock (a directory, with its owner in it): the
// lock of the sh supervisor too. A lock whose owner died is taken over.
func (bl *boxLaunch) lock() error {
	unowned := 0
	for i := 0; ; i++ {
		if err := os.Mkdir(bl.path("lock"), 0o700); err == nil {
			break
		} else if !os.IsExist(err) {
			return fail(exitPermission, "cannot lock %s: %v", bl.d, err)
		}
		f := strings.Fields(bl.readFirst("lock/owner"))
		if len(f) == 2 && !alive(f[0], f[1]) {
			os.Remove(bl.path("lock/owner"))
			os.Remove(bl.path("lock"))
			continue
		}
		// A holder killed between its mkdir and its owner line leaves a
		// lock no one owns: broken after 100 looks, as the sh supervisor does.
		if unowned++; len(f) == 2 {
			unowned = 0
		} else if unowned > 100 {
			unowned = 0
			os.Remove(bl.path("lock"))
			continue
		}
		if i > 1200 {
			return fail(exitBusy, "the launch %s stays locked", bl.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return os.WriteFile(bl.path("lock/owner"), []byte(bl.me+" "+bl.meStart+"\n"), 0o600)
}

func (bl *boxLaunch) unlock() {
	os.Remove(bl.path("lock/owner"))
	os.Remove(bl.path("lock"))
}

func (bl *boxLaunch) load() vars {
	b, err := os.ReadFile(bl.path("vars"))
	if err != nil {
		return newVars()
	}
	return parseVars(b)
}

// save writes the state and vars (the lock held). The state goes first:
// a reader that waits on vars and then prints the state never prints an
// older phase than the one it waited for.
func (bl *boxLaunch) save(v vars, c boxConfig) error {
	if err := bl.writeFile("state", v.stateJSON(bl.name, c.secrets, ViaAgent)); err != nil {
		return err
	}
	return bl.writeFile("vars", []byte(v.line()))
}

func (bl *boxLaunch) config() (boxConfig, error) {
	b, err := os.ReadFile(bl.path("config"))
	if err != nil {
		return boxConfig{}, fail(exitNotFound, "no launch named %s", bl.name)
	}
	return parseConfig(b)
}

func now() string { return strconv.FormatInt(time.Now().Unix(), 10) }

// spawn starts this binary in mode for the launch, in a session of its
// own unless inSession, with stdin (nil: /dev/null) and no output. It
// returns the process, already started.
func (bl *boxLaunch) spawn(mode string, stdin []byte, inSession bool, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command("/proc/self/exe", append([]string{"agent", "-launch", mode, bl.tmp, bl.name}, args...)...)
	cmd.Args[0] = bl.self
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: !inSession}
	var w *os.File
	if stdin != nil {
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, w = r, pw
		defer r.Close()
	}
	if err := cmd.Start(); err != nil {
		if w != nil {
			w.Close()
		}
		return nil, err
	}
	if w != nil {
		go func() {
			w.Write(stdin)
			w.Close()
		}()
	}
	return cmd, nil
}

// input renders secrets and stdin (escaped) as a supervisor and a runner
// read them: two lines.
func input(sec, inp string) []byte {
	return []byte(sec + "\n" + inp + "\n")
}

// readInput reads input's two lines and decodes them.
func readInput(r io.Reader) (sec, inp []byte) {
	br := bufio.NewReaderSize(r, 64<<10)
	line := func() []byte {
		s, _ := br.ReadString('\n')
		d, err := shell.Unescape(strings.TrimSuffix(s, "\n"))
		if err != nil {
			return nil
		}
		return []byte(d)
	}
	sec = line()
	inp = line()
	return sec, inp
}
