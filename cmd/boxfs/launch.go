package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/providers"
)

// launchVerbs are the words after `boxfs launch` that name an action; any
// other word is a box name, and the action is start.
var launchVerbs = []string{"start", "stop", "restart", "status", "logs", "ls"}

func launchCommand() *cli.Command {
	return &cli.Command{
		Name:  "launch",
		Usage: "keep a program running in a box: start, stop, restart, status, logs, ls",
		ArgsUsage: `NAME PROG [flags] -- ARGV...     start PROG (idempotent: a running one is left as it is)
   boxfs launch stop|restart|status|logs NAME PROG
   boxfs launch ls NAME`,
		Description: `A launch is a program a supervisor in the box keeps alive whatever happens
to this host: restarted when it exits with a code other than 0 (and not one
of --terminal), up to --burst restarts in a window; stopped with TERM, then
KILL after --grace; its output kept in a bounded out.log. Secrets travel
only on a pipe: --secret NAME=@FILE (never a value on the command line)
reaches each incarnation on the descriptor named by BOXFS_SECRETS_FD, as
NAME=VALUE records ended by NUL bytes. See docs/namespace.md (launch/).`,
		BashComplete: completeBoxNames,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "restart", Usage: "on or off"},
			&cli.StringFlag{Name: "terminal", Usage: "exit codes that end the launch, e.g. 3,4"},
			&cli.StringFlag{Name: "burst", Usage: "restarts allowed in a window, e.g. 5/60s"},
			&cli.StringFlag{Name: "grace", Usage: "between TERM and KILL at a stop (0-600s)"},
			&cli.StringFlag{Name: "user", Usage: "run the program as this user of the box"},
			&cli.StringFlag{Name: "dir", Usage: "the program's working directory in the box (default: the workspace)"},
			&cli.GenericFlag{Name: "env", Value: &repeated{}, Usage: "NAME=VALUE for the program's environment (repeat)"},
			&cli.GenericFlag{Name: "inherit", Value: &repeated{}, Usage: "a variable of the box's environment to pass on (repeat)"},
			&cli.StringFlag{Name: "before-stop", Usage: "a command line run once at each stop, before the final KILL"},
			&cli.StringFlag{Name: "before-stop-max", Usage: "the before-stop command's bound (default 30s)"},
			&cli.StringFlag{Name: "log", Usage: "out.log's bound, e.g. 8m (the tail is kept)"},
			&cli.GenericFlag{Name: "secret", Value: &repeated{}, Usage: "NAME=@FILE: a secret read from FILE (repeat)"},
			&cli.StringFlag{Name: "stdin", Usage: "@FILE: each incarnation's standard input"},
			&cli.BoolFlag{Name: "json", Usage: "status: print the state as JSON"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "logs: follow until the launch ends"},
		},
		Action: launchAction,
	}
}

// repeated is a flag given any number of times, each value as it is (a
// StringSliceFlag would cut values at commas).
type repeated []string

func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func (r *repeated) String() string { return strings.Join(*r, " ") }

func values(c *cli.Context, name string) []string {
	if r, ok := c.Generic(name).(*repeated); ok {
		return *r
	}
	return nil
}

// launchArgs is a parsed `boxfs launch` command line.
type launchArgs struct {
	verb, box, prog string
	spec            launch.Spec
	grace           *time.Duration
}

func launchAction(c *cli.Context) error {
	a, err := parseLaunchArgs(c)
	if err != nil {
		return err
	}
	return withTarget(c, func(ctx context.Context, e *env, t *target) error {
		var l launcher
		if t.mounted() {
			dir, err := t.boxDir(a.box)
			if err != nil {
				return err
			}
			l = mountLauncher{t: t, box: a.box, dir: dir}
		} else {
			b, err := t.m.Box(a.box)
			if err != nil {
				return err
			}
			l = directLauncher{b: b}
		}
		return runLaunch(ctx, e, c, l, a)
	})
}

// parseLaunchArgs reads the verb, box, launch and spec of the command
// line; a flag that does not go with the verb is a usage error.
func parseLaunchArgs(c *cli.Context) (launchArgs, error) {
	args := c.Args().Slice()
	var a launchArgs
	var argv []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, argv = args[:i], args[i+1:]
	}
	a.verb = "start"
	if len(args) > 0 && slices.Contains(launchVerbs, args[0]) {
		a.verb, args = args[0], args[1:]
	}
	want := 2
	if a.verb == "ls" {
		want = 1
	}
	if len(args) != want {
		return a, usagef("launch %s: takes %s (see boxfs launch --help)", a.verb, map[int]string{1: "NAME", 2: "NAME PROG"}[want])
	}
	a.box = args[0]
	if err := boxes.CheckName(a.box); err != nil {
		return a, usagef("launch: %v", specError(err))
	}
	if want == 2 {
		a.prog = args[1]
		if err := launch.CheckName(a.prog); err != nil {
			return a, usagef("launch: %v", err)
		}
	}
	if err := checkLaunchFlags(c, a.verb, argv); err != nil {
		return a, err
	}
	var err error
	switch a.verb {
	case "start":
		a.spec, err = launchSpec(c, argv)
	case "restart":
		a.spec.Input, err = launchInput(c)
	case "stop":
		if g := c.String("grace"); g != "" {
			s, perr := launch.ParseStart([]string{"grace=" + g, "--", "x"})
			a.grace, err = s.Grace, perr
		}
	}
	if err != nil {
		return a, usagef("launch %s: %v", a.verb, err)
	}
	return a, nil
}

// checkLaunchFlags refuses flags (and an argv) that the verb does not take.
func checkLaunchFlags(c *cli.Context, verb string, argv []string) error {
	takes := map[string][]string{
		"start":   {"restart", "terminal", "burst", "grace", "user", "dir", "env", "inherit", "before-stop", "before-stop-max", "log", "secret", "stdin"},
		"restart": {"secret", "stdin"},
		"stop":    {"grace"},
		"status":  {"json"},
		"logs":    {"follow"},
		"ls":      {"json"},
	}[verb]
	for _, f := range c.LocalFlagNames() {
		if f == "f" {
			f = "follow"
		}
		if !slices.Contains(takes, f) {
			return usagef("launch %s: --%s does not go with %s", verb, f, verb)
		}
	}
	if verb == "start" && len(argv) == 0 {
		return usagef("launch: no program given (boxfs launch NAME PROG [flags] -- ARGV...)")
	}
	if verb != "start" && argv != nil {
		return usagef("launch %s: takes no program", verb)
	}
	return nil
}

// launchSpec builds the spec from the flags, as a start message has it.
func launchSpec(c *cli.Context, argv []string) (launch.Spec, error) {
	var words []string
	for _, k := range []string{"restart", "terminal", "burst", "grace", "user", "dir", "before-stop", "before-stop-max", "log"} {
		if v := c.String(k); v != "" {
			words = append(words, k+"="+v)
		}
	}
	for _, kv := range values(c, "env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return launch.Spec{}, fmt.Errorf("--env %q is not NAME=VALUE", kv)
		}
		words = append(words, "env."+k+"="+v)
	}
	if in := values(c, "inherit"); len(in) > 0 {
		words = append(words, "inherit="+strings.Join(in, ","))
	}
	spec, err := launch.ParseStart(append(append(words, "--"), argv...))
	if err != nil {
		return spec, err
	}
	spec.Input, err = launchInput(c)
	return spec, err
}

// launchInput reads --secret NAME=@FILE and --stdin @FILE (- is stdin).
func launchInput(c *cli.Context) (launch.Input, error) {
	var in launch.Input
	for _, s := range values(c, "secret") {
		k, file, ok := strings.Cut(s, "=@")
		if !ok {
			return in, fmt.Errorf("--secret takes NAME=@FILE, never a value on the command line")
		}
		b, err := readInputFile(file, launch.MaxSecrets)
		if err != nil {
			return in, fmt.Errorf("--secret %s: %w", k, err)
		}
		if in.Secrets == nil {
			in.Secrets = map[string]string{}
		}
		if _, dup := in.Secrets[k]; dup {
			return in, fmt.Errorf("--secret %s given twice", k)
		}
		in.Secrets[k] = strings.TrimSuffix(string(b), "\n")
	}
	if s := c.String("stdin"); s != "" {
		file, ok := strings.CutPrefix(s, "@")
		if !ok {
			return in, fmt.Errorf("--stdin takes @FILE (@- for this command's stdin)")
		}
		b, err := readInputFile(file, launch.MaxStdin)
		if err != nil {
			return in, fmt.Errorf("--stdin: %w", err)
		}
		in.Stdin = b
	}
	return in, nil
}

// readInputFile reads at most max bytes of file ("-": stdin).
func readInputFile(file string, max int) ([]byte, error) {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err == nil && len(b) > max {
		err = fmt.Errorf("more than %d bytes", max)
	}
	return b, err
}

// launcher is where `boxfs launch` sends its actions: the mount's files,
// or the box driven from this process.
type launcher interface {
	start(ctx context.Context, prog string, spec launch.Spec) (launch.State, error)
	restart(ctx context.Context, prog string, in launch.Input) (launch.State, error)
	stop(ctx context.Context, prog string, grace *time.Duration) (launch.State, error)
	state(ctx context.Context, prog string) (launch.State, error)
	list(ctx context.Context) ([]string, error)
	// logs copies the launch's output to w; follow: until the launch ends.
	logs(ctx context.Context, prog string, w io.Writer, follow bool) error
}

func runLaunch(ctx context.Context, e *env, c *cli.Context, l launcher, a launchArgs) error {
	var st launch.State
	var err error
	switch a.verb {
	case "start":
		st, err = l.start(ctx, a.prog, a.spec)
	case "restart":
		st, err = l.restart(ctx, a.prog, a.spec.Input)
	case "stop":
		st, err = l.stop(ctx, a.prog, a.grace)
	case "status":
		st, err = l.state(ctx, a.prog)
	case "logs":
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = l.logs(ctx, a.prog, e.stdout, c.Bool("follow"))
		if ctx.Err() != nil {
			return nil
		}
		return err
	case "ls":
		return launchList(ctx, e, c, l, a)
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		b, _ := json.MarshalIndent(st, "", "  ")
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s %s", a.prog, launch.StatusLine(st))
	return err
}

func launchList(ctx context.Context, e *env, c *cli.Context, l launcher, a launchArgs) error {
	names, err := l.list(ctx)
	if err != nil {
		return err
	}
	var states []launch.State
	for _, n := range names {
		st, err := l.state(ctx, n)
		if providers.IsCode(err, providers.NotFound) {
			st = launch.State{Name: n, Phase: "new"}
		} else if err != nil {
			return err
		}
		states = append(states, st)
	}
	if c.Bool("json") {
		if states == nil {
			states = []launch.State{}
		}
		b, _ := json.MarshalIndent(states, "", "  ")
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	for _, st := range states {
		fmt.Fprintf(e.stdout, "%s %s", st.Name, launch.StatusLine(st))
	}
	return nil
}

// mountLauncher acts through MOUNT/NAME/launch/PROG/.
type mountLauncher struct {
	t        *target
	box, dir string
}

func (m mountLauncher) prog(prog string) string { return filepath.Join(m.dir, "launch", prog) }

func (m mountLauncher) errFile() string { return filepath.Join(m.dir, "err") }

// write writes data (one open, one close) to a launch file.
func (m mountLauncher) write(file string, data []byte) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return mountErr(err, m.errFile(), m.box)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return mountErr(err, m.errFile(), m.box)
	}
	return nil
}

// input writes in's secrets (NUL-separated, so values may hold newlines)
// and stdin for the launch's next start.
func (m mountLauncher) input(prog string, in launch.Input) error {
	if len(in.Secrets) > 0 {
		var b []byte
		for _, k := range slices.Sorted(maps.Keys(in.Secrets)) {
			b = append(append(append(b, k+"="...), in.Secrets[k]...), 0)
		}
		defer clear(b)
		if err := m.write(filepath.Join(m.prog(prog), "secrets"), b); err != nil {
			return err
		}
	}
	if len(in.Stdin) > 0 {
		return m.write(filepath.Join(m.prog(prog), "stdin"), in.Stdin)
	}
	return nil
}

func (m mountLauncher) start(ctx context.Context, prog string, spec launch.Spec) (launch.State, error) {
	msg, err := startMessage(spec)
	if err != nil {
		return launch.State{}, usagef("launch: %v", err)
	}
	if err := os.Mkdir(m.prog(prog), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return launch.State{}, mountErr(err, m.errFile(), m.box)
	}
	if err := m.input(prog, spec.Input); err != nil {
		return launch.State{}, err
	}
	return m.ctl(ctx, prog, msg)
}

// ctl writes msg to the launch's ctl and reads its state.
func (m mountLauncher) ctl(ctx context.Context, prog, msg string) (launch.State, error) {
	if err := m.t.writeCtl(filepath.Join(m.prog(prog), "ctl"), m.errFile(), m.box, msg); err != nil {
		return launch.State{}, err
	}
	return m.state(ctx, prog)
}

// startMessage renders spec as a start message of a launch's ctl.
func startMessage(spec launch.Spec) (string, error) {
	words := []string{"start"}
	add := func(k, v string) { words = append(words, ctlQuotePair(k+"="+v)) }
	if spec.NoRestart {
		add("restart", "off")
	}
	if len(spec.Terminal) > 0 {
		codes := make([]string, len(spec.Terminal))
		for i, c := range spec.Terminal {
			codes[i] = fmt.Sprint(c)
		}
		add("terminal", strings.Join(codes, ","))
	}
	if spec.Burst > 0 {
		add("burst", fmt.Sprintf("%d/%s", spec.Burst, spec.BurstWindow))
	}
	if spec.Grace != nil {
		add("grace", spec.Grace.String())
	}
	if spec.User != "" {
		add("user", spec.User)
	}
	if spec.Dir != "" {
		add("dir", spec.Dir)
	}
	if len(spec.BeforeStop) == 3 {
		add("before-stop", spec.BeforeStop[2])
	}
	if spec.BeforeStopMax > 0 {
		add("before-stop-max", spec.BeforeStopMax.String())
	}
	if spec.LogMax > 0 {
		add("log", fmt.Sprint(spec.LogMax))
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		add("env."+k, spec.Env[k])
	}
	if len(spec.Inherit) > 0 {
		add("inherit", strings.Join(spec.Inherit, ","))
	}
	words = append(words, "--")
	for _, a := range spec.Argv {
		words = append(words, ctlQuote(a))
	}
	msg := strings.Join(words, " ")
	if strings.ContainsAny(msg, "\n\x00") {
		return "", fmt.Errorf("an argument or value holds a newline, which a ctl message cannot carry")
	}
	return msg, nil
}

func (m mountLauncher) restart(ctx context.Context, prog string, in launch.Input) (launch.State, error) {
	if err := m.input(prog, in); err != nil {
		return launch.State{}, err
	}
	return m.ctl(ctx, prog, "restart")
}

func (m mountLauncher) stop(ctx context.Context, prog string, grace *time.Duration) (launch.State, error) {
	msg := "stop"
	if grace != nil {
		msg += " grace=" + grace.String()
	}
	return m.ctl(ctx, prog, msg)
}

func (m mountLauncher) state(ctx context.Context, prog string) (launch.State, error) {
	b, err := readAll(filepath.Join(m.prog(prog), "state"), m.errFile(), m.box)
	if err != nil {
		return launch.State{}, err
	}
	var st launch.State
	if err := json.Unmarshal(b, &st); err != nil {
		return launch.State{}, providers.E(providers.Unknown, "launch", err).WithBox(m.box)
	}
	return st, nil
}

func (m mountLauncher) list(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(m.dir, "launch"))
	if err != nil {
		return nil, mountErr(err, m.errFile(), m.box)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// logs reads out.log: followed, it ends with the launch; else it is opened
// non-blocking and read until its end (EAGAIN), with plain read(2): Go's
// poller would wait for a readiness a FUSE file never signals.
func (m mountLauncher) logs(ctx context.Context, prog string, w io.Writer, follow bool) error {
	name := filepath.Join(m.prog(prog), "out.log")
	if follow {
		f, err := os.Open(name)
		if err != nil {
			return mountErr(err, m.errFile(), m.box)
		}
		defer f.Close()
		go func() {
			<-ctx.Done()
			f.Close()
		}()
		if _, err = io.Copy(w, f); err != nil && ctx.Err() == nil {
			return mountErr(err, m.errFile(), m.box)
		}
		return nil
	}
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return mountErr(err, m.errFile(), m.box)
	}
	defer unix.Close(fd)
	buf := make([]byte, 128<<10)
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			continue
		}
		if err == nil || errors.Is(err, unix.EAGAIN) {
			return nil // the end, or the end of what there is now
		}
		if !errors.Is(err, unix.EINTR) {
			return mountErr(err, m.errFile(), m.box)
		}
	}
}

// directLauncher acts on the box from this process.
type directLauncher struct{ b *boxes.Box }

func (d directLauncher) start(ctx context.Context, prog string, spec launch.Spec) (launch.State, error) {
	return d.b.StartLaunch(ctx, prog, spec)
}

func (d directLauncher) restart(ctx context.Context, prog string, in launch.Input) (launch.State, error) {
	if len(in.Secrets) > 0 {
		d.b.SetLaunchSecrets(prog, in.Secrets)
	}
	if len(in.Stdin) > 0 {
		d.b.SetLaunchStdin(prog, in.Stdin)
	}
	return d.b.RestartLaunch(ctx, prog)
}

func (d directLauncher) stop(ctx context.Context, prog string, grace *time.Duration) (launch.State, error) {
	return d.b.StopLaunch(ctx, prog, grace)
}

func (d directLauncher) state(ctx context.Context, prog string) (launch.State, error) {
	return d.b.LaunchState(ctx, prog)
}

func (d directLauncher) list(ctx context.Context) ([]string, error) { return d.b.Launches(ctx) }

func (d directLauncher) logs(ctx context.Context, prog string, w io.Writer, follow bool) error {
	off := int64(0)
	for {
		lg, err := d.b.ReadLaunchLog(ctx, prog, off, launch.MaxLogRead)
		if err != nil {
			return err
		}
		if _, err := w.Write(lg.Data); err != nil {
			return err
		}
		off = max(off, lg.Base) + int64(len(lg.Data))
		if len(lg.Data) > 0 {
			continue
		}
		if !follow {
			return nil
		}
		st, err := d.b.LaunchState(ctx, prog)
		if err != nil {
			return err
		}
		if st.Phase.Ended() {
			lg, err := d.b.ReadLaunchLog(ctx, prog, off, launch.MaxLogRead)
			if err == nil {
				_, err = w.Write(lg.Data)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}
