package launch

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// tick is how often a supervisor looks at its launch.
const tick = 250 * time.Millisecond

func active(p Phase) bool { return p == Starting || p == Running || p == Restarting }

// supervisor is the running supervisor of one launch.
type supervisor struct {
	bl *boxLaunch
	c  boxConfig
	in []byte // the secrets and stdin lines, escaped, as a runner reads them
}

// supervise runs the supervisor: it starts the launch's first incarnation
// (when the launch is starting) or takes over the running one (when the
// watchdog brought it back), then watches it until the launch ends or a
// stop begins.
func (bl *boxLaunch) supervise() error {
	br := bufio.NewReaderSize(os.Stdin, 64<<10)
	sec, _ := br.ReadString('\n')
	inp, _ := br.ReadString('\n')
	os.Stdin.Close()
	c, err := bl.config()
	if err != nil {
		return nil
	}
	s := &supervisor{bl: bl, c: c, in: input(strings.TrimSuffix(sec, "\n"), strings.TrimSuffix(inp, "\n"))}
	if err := bl.lock(); err != nil {
		return err
	}
	v := bl.load()
	if bl.exists("stop") || !active(v.phase) || (v.sup != bl.me && alive(v.sup, v.supStart)) {
		bl.unlock()
		return nil
	}
	v.sup, v.supStart = bl.me, bl.meStart
	bl.save(v, c)
	if v.phase == Starting {
		v = s.begin(v, 1)
	}
	s.ensureDog(v)
	bl.unlock()
	for n := 0; ; n++ {
		time.Sleep(tick)
		if bl.exists("stop") {
			return nil
		}
		v = bl.load()
		if v.sup != bl.me {
			return nil // a later start has a supervisor of its own
		}
		switch {
		case bl.exists("restart"):
			if !s.askedRestart() {
				return nil
			}
		case s.ended(v):
			if !s.onExit() {
				return nil
			}
		case n%4 == 3 && !alive(v.dog, v.dogStart):
			if bl.lock() == nil {
				if !bl.exists("stop") {
					s.ensureDog(bl.load())
				}
				bl.unlock()
			}
		}
	}
}

// ended reports whether v's incarnation has ended.
func (s *supervisor) ended(v vars) bool {
	if s.bl.exists("rc." + strconv.Itoa(v.inc)) {
		return true
	}
	return !alive(v.runner, v.runnerStart) && !alive(v.pid, v.pidStart)
}

// begin starts incarnation inc (the lock held) and waits for its runner
// to record the program.
func (s *supervisor) begin(v vars, inc int) vars {
	bl := s.bl
	n := strconv.Itoa(inc)
	os.Remove(bl.path("rc." + n))
	os.Remove(bl.path("prog"))
	v.inc, v.pid, v.pidStart, v.runner, v.runnerStart = inc, "-", "-", "-", "-"
	if cmd, err := bl.spawn("run", s.in, true, n); err == nil {
		v.runner = strconv.Itoa(cmd.Process.Pid)
		if p, ok := readProc(cmd.Process.Pid); ok {
			v.runnerStart = p.start
		}
		go cmd.Wait()
		for i := 0; i < 400; i++ {
			if f := strings.Fields(bl.readFirst("prog")); len(f) == 3 && f[2] == n {
				v.pid, v.pidStart = f[0], f[1]
				break
			}
			if bl.exists("rc." + n) {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
	} else {
		// As a runner that could not start the program would.
		bl.writeFile("rc."+n, []byte("126\n"))
	}
	v.phase, v.since, v.why = Running, now(), "-"
	bl.save(v, s.c)
	return v
}

// ensureDog starts a watchdog when none runs (the lock held).
func (s *supervisor) ensureDog(v vars) {
	if alive(v.dog, v.dogStart) {
		return
	}
	cmd, err := s.bl.spawn("watchdog", nil, false)
	if err != nil {
		return
	}
	go cmd.Wait()
	v.dog, v.dogStart = strconv.Itoa(cmd.Process.Pid), "-"
	if p, ok := readProc(cmd.Process.Pid); ok {
		v.dogStart = p.start
	}
	s.bl.save(v, s.c)
}

// lockOwn takes the lock and reads the vars, unless a stop began or a
// later start has a supervisor of its own: then ok is false, and the
// lock not held.
func (s *supervisor) lockOwn() (v vars, ok bool) {
	bl := s.bl
	if bl.lock() != nil {
		return v, false
	}
	v = bl.load()
	if bl.exists("stop") || v.sup != bl.me {
		bl.unlock()
		return v, false
	}
	return v, true
}

// onExit handles the end of an incarnation: the next one starts, or the
// launch ends. It reports whether the supervisor goes on.
func (s *supervisor) onExit() bool {
	bl := s.bl
	v, ok := s.lockOwn()
	if !ok {
		return false
	}
	code := bl.readFirst("rc." + strconv.Itoa(v.inc))
	if _, err := strconv.Atoi(code); err != nil {
		code = "-"
	}
	v.lastExit = code
	t := time.Now().Unix()
	terminal := false
	for _, c := range s.c.terminal {
		terminal = terminal || strconv.Itoa(c) == code
	}
	if !s.c.restart || code == "0" || terminal {
		v.phase, v.since = Exited, now()
		bl.save(v, s.c)
		bl.unlock()
		return false
	}
	var keep []string
	for _, f := range strings.Fields(bl.readFirst("burst")) {
		if x, err := strconv.ParseInt(f, 10, 64); err == nil && t-x < int64(s.c.burstT) {
			keep = append(keep, f)
		}
	}
	if len(keep) >= s.c.burstN {
		v.phase, v.since = GaveUp, now()
		v.why = fmt.Sprintf("more_than_%d_restarts_in_%ds", s.c.burstN, s.c.burstT)
		bl.save(v, s.c)
		bl.unlock()
		return false
	}
	bl.writeFile("burst", []byte(strings.Join(append(keep, strconv.FormatInt(t, 10)), " ")+"\n"))
	v.phase, v.since = Restarting, now()
	bl.save(v, s.c)
	bl.unlock()
	time.Sleep(500 * time.Millisecond)
	return s.next(false)
}

// next starts the next incarnation (the lock not held), unless a stop
// began; it reports whether the supervisor goes on.
func (s *supervisor) next(asked bool) bool {
	bl := s.bl
	v, ok := s.lockOwn()
	if !ok {
		return false
	}
	defer bl.unlock()
	if asked {
		if code := bl.readFirst("rc." + strconv.Itoa(v.inc)); code != "" {
			v.lastExit = code
		}
	}
	v.restarts++
	s.begin(v, v.inc+1)
	if asked {
		os.Remove(bl.path("restart"))
	}
	return true
}

// askedRestart drains the incarnation as a stop does, then starts the
// next one.
func (s *supervisor) askedRestart() bool {
	bl := s.bl
	v, ok := s.lockOwn()
	if !ok {
		return false
	}
	v.phase, v.since = Restarting, now()
	bl.save(v, s.c)
	bl.unlock()
	termDrain(v.pid, v.pidStart, s.c.grace)
	killConfirm(v.pid, v.pidStart)
	rc := "rc." + strconv.Itoa(v.inc)
	for i := 0; i < 50 && !bl.exists(rc) && alive(v.runner, v.runnerStart); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	return s.next(true)
}

// watchdog brings the supervisor back when it dies, until the launch ends
// or a stop begins; a launch with secrets is lost instead (they lived only
// in the dead supervisor).
func (bl *boxLaunch) watchdog() error {
	c, err := bl.config()
	if err != nil {
		return nil
	}
	for {
		time.Sleep(time.Second)
		v := bl.load()
		if bl.exists("stop") || !active(v.phase) || v.dog != bl.me {
			return nil
		}
		if alive(v.sup, v.supStart) {
			continue
		}
		if err := bl.lock(); err != nil {
			continue
		}
		v = bl.load()
		switch {
		case bl.exists("stop") || !active(v.phase) || v.dog != bl.me:
			bl.unlock()
			return nil
		case alive(v.sup, v.supStart):
		case c.secrets:
			v.phase, v.since, v.why = Lost, now(), "its_supervisor_died_and_its_secrets_with_it"
			bl.save(v, c)
			bl.unlock()
			return nil
		default:
			if cmd, err := bl.spawn("supervise", nil, false); err == nil {
				go cmd.Wait()
			}
		}
		bl.unlock()
		time.Sleep(time.Second)
	}
}

// run runs incarnation inc (the runner): the program with its secrets on
// descriptor 3 and its stdin through pipes, its output into out.log; when
// it ends, what it left in its group is killed (unless a stop or a restart
// drains it) and rc.INC written. It returns once the output ends.
func (bl *boxLaunch) run(inc string) error {
	sec, inp := readInput(os.Stdin)
	os.Stdin.Close()
	c, err := bl.config()
	if err != nil {
		return err
	}
	lw := openLog(bl, c.logMax)
	defer lw.close()
	rc := func(code int) {
		bl.writeFile("rc."+inc, []byte(strconv.Itoa(code)+"\n"))
	}
	cmd, err := bl.program(c, inc, len(sec) > 0, c.argv)
	if err != nil {
		fmt.Fprintf(lw, "boxfs-launch: %v\n", err)
		rc(127)
		return nil
	}
	out, feeds, err := attach(cmd, sec, inp)
	if err == nil {
		err = cmd.Start()
	}
	closeChildEnds(cmd)
	if err != nil {
		fmt.Fprintf(lw, "boxfs-launch: %v\n", err)
		rc(126)
		return nil
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	start := "-"
	if p, ok := readProc(cmd.Process.Pid); ok {
		start = p.start
	}
	bl.writeFile("prog", []byte(pid+" "+start+" "+inc+"\n"))
	feeds()
	copied := make(chan struct{})
	go func() {
		io.Copy(lw, out)
		close(copied)
	}()
	cmd.Wait()
	if !bl.exists("stop") && !bl.exists("restart") {
		killConfirm(pid, start)
	}
	rc(exitCode(cmd.ProcessState))
	<-copied
	out.Close()
	return nil
}

// attach gives cmd its output pipe (returned), its stdin and its secrets
// (descriptor 3); feeds starts writing them once cmd has started.
func attach(cmd *exec.Cmd, sec, inp []byte) (out *os.File, feeds func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	var writers []func()
	pipeIn := func(data []byte, set func(*os.File)) error {
		pr, pw, err := os.Pipe()
		if err != nil {
			return err
		}
		set(pr)
		writers = append(writers, func() {
			pw.Write(data)
			pw.Close()
		})
		return nil
	}
	if len(inp) > 0 {
		if err := pipeIn(inp, func(f *os.File) { cmd.Stdin = f }); err != nil {
			return nil, nil, err
		}
	}
	if len(sec) > 0 {
		if err := pipeIn(sec, func(f *os.File) { cmd.ExtraFiles = []*os.File{f} }); err != nil {
			return nil, nil, err
		}
	}
	return r, func() {
		for _, wr := range writers {
			go wr()
		}
	}, nil
}

// closeChildEnds closes this process's copies of the ends cmd got.
func closeChildEnds(cmd *exec.Cmd) {
	for _, x := range []any{cmd.Stdin, cmd.Stdout} {
		if f, ok := x.(*os.File); ok {
			f.Close()
		}
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
}

// program returns the command that runs argv as the launch's program does:
// in a session (and group) of its own, in the launch's directory, as its
// user, with PATH, HOME, LANG, BOXFS_INCARNATION, boxfs's own BOXFS_*
// markers, the inherited names and the launch's env, and nothing else.
func (bl *boxLaunch) program(c boxConfig, inc string, secrets bool, argv []string) (*exec.Cmd, error) {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	home := os.Getenv("HOME")
	if c.home != "" {
		home = c.home
	}
	if home == "" {
		home = "/"
	}
	env := []string{"PATH=" + path, "HOME=" + home, "BOXFS_INCARNATION=" + inc}
	if v, ok := os.LookupEnv("LANG"); ok {
		env = append(env, "LANG="+v)
	}
	if secrets {
		env = append(env, "BOXFS_SECRETS_FD=3")
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "BOXFS_") && k != "BOXFS_INCARNATION" && k != "BOXFS_SECRETS_FD" {
			env = append(env, kv)
		}
	}
	for _, k := range c.inherit {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, c.env...)
	exe, err := lookPath(argv[0], envValue(env, "PATH"), c.dir)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: exe, Args: argv, Env: env, Dir: c.dir, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if c.uid != "" {
		cred, err := credential(c)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
	}
	return cmd, nil
}

// envValue is the last value of name in env.
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == name {
			v = val
		}
	}
	return v
}

// lookPath finds file as execvp does in path (relative to dir for a name
// with a slash).
func lookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		if !filepath.IsAbs(file) {
			file = filepath.Join(dir, file)
		}
		return file, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found", file)
}

// credential is the launch's user, with the groups the box lists for it.
func credential(c boxConfig) (*syscall.Credential, error) {
	uid, err1 := strconv.ParseUint(c.uid, 10, 32)
	gid, err2 := strconv.ParseUint(c.gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("the launch's user %s:%s is not numeric", c.uid, c.gid)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	if u, err := user.LookupId(c.uid); err == nil {
		if ids, err := u.GroupIds(); err == nil {
			for _, id := range ids {
				if g, err := strconv.ParseUint(id, 10, 32); err == nil {
					cred.Groups = append(cred.Groups, uint32(g))
				}
			}
		}
	}
	return cred, nil
}
