package main

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

	"github.com/urfave/cli/v2"
)

// shEnv names the host variables boxfs sh passes to its command besides
// TERM: NAME,NAME; a name ending in * passes every variable it starts.
// Nothing else of the host's environment reaches the box: the box's own
// PATH, HOME and the rest apply.
const shEnv = "BOXFS_SH_ENV"

// shLinkName is the name boxfs runs as sh under (a symlink or hard link),
// for hosts that take only the path of a shell.
const shLinkName = "boxfs-sh"

func shCommand() *cli.Command {
	return &cli.Command{
		Name:      "sh",
		Usage:     "a shell that runs in the box the working directory is in (name it as a host's shell)",
		ArgsUsage: "[-c COMMAND [NAME [ARG ...]]] | [SHELL ARGS ...]",
		Description: `Run from a directory inside MOUNT/NAME/work/, boxfs sh runs the box's
shell (bash, else sh) in box NAME, in the box directory that directory
stands for, with the arguments given: boxfs sh -c 'make test' is sh -c in
the box. Every write made through the mount is in the box before the
command starts. stdin, stdout and stderr are passed as separate streams;
SIGINT, SIGTERM and SIGHUP go to the command's process group in the box;
the exit status is the box shell's (126, 127, 128+signal). If boxfs sh is
killed outright, the daemon kills the command's group. Without arguments it
is an interactive shell (-i), without a terminal.

Host variables passed: TERM, and those named in BOXFS_SH_ENV (NAME,NAME;
NAME* for a prefix). A working directory outside every boxfs mount is an
error (exit 126); nothing runs on the host. Also runs as a link named
boxfs-sh (e.g. pi's shellPath).`,
		SkipFlagParsing: true,
		HideHelp:        true,
		Action: func(c *cli.Context) error {
			if code := runSh(c.Args().Slice(), os.Stdin, c.App.Writer, c.App.ErrWriter); code != 0 {
				return exitCodeError(code)
			}
			return nil
		},
	}
}

// cwdBox finds the boxfs mount, the box and the directory in its
// workspace (slash-separated, "" for the workspace itself) that the
// directory cwd is in.
func cwdBox(cwd string) (mnt, box, dir string, err error) {
	mnts, err := boxfsMounts()
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

// shHostEnv is the part of the host's environment boxfs sh passes: TERM
// and what BOXFS_SH_ENV names.
func shHostEnv(environ []string) map[string]string {
	names := []string{"TERM"}
	for _, n := range strings.Split(lookupEnv(environ, shEnv), ",") {
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

// runSh runs boxfs sh and returns its exit status.
func runSh(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "boxfs sh: "+format+"\n", a...)
		return exitCannotRun
	}
	cwd, err := getwd()
	if err != nil {
		return fail("the working directory: %v", err)
	}
	mnt, box, dir, err := cwdBox(cwd)
	if err != nil {
		return fail("%v", err)
	}
	if len(args) == 0 && isTerminalFd(stdin.Fd()) {
		// The box's shell gets a pipe, not this terminal: say it is
		// interactive. There is no terminal in the box (no job control,
		// no line editing by the box's shell).
		args = []string{"-i"}
	}
	c, err := net.Dial("unix", shSocket(mnt))
	if err != nil {
		return fail("the daemon serving %s does not answer boxfs sh (a boxfs older than boxfs sh, or gone): %v", mnt, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	if uid, err := peerUID(conn); err != nil || uid != os.Getuid() && uid != 0 {
		return fail("the socket for %s is not served by your user or root (uid %d, %v); nothing was run", mnt, uid, err)
	}
	fw := &frameWriter{w: conn}
	req, _ := json.Marshal(shRequest{Box: box, Dir: dir, Args: args, Env: shHostEnv(os.Environ())})
	if err := fw.write(frameRequest, req); err != nil {
		return fail("%v", err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			name := map[os.Signal]string{syscall.SIGINT: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP"}[sig]
			fw.write(frameSignal, []byte(name))
		}
	}()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 && fw.write(frameStdin, buf[:n]) != nil {
				return
			}
			if err != nil {
				fw.write(frameStdinEOF, nil)
				return
			}
		}
	}()
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		typ, p, err := readFrame(br)
		if err != nil {
			fmt.Fprintf(stderr, "boxfs sh: the daemon serving %s went away: the command's end is not known\n", mnt)
			return exitLost
		}
		switch typ {
		case frameStdout:
			if _, err := stdout.Write(p); err != nil {
				// Nobody reads the output: end as sh would, and the
				// daemon kills the command when the connection ends.
				return 128 + int(syscall.SIGPIPE)
			}
		case frameStderr:
			stderr.Write(p)
		case frameExit:
			var x shExit
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

// execFromCwd is boxfs exec -- CMD: the box, and the directory in it, are
// the cwd's, as for boxfs sh; the command goes through that mount's exec
// file, whatever the state directory.
func execFromCwd(c *cli.Context, argv []string) error {
	if len(argv) == 0 {
		return usagef("exec: no command given (boxfs exec -- CMD [ARG ...] in a box's work/)")
	}
	line, err := shellLine(argv)
	if err != nil {
		return usagef("exec: %v", err)
	}
	cwd, err := getwd()
	if err != nil {
		return err
	}
	mnt, box, dir, err := cwdBox(cwd)
	if err != nil {
		return usagef("exec without a box name: %v", err)
	}
	if dir != "" {
		// The exec file starts commands in the workspace.
		line = "cd -- " + shellQuote(dir) + " && " + line
	}
	e, err := newEnv(c, false)
	if err != nil {
		return err
	}
	code, err := execMounted(e, &target{e: e, mnt: mnt}, box, line)
	if err != nil {
		return namedOp("exec", err)
	}
	if code != 0 {
		return exitCodeError(code)
	}
	return nil
}
