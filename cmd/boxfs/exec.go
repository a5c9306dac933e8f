package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxsh"
	"github.com/boxfs/boxfs/providers"
)

// Exit statuses exec gives for commands that did not exit by themselves.
const (
	exitKilled      = 137            // killed (128 + SIGKILL), not by this boxfs
	exitLost        = boxsh.ExitLost // the command's end is not known
	exitInterrupted = 130            // Ctrl-C (128 + SIGINT), as a shell reports it
)

// killConfirm bounds how long exec waits, after the first Ctrl-C, for the
// box to confirm the command is dead before it stops waiting.
const killConfirm = 30 * time.Second

// signalStatus is the exit status after sig: 128 + its number, as a shell
// reports a command a signal ended (130 for Ctrl-C, 143 for SIGTERM).
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitInterrupted
}

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a box; streams its output and exits with its exit status",
		ArgsUsage: "NAME [--] CMD [ARG ...] | -- CMD [ARG ...] (the box of the cwd)",
		Description: `The command runs in the box's shell (bash, else sh) with the box's workspace
as its working directory; CMD and ARGs are passed as they are (quoted for the
shell). Through a mount, stdout and stderr come back as one stream on stdout
(the exec file's); without one, stderr stays stderr. stdin is not passed.
Ctrl-C kills the command's process group in the box and exits 130 once the
box confirms it (SIGTERM: 143); a second Ctrl-C, or 30s without that
confirmation, stops waiting. A command killed otherwise exits 137; one whose
end is lost, 255. A box that does not exist: one line, exit 1.

Without NAME (boxfs exec -- CMD), run from inside MOUNT/NAME/work/, the box
is NAME and the command runs in the box directory the cwd stands for.`,
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) > 0 && args[0] == "--" {
				return execFromCwd(c, args[1:])
			}
			box, err := needName(args, "exec", -1)
			if err != nil {
				return err
			}
			argv := args[1:]
			if len(argv) > 0 && argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usagef("exec %s: no command given (boxfs exec NAME -- CMD [ARG ...])", box)
			}
			line, err := shellLine(argv)
			if err != nil {
				return usagef("exec %s: %v", box, err)
			}
			return withTarget(c, func(ctx context.Context, e *env, t *target) error {
				var code int
				if t.mounted() {
					code, err = execMounted(e, t, box, line)
				} else {
					code, err = execDirect(ctx, e, t, box, line)
				}
				if err != nil {
					return err
				}
				if code != 0 {
					return exitCodeError(code)
				}
				return nil
			})
		},
	}
}

// shellLine quotes argv as one line of sh: each word as it is when it is
// safe, else in single quotes. A word with a newline or NUL cannot be
// written as one exec line.
func shellLine(argv []string) (string, error) {
	words := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, "\n\x00") {
			return "", fmt.Errorf("argument %d holds a newline or NUL, which one command line cannot carry; pass it in a file or an environment variable", i+1)
		}
		words[i] = shellQuote(a)
	}
	return strings.Join(words, " "), nil
}

func shellQuote(a string) string {
	if a == "" {
		return "''"
	}
	safe := true
	for _, r := range a {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_@%+=:,./-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// interrupts calls kill at the first SIGINT, SIGTERM or SIGHUP; at the
// second, or when the box has not confirmed the kill within killConfirm,
// it exits 128 + the first signal. caught reports the first signal (nil
// before one); stop ends the watch.
func interrupts(e *env, kill func()) (caught func() os.Signal, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	var first atomic.Value
	go func() {
		var bound <-chan time.Time
		for {
			select {
			case sig := <-sigs:
				if first.Load() == nil {
					first.Store(sig)
					fmt.Fprintln(e.stderr, "boxfs: killing the command in the box (Ctrl-C again to stop waiting)")
					go kill()
					bound = time.After(killConfirm)
					continue
				}
				fmt.Fprintln(e.stderr, "boxfs: stopped waiting; the command may still run in the box")
				os.Exit(signalStatus(first.Load().(os.Signal)))
			case <-bound:
				fmt.Fprintf(e.stderr, "boxfs: the box did not confirm the kill within %v; stopped waiting (the command may still run in the box)\n", killConfirm)
				os.Exit(signalStatus(first.Load().(os.Signal)))
			case <-done:
				return
			}
		}
	}()
	caught = func() os.Signal {
		sig, _ := first.Load().(os.Signal)
		return sig
	}
	return caught, func() {
		signal.Stop(sigs)
		close(done)
	}
}

// execMounted runs line through the mount: a write to NAME/exec on an open
// read-write file starts it, fstat of that file gives its number N, reads
// stream its output, and cmds/N/status says how it ended.
func execMounted(e *env, t *target, box, line string) (int, error) {
	dir, err := t.boxDir(box)
	if err != nil {
		return 0, err
	}
	errFile := filepath.Join(dir, "err")
	f, err := os.OpenFile(filepath.Join(dir, "exec"), os.O_RDWR, 0)
	if err != nil {
		return 0, mountErr(err, errFile, box)
	}
	defer f.Close()
	if _, err := f.Write([]byte(line + "\n")); err != nil {
		return 0, mountErr(err, errFile, box)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, mountErr(err, errFile, box)
	}
	n := fi.Size()
	if n <= 0 {
		return 0, providers.Errorf(providers.Unknown, "exec", "the mount did not report the command's number").WithBox(box)
	}
	cmdDir := filepath.Join(dir, "cmds", strconv.FormatInt(n, 10))
	caught, stop := interrupts(e, func() {
		if err := t.writeCtl(filepath.Join(cmdDir, "ctl"), errFile, box, "kill"); err != nil {
			e.log.Warn("kill failed", "box", box, "cmd", n, "err", err)
		}
	})
	defer stop()
	buf := make([]byte, 64<<10)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if _, werr := e.stdout.Write(buf[:n]); werr != nil {
				t.writeCtl(filepath.Join(cmdDir, "ctl"), errFile, box, "kill")
				return 0, providers.E(providers.Aborted, "exec", fmt.Errorf("writing the command's output: %w (killed it)", werr)).WithBox(box)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, mountErr(rerr, errFile, box)
		}
	}
	// The output ends once the status is written; allow a moment anyway.
	var status string
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := readAll(filepath.Join(cmdDir, "status"), errFile, box)
		if err != nil {
			return 0, err
		}
		status = strings.TrimSpace(string(b))
		if status != "running" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	switch {
	case strings.HasPrefix(status, "exit "):
		code, err := strconv.Atoi(strings.TrimPrefix(status, "exit "))
		if err != nil {
			return 0, providers.Errorf(providers.Unknown, "exec", "command %d: status %q", n, status).WithBox(box)
		}
		return code, nil
	case status == "killed":
		if sig := caught(); sig != nil {
			return signalStatus(sig), nil
		}
		return exitKilled, nil
	case status == "lost":
		msg := ""
		if b, err := os.ReadFile(errFile); err == nil {
			msg = ": " + strings.TrimSpace(string(b))
		}
		fmt.Fprintf(e.stderr, "boxfs: exec %s: command %d lost: its end is not known%s\n", box, n, msg)
		return exitLost, nil
	default:
		return 0, providers.Errorf(providers.Unknown, "exec", "command %d: status %q after its output ended", n, status).WithBox(box)
	}
}

// execDirect runs line in the box from this process.
func execDirect(ctx context.Context, e *env, t *target, box, line string) (int, error) {
	proc, err := t.m.Exec(ctx, box, hands.Command{Line: line, Stdout: e.stdout, Stderr: e.stderr})
	if err != nil {
		return 0, err
	}
	killed := make(chan struct{})
	caught, stop := interrupts(e, func() {
		defer close(killed)
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := proc.Kill(kctx); err != nil {
			e.log.Warn("kill failed", "box", box, "err", err)
		}
	})
	defer stop()
	code, err := proc.Wait()
	switch {
	case caught() != nil:
		// The leader's end is not the group's: exit once the kill is
		// confirmed (interrupts exits anyway after killConfirm).
		<-killed
		return signalStatus(caught()), nil
	case err == nil:
		return code, nil
	case providers.CodeOf(err) == providers.Aborted:
		return exitKilled, nil
	default:
		fmt.Fprintf(e.stderr, "boxfs: exec %s: command lost: %v\n", box, err)
		return exitLost, nil
	}
}
