package boxsh

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// EnvVar names the host variables boxfs sh passes to its command besides
// TERM: NAME,NAME; a name ending in * passes every variable it starts.
// Nothing else of the host's environment reaches the box: the box's own
// PATH, HOME and the rest apply.
const EnvVar = "BOXFS_SH_ENV"

// Exit statuses boxfs sh gives besides its command's, as sh does.
const (
	ExitCannotRun = 126 // the command could not be started (no mount, no box, a failed barrier)
	ExitLost      = 255 // the command's end is not known
)

// CwdBox finds the boxfs mount, the box and the directory in its
// workspace (slash-separated, "" for the workspace itself) that the
// directory cwd is in.
func CwdBox(cwd string) (mnt, box, dir string, err error) {
	mnts, err := Mounts()
	if err != nil {
		return "", "", "", fmt.Errorf("listing the mounts: %v", err)
	}
	for _, m := range mnts {
		if (cwd == m || strings.HasPrefix(cwd, strings.TrimSuffix(m, "/")+"/")) && len(m) > len(mnt) {
			mnt = m
		}
	}
	if mnt == "" {
		return "", "", "", fmt.Errorf("%s is not inside a boxfs mount; nothing was run", cwd)
	}
	rel, err := filepath.Rel(mnt, cwd)
	if err != nil {
		return "", "", "", err
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) < 2 || parts[0] == "." || parts[1] != "work" {
		return "", "", "", fmt.Errorf("%s is in the boxfs mount at %s but not inside a box's work/ directory; nothing was run", cwd, mnt)
	}
	return mnt, parts[0], strings.Join(parts[2:], "/"), nil
}

// HostEnv is the part of the host's environment boxfs sh passes: TERM
// and what BOXFS_SH_ENV names.
func HostEnv(environ []string) map[string]string {
	names := []string{"TERM"}
	for _, n := range strings.Split(lookupEnv(environ, EnvVar), ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, n := range names {
			if k == n || strings.HasSuffix(n, "*") && strings.HasPrefix(k, strings.TrimSuffix(n, "*")) {
				env[k] = v
				break
			}
		}
	}
	return env
}

func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// Run runs boxfs sh with args (the box shell's arguments) and returns its
// exit status.
func Run(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "boxfs sh: "+format+"\n", a...)
		return ExitCannotRun
	}
	cwd, err := Getwd()
	if err != nil {
		return fail("the working directory: %v", err)
	}
	mnt, box, dir, err := CwdBox(cwd)
	if err != nil {
		return fail("%v", err)
	}
	var tty *Winsize
	if len(args) == 0 && IsTerminal(stdin.Fd()) {
		// An interactive shell: on a terminal in the box when this one
		// is a terminal too, else over pipes (-i: no job control, no line
		// editing by the box's shell).
		if ws, ok := TermSize(stdin.Fd()); ok && IsTerminal(os.Stdout.Fd()) {
			tty = &ws
		} else {
			args = []string{"-i"}
		}
	}
	c, err := net.Dial("unix", Socket(mnt))
	if err != nil {
		return fail("the daemon serving %s does not answer boxfs sh (a boxfs older than boxfs sh, or gone): %v", mnt, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	if uid, err := PeerUID(conn); err != nil || uid != os.Getuid() && uid != 0 {
		return fail("the socket for %s is not served by your user or root (uid %d, %v); nothing was run", mnt, uid, err)
	}
	fw := &FrameWriter{W: conn}
	req, _ := json.Marshal(Request{Box: box, Dir: dir, Args: args, Env: HostEnv(os.Environ()), TTY: tty})
	if err := fw.Send(FrameRequest, req); err != nil {
		return fail("%v", err)
	}
	if tty != nil {
		// The terminal's keys go to the box's terminal as bytes: its line
		// discipline echoes, edits and signals there.
		restore, err := MakeRaw(stdin.Fd())
		if err != nil {
			return fail("the terminal: %v", err)
		}
		defer restore()
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			name := map[os.Signal]string{syscall.SIGINT: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP"}[sig]
			fw.Send(FrameSignal, []byte(name))
		}
	}()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 && fw.Send(FrameStdin, buf[:n]) != nil {
				return
			}
			if err != nil {
				fw.Send(FrameStdinEOF, nil)
				return
			}
		}
	}()
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		typ, p, err := ReadFrame(br)
		if err != nil {
			fmt.Fprintf(stderr, "boxfs sh: the daemon serving %s went away: the command's end is not known\n", mnt)
			return ExitLost
		}
		switch typ {
		case FrameStdout:
			if _, err := stdout.Write(p); err != nil {
				// Nobody reads the output: end as sh would, and the
				// daemon kills the command when the connection ends.
				return 128 + int(syscall.SIGPIPE)
			}
		case FrameStderr:
			stderr.Write(p)
		case FrameExit:
			var x Exit
			if err := json.Unmarshal(p, &x); err != nil {
				return fail("bad answer from the daemon: %v", err)
			}
			if x.Err != "" {
				fmt.Fprintf(stderr, "boxfs sh: %s: %s\n", box, x.Err)
			}
			return x.Code
		}
	}
}
