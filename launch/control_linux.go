package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readRequest reads a start request from r: its config lines, and the
// escaped secrets and stdin lines.
func readRequest(r io.Reader) (cfg []byte, sec, inp string, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var b strings.Builder
	for {
		line, rerr := br.ReadString('\n')
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "end":
			return []byte(b.String()), sec, inp, nil
		case strings.HasPrefix(line, "secrets "):
			sec = strings.TrimPrefix(line, "secrets ")
		case strings.HasPrefix(line, "stdin "):
			inp = strings.TrimPrefix(line, "stdin ")
		case line != "":
			b.WriteString(line + "\n")
		}
		if b.Len() > maxRequest {
			return nil, "", "", fail(exitInvalid, "the request is over %d bytes", maxRequest)
		}
		if rerr != nil {
			return nil, "", "", fail(exitInvalid, "the request ended early")
		}
	}
}

// start starts the launch from the request on stdin (reuse: from its
// config, with only secrets and stdin on stdin), unless it runs.
func (bl *boxLaunch) start(reuse bool) error {
	req, sec, inp, err := readRequest(os.Stdin)
	if err != nil {
		return err
	}
	if err := os.Mkdir(bl.d, 0o700); err != nil && !os.IsExist(err) {
		return fail(exitPermission, "cannot make %s: %v", bl.d, err)
	} else if err == nil && reuse {
		os.Remove(bl.d)
		return fail(exitNotFound, "no launch named %s", bl.name)
	}
	v, running, err := bl.lockIdle()
	if err != nil || running {
		return err
	}
	c, err := bl.newConfig(reuse, req, sec != "")
	if err != nil {
		bl.unlock()
		return err
	}
	bl.clear(v)
	nv := newVars()
	nv.phase, nv.started = Starting, now()
	nv.since = nv.started
	cmd, err := bl.spawn("supervise", input(sec, inp), false)
	if err != nil {
		bl.unlock()
		return fail(1, "starting the supervisor: %v", err)
	}
	nv.sup = strconv.Itoa(cmd.Process.Pid)
	if p, ok := readProc(cmd.Process.Pid); ok {
		nv.supStart = p.start
	}
	bl.save(nv, c)
	bl.unlock()
	bl.waitPhase(func(p Phase) bool { return p != Starting }, 20*time.Second)
	return bl.printState()
}

// clear ends what an earlier run left (a lost launch's program) and its
// files (the lock held), for a new start.
func (bl *boxLaunch) clear(v vars) {
	if v.phase != "new" && v.pid != "-" && len(groupMembers(v.pid, v.pidStart)) > 0 {
		killConfirm(v.pid, v.pidStart)
	}
	for _, f := range []string{"stop", "restart", "prog", "burst", "stopping/owner", "stopping"} {
		os.Remove(bl.path(f))
	}
	rcs, _ := filepath.Glob(bl.path("rc.*"))
	for _, f := range rcs {
		os.Remove(f)
	}
}

// lockIdle takes the lock of a launch that does not run: of a running one
// it prints the state and reports running (the lock not held). A launch
// that is stopping is waited for.
func (bl *boxLaunch) lockIdle() (vars, bool, error) {
	for {
		if err := bl.lock(); err != nil {
			return vars{}, false, err
		}
		v := bl.load()
		switch {
		case active(v.phase) && (alive(v.sup, v.supStart) || alive(v.dog, v.dogStart)):
			bl.unlock()
			return v, true, bl.printState()
		case v.phase == Stopping && bl.stopperAlive():
			bl.unlock()
			// The owner is looked at every time, not once: a stop killed
			// just before the first look was alive at it.
			if !bl.waitPhase(func(p Phase) bool { return p != Stopping || !bl.stopperAlive() }, 10*time.Minute) {
				return v, false, fail(exitBusy, "the launch %s is still stopping", bl.name)
			}
			continue
		}
		// A stop whose process died (its host went away) is over: the
		// start ends what it left.
		return v, false, nil
	}
}

// stopper reports whether stopping/ names its owner (a stop claims it
// and writes the owner under the lock), and whether that owner runs.
func (bl *boxLaunch) stopper() (named, running bool) {
	f := strings.Fields(bl.readFirst("stopping/owner"))
	if len(f) != 2 {
		return false, false
	}
	return true, alive(f[0], f[1])
}

// stopperAlive reports whether the stop that claimed stopping/ still runs.
func (bl *boxLaunch) stopperAlive() bool {
	_, running := bl.stopper()
	return running
}

// stopperDied reports whether stopping/ names an owner and it is dead.
func (bl *boxLaunch) stopperDied() bool {
	named, running := bl.stopper()
	return named && !running
}

// newConfig writes the config of a start (or, with reuse, reads the last
// one) and checks what only the box knows.
func (bl *boxLaunch) newConfig(reuse bool, req []byte, secrets bool) (boxConfig, error) {
	if reuse {
		c, err := bl.config()
		if err != nil {
			return c, err
		}
		if c.secrets && !secrets {
			return c, fail(exitRefused, "the launch %s had secrets, which went with its supervisor: write them again", bl.name)
		}
		if secrets && !c.secrets {
			b, _ := os.ReadFile(bl.path("config"))
			bl.writeFile("config", append(b, "hassecrets 1\n"...))
			c.secrets = true
		}
		_, err = checkRequest(c)
		return c, err
	}
	c, err := parseConfig(req)
	if err != nil {
		return c, fail(exitInvalid, "%v", err)
	}
	more, err := checkRequest(c)
	if err != nil {
		return c, err
	}
	if err := bl.writeFile("config", append(req, more...)); err != nil {
		return c, fail(exitPermission, "%v", err)
	}
	return parseConfig(append(req, more...))
}

// checkRequest checks what only the box knows: the user, and
// ptrace_scope for a program with secrets not run as root. It returns the
// config lines the box resolved (uid, gid, home, drop).
func checkRequest(c boxConfig) ([]byte, error) {
	for _, k := range c.inherit {
		if refusedEnv(k) != "" {
			return nil, fail(exitInvalid, "inherit: %s is not a name a launch may take", k)
		}
	}
	me := os.Getuid()
	progUID := me
	var more []byte
	if c.user != "" {
		u, err := user.Lookup(c.user)
		if err != nil {
			u, err = user.LookupId(c.user)
		}
		switch {
		case err == nil:
		case isDigits(c.user):
			u = &user.User{Uid: c.user, Gid: c.user, HomeDir: "/"}
		default:
			return nil, fail(exitNotFound, "no user %s in the box", c.user)
		}
		progUID, _ = strconv.Atoi(u.Uid)
		if progUID != me && me != 0 {
			return nil, fail(exitPermission, "only root can run a program as another user (%s)", c.user)
		}
		more = fmt.Appendf(nil, "uid %s\ngid %s\nhome %s\ndrop go\n", u.Uid, u.Gid, u.HomeDir)
	}
	if c.secrets && progUID != 0 {
		b, _ := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || n < 1 {
			return nil, fail(exitRefused, "secrets for a program not run as root need kernel.yama.ptrace_scope >= 1; the box has %s", orNone(strings.TrimSpace(string(b))))
		}
	}
	return more, nil
}

func orNone(s string) string {
	if s == "" {
		return "no Yama"
	}
	return s
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// waitPhase polls the state until ok, or bound passes.
func (bl *boxLaunch) waitPhase(ok func(Phase) bool, bound time.Duration) bool {
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ok(bl.load().phase) {
			return true
		}
	}
	return false
}

func (bl *boxLaunch) printState() error {
	b, err := os.ReadFile(bl.path("state"))
	if err != nil {
		return fail(exitNotFound, "no launch named %s", bl.name)
	}
	_, err = os.Stdout.Write(b)
	return err
}

// restart asks the supervisor to restart the program now; an ended launch
// starts again from its config.
func (bl *boxLaunch) restart() error {
	if !bl.exists("vars") {
		return fail(exitNotFound, "no launch named %s", bl.name)
	}
	if err := bl.lock(); err != nil {
		return err
	}
	v := bl.load()
	switch {
	case v.phase == Stopping:
		bl.unlock()
		return fail(exitRefused, "the launch %s is stopping", bl.name)
	case !active(v.phase):
		bl.unlock()
		return bl.start(true)
	case !alive(v.sup, v.supStart):
		bl.unlock()
		return bl.printState()
	}
	bl.writeFile("restart", nil)
	bl.unlock()
	c, _ := bl.config()
	for deadline := time.Now().Add(time.Duration(c.grace+20) * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if bl.load().inc > v.inc && !bl.exists("restart") {
			break
		}
	}
	return bl.printState()
}

// stop stops the launch (see Launcher.Stop): the first stop claims
// stopping/ and kills; a stop that finds it claimed waits for the first.
func (bl *boxLaunch) stop(graceArg string) error {
	if !bl.exists("vars") {
		return fail(exitNotFound, "no launch named %s", bl.name)
	}
	c, _ := bl.config()
	grace, err := strconv.Atoi(graceArg)
	if err != nil || grace < 0 {
		grace = c.grace
	}
	v, err := bl.claimStop(c, grace)
	if err != nil || v.phase != Stopping {
		return err
	}
	termDrain(v.pid, v.pidStart, grace)
	bsExit := "-"
	if len(c.before) > 0 {
		bsExit = strconv.Itoa(bl.beforeStop(c, strconv.Itoa(v.inc)))
	}
	killConfirm(v.pid, v.pidStart)
	rc := "rc." + strconv.Itoa(v.inc)
	for i := 0; i < 50 && !bl.exists(rc) && alive(v.runner, v.runnerStart); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if err := bl.lock(); err != nil {
		return err
	}
	v = bl.load()
	if code := bl.readFirst(rc); code != "" {
		v.lastExit = code
	}
	v.phase, v.since, v.beforeStopExit, v.why = Stopped, now(), bsExit, "-"
	bl.save(v, c)
	os.Remove(bl.path("stopping/owner"))
	os.Remove(bl.path("stopping"))
	bl.unlock()
	return bl.printState()
}

// claimStop makes this process the one stop that kills, and returns the
// vars it found with the phase now stopping. When the launch has ended, or
// another stop killed it, it prints the state and returns other vars.
func (bl *boxLaunch) claimStop(c boxConfig, grace int) (vars, error) {
	for try := 0; ; try++ {
		if err := bl.lock(); err != nil {
			return vars{}, err
		}
		v := bl.load()
		if v.phase == Exited || v.phase == GaveUp || v.phase == Stopped || v.phase == "new" {
			bl.unlock()
			return v, bl.printState()
		}
		if err := os.Mkdir(bl.path("stopping"), 0o700); err == nil {
			os.WriteFile(bl.path("stopping/owner"), []byte(bl.me+" "+bl.meStart+"\n"), 0o600)
			bl.writeFile("stop", nil)
			v.phase, v.since = Stopping, now()
			bl.save(v, c)
			bl.unlock()
			return v, nil
		}
		if !bl.stopperAlive() {
			// Its owner is written with it, under the lock: it died.
			os.Remove(bl.path("stopping/owner"))
			os.Remove(bl.path("stopping"))
			bl.unlock()
			continue
		}
		bl.unlock()
		bound := time.Duration(grace+c.beforeMax+30) * time.Second
		for deadline := time.Now().Add(bound); bl.exists("stopping") && !bl.stopperDied() && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		if try >= 3 {
			return vars{}, fail(exitBusy, "another stop of %s does not end", bl.name)
		}
	}
}

// beforeStop runs the before-stop program once, within its bound, its
// output and exit appended to out.log; it returns its exit code.
func (bl *boxLaunch) beforeStop(c boxConfig, inc string) int {
	logf, err := os.OpenFile(bl.path("out.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 126
	}
	defer logf.Close()
	code := 126
	cmd, err := bl.program(c, inc, false, c.before)
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintf(logf, "boxfs-launch: before-stop: %v\n", err)
	} else {
		done := make(chan struct{})
		go func() {
			cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Duration(c.beforeMax) * time.Second):
			pid := strconv.Itoa(cmd.Process.Pid)
			if p, ok := readProc(cmd.Process.Pid); ok {
				killConfirm(pid, p.start)
			}
			<-done
		}
		code = exitCode(cmd.ProcessState)
	}
	fmt.Fprintf(logf, "boxfs: before-stop exited %d\n", code)
	return code
}

// log prints "base end" and up to max bytes of the output from off.
func (bl *boxLaunch) log(offArg, maxArg string) error {
	off, err1 := strconv.ParseInt(offArg, 10, 64)
	n, err2 := strconv.ParseInt(maxArg, 10, 64)
	if err1 != nil || err2 != nil || off < 0 || n < 0 {
		return fail(exitInvalid, "bad log offset")
	}
	if !bl.exists("vars") {
		return fail(exitNotFound, "no launch named %s", bl.name)
	}
	f, base, err := bl.openLog()
	if err != nil {
		return err
	}
	if f == nil {
		fmt.Println("0 0")
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	end := base + fi.Size()
	fmt.Printf("%d %d\n", base, end)
	off = max(off, base)
	if off >= end {
		return nil
	}
	_, err = io.Copy(os.Stdout, io.NewSectionReader(f, off-base, min(n, end-off)))
	return err
}

// openLog opens out.log with the base its out.base gives it (the offset
// of its first byte): the pair is taken only when out.base names the
// file opened, so a trim in between is never mistaken.
func (bl *boxLaunch) openLog() (*os.File, int64, error) {
	for i := 0; i < 40; i++ {
		f, err := os.Open(bl.path("out.log"))
		if errors.Is(err, os.ErrNotExist) {
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, err
		}
		ino, base := "-", int64(0)
		if fs := strings.Fields(bl.readFirst("out.base")); len(fs) == 2 {
			ino = fs[0]
			base, _ = strconv.ParseInt(fs[1], 10, 64)
		}
		if fi, err := f.Stat(); err == nil && (ino == "-" || ino == strconv.FormatUint(fi.Sys().(*syscall.Stat_t).Ino, 10)) {
			return f, base, nil
		}
		f.Close()
		time.Sleep(50 * time.Millisecond)
	}
	return nil, 0, fail(exitBusy, "out.log keeps changing")
}

func (bl *boxLaunch) remove() error {
	if !bl.exists("") {
		return fail(exitNotFound, "no launch named %s", bl.name)
	}
	if err := bl.lock(); err != nil {
		return err
	}
	if v := bl.load(); active(v.phase) || v.phase == Stopping {
		bl.unlock()
		return fail(exitBusy, "the launch %s runs: stop it first", bl.name)
	}
	return os.RemoveAll(bl.d)
}

// list prints the state of every launch in the spool.
func list(spool string) error {
	ents, err := os.ReadDir(spool)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(spool, e.Name(), "state")); err == nil && len(b) < maxStateOut {
			os.Stdout.Write(b)
		}
	}
	return nil
}

// logWriter appends a launch's output to out.log, keeping its tail: past
// max bytes, the last half is kept and out.base says how much went before.
type logWriter struct {
	bl   *boxLaunch
	max  int64
	base int64
	f    *os.File
}

func openLog(bl *boxLaunch, max int64) *logWriter {
	lw := &logWriter{bl: bl, max: max}
	if fs := strings.Fields(bl.readFirst("out.base")); len(fs) == 2 {
		lw.base, _ = strconv.ParseInt(fs[1], 10, 64)
	}
	lw.f, _ = os.OpenFile(bl.path("out.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	return lw
}

func (lw *logWriter) Write(p []byte) (int, error) {
	if lw.f == nil {
		return len(p), nil
	}
	lw.f.Write(p)
	if fi, err := lw.f.Stat(); err == nil && fi.Size() > lw.max {
		lw.trim(fi.Size())
	}
	return len(p), nil
}

// trim keeps the last half of out.log under a new name, says its base in
// out.base (with its inode), then renames it into place.
func (lw *logWriter) trim(size int64) {
	keep := lw.max / 2
	bl := lw.bl
	src, err := os.Open(bl.path("out.log"))
	if err != nil {
		return
	}
	defer src.Close()
	dst, err := os.OpenFile(bl.path("out.new"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	_, err = io.Copy(dst, io.NewSectionReader(src, size-keep, keep))
	fi, serr := dst.Stat()
	dst.Close()
	if err != nil || serr != nil {
		return
	}
	lw.base += size - keep
	bl.writeFile("out.base", fmt.Appendf(nil, "%d %d\n", fi.Sys().(*syscall.Stat_t).Ino, lw.base))
	if os.Rename(bl.path("out.new"), bl.path("out.log")) != nil {
		return
	}
	lw.f.Close()
	lw.f, _ = os.OpenFile(bl.path("out.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

func (lw *logWriter) close() {
	if lw.f != nil {
		lw.f.Close()
	}
}
