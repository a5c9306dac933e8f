package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/internal/boxsh"
)

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
is an interactive shell: on a terminal in the box (made by the box's
script(1)) when stdin and stdout are a terminal.

Host variables passed: TERM, and those named in BOXFS_SH_ENV (NAME,NAME;
NAME* for a prefix). A working directory outside every boxfs mount is an
error (exit 126); nothing runs on the host. Also runs as a link named
boxfs-sh (e.g. pi's shellPath).`,
		SkipFlagParsing: true,
		HideHelp:        true,
		Action: func(c *cli.Context) error {
			if code := boxsh.Run(c.Args().Slice(), os.Stdin, c.App.Writer, c.App.ErrWriter); code != 0 {
				return exitCodeError(code)
			}
			return nil
		},
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
	cwd, err := boxsh.Getwd()
	if err != nil {
		return err
	}
	mnt, box, dir, err := boxsh.CwdBox(cwd)
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
