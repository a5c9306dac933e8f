package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/launch"
	_ "github.com/boxfs/boxfs/providers/all"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit statuses of boxfs itself (exec passes on its command's).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2 // bad flags, arguments or configuration
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run runs boxfs with args (args[0] is the program) and returns the exit
// status.
func run(args []string, stdout, stderr io.Writer) int {
	// Run as boxfs-sh (a link, for hosts that take only a shell's path),
	// boxfs is boxfs sh.
	if len(args) > 0 && filepath.Base(args[0]) == shLinkName {
		args = append([]string{args[0], "sh"}, args[1:]...)
	}
	app := newApp(stdout, stderr)
	err := app.Run(reorderArgs(app, args))
	return exitStatus(err, stderr)
}

// exitStatus reports err (once, one line) and returns the status to exit with.
func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var code exitCodeError
	if errors.As(err, &code) {
		return int(code)
	}
	var ue *usageError
	// urfave's own exit errors are its help command's: "No help topic
	// for 'frob'", a bad argument.
	var ce cli.ExitCoder
	if errors.As(err, &ue) || errors.As(err, &ce) {
		reportError(stderr, err)
		return exitUsage
	}
	reportError(stderr, err)
	return exitError
}

// exitCodeError ends boxfs with a status and no message: exec passes on its
// command's exit status this way.
type exitCodeError int

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// usageError is a bad flag, argument or configuration: one line, exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:                 "boxfs",
		Usage:                "boxes (a host directory, a Docker container, a cloud sandbox) as directories",
		UsageText:            "boxfs [global options] command [command options] [arguments...]",
		Version:              versionString(),
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		Flags:                globalFlags(),
		HideHelpCommand:      false,
		// Errors are reported once, by run; urfave must not exit or print.
		ExitErrHandler: func(*cli.Context, error) {},
		Before: func(c *cli.Context) error {
			if c.String("log-format") == "json" {
				errorFormat = "json"
			}
			return nil
		},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usagef("%v (see boxfs --help)", err)
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("unknown command %q (see boxfs --help)", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		Commands: []*cli.Command{
			mountCommand(),
			umountCommand(),
			newCommand(),
			lsCommand(),
			execCommand(),
			shCommand(),
			launchCommand(),
			rmCommand(),
			releaseCommand(),
			suspendCommand(),
			resumeCommand(),
			snapshotCommand(),
			seedCommand(),
			pullCommand(),
			factsCommand(),
			receiptsCommand(),
			versionCommand(),
			completionCommand(),
			{
				Name:   "agent",
				Usage:  "serve this box's files over SFTP on stdin/stdout (run by boxfs inside a box)",
				Hidden: true,
				// agent.Main parses its own flags (-sha256); -launch is
				// the launch supervisor (package launch).
				SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					if args := c.Args().Slice(); len(args) > 0 && args[0] == "-launch" {
						if code := launch.BoxMain(args[1:]); code != 0 {
							return exitCodeError(code)
						}
						return nil
					}
					return agent.Main(c.Args().Slice())
				},
			},
		},
	}
	for _, cmd := range app.Commands {
		name := cmd.Name
		cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
			return usagef("%s: %v (see boxfs %s --help)", name, err, name)
		}
	}
	return app
}

// versionString is the version set at build time, else the module's
// version or VCS revision from the build info.
func versionString() string {
	if version != "dev" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return "dev-" + rev + dirty
	}
	return version
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print boxfs's version and whether this binary can serve as the agent in boxes",
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("version takes no arguments")
			}
			out := c.App.Writer
			fmt.Fprintf(out, "boxfs %s\n", versionString())
			if bi, ok := debug.ReadBuildInfo(); ok {
				fmt.Fprintf(out, "go %s\n", strings.TrimPrefix(bi.GoVersion, "go"))
			}
			if exe, err := agent.SelfBinary(); err == nil {
				if interp, glibc, err := agent.Linking(exe); err == nil && interp != "" {
					fmt.Fprintf(out, "agent: %s (dynamic: uploaded into boxes with glibc %s or newer at %s; build with CGO_ENABLED=0 go build ./cmd/boxfs for every box)\n", exe, glibc, interp)
				} else {
					fmt.Fprintf(out, "agent: %s (static; uploaded into boxes for the agent channel)\n", exe)
				}
			} else {
				fmt.Fprintf(out, "agent: off (%v); build with CGO_ENABLED=0 go build ./cmd/boxfs for the agent channel\n", err)
			}
			return nil
		},
	}
}
