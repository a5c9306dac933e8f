package launch

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The supervisors a launch can run under, as State.Via says them.
const (
	ViaAgent = "agent" // the static boxfs binary: boxfs agent -launch
	ViaSh    = "sh"    // the POSIX sh supervisor
)

var (
	//go:embed boot.sh
	bootScript string
	//go:embed supervisor.sh
	supervisorScript string
	// scriptHash names the installed supervisor script, so a box keeps
	// one file per version and never runs a half-written one.
	scriptHash = func() string {
		s := sha256.Sum256([]byte(supervisorScript))
		return hex.EncodeToString(s[:8])
	}()
)

// Exit codes of the box side (both supervisors), mapped to codes by codeOfExit.
const (
	exitInvalid     = 80
	exitNotFound    = 81
	exitUnsupported = 82
	exitRefused     = 83
	exitUnsafe      = 84
	exitBusy        = 85
	exitPermission  = 86
	exitNoScript    = 87 // the sh supervisor is not installed: send it
)

// Bounds of what the host takes from the box.
const (
	maxStateOut = 64 << 10 // one state
	maxListOut  = 4 << 20  // the states of every launch
	maxErrOut   = 4 << 10
	// MaxLogRead is the most ReadLog returns in one call.
	MaxLogRead = 1 << 20
)

// ExecFunc runs one command in the box (a box's Exec, or hands' Run).
type ExecFunc func(ctx context.Context, req providers.ExecRequest) (providers.Process, error)

// Options configure a Launcher.
type Options struct {
	// Facts are the box's facts: LiveProcesses, SecretsVia, Shell, TmpDir
	// and Workspace decide what the launcher does.
	Facts providers.Facts
	// Exec runs the launcher's commands; nil is the box's Exec.
	Exec ExecFunc
	// Agent is the box-side path of a static boxfs binary that runs in the
	// box (hands' agent): the supervisor is then "boxfs agent -launch",
	// else the POSIX sh one.
	Agent string
	// Force pins the supervisor: ViaAgent, ViaSh, or "" to choose.
	Force string
	// Logger gets the launcher's log lines; nil is slog.Default().
	Logger *slog.Logger
}

// Launcher starts, stops and reads the launches of one box. Every call is
// one command in the box; the box's files are the truth, the launcher
// keeps nothing. It is safe for concurrent use.
type Launcher struct {
	box  providers.Box
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	noAgent   bool // the agent binary did not run: the sh supervisor from now on
	installed bool // the box has this version of the sh supervisor
	tmpDir    string
	hasShell  bool
}

// New returns the launcher of box. A box whose processes do not live on
// between commands (Facts.LiveProcesses) cannot keep a program alive:
// Unsupported.
func New(box providers.Box, opts Options) (*Launcher, error) {
	const op = "launch.New"
	if !opts.Facts.HasLiveProcesses() {
		return nil, providers.Errorf(providers.Unsupported, op, "the box keeps no process alive between commands, so nothing can be launched in it").WithBox(box.ID())
	}
	switch opts.Force {
	case "", ViaSh:
	case ViaAgent:
		if opts.Agent == "" {
			return nil, providers.Errorf(providers.Unsupported, op, "the agent supervisor needs the boxfs binary in the box").WithBox(box.ID())
		}
	default:
		return nil, providers.Errorf(providers.Invalid, op, "unknown supervisor %q (agent or sh)", opts.Force)
	}
	if opts.Exec == nil {
		opts.Exec = box.Exec
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Launcher{box: box, opts: opts, log: opts.Logger, tmpDir: opts.Facts.TmpDir, hasShell: opts.Facts.HasShell()}
	if l.tmpDir == "" {
		l.tmpDir = "/tmp"
	}
	if l.via() == "" {
		return nil, providers.Errorf(providers.Unsupported, op, "the box has neither a shell nor the boxfs binary to supervise a program with").WithBox(box.ID())
	}
	return l, nil
}

// via is the supervisor the next command uses.
func (l *Launcher) via() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.opts.Force != "":
		return l.opts.Force
	case l.opts.Agent != "" && !l.noAgent:
		return ViaAgent
	case l.hasShell:
		return ViaSh
	}
	return ""
}

// Start starts the program spec describes as the launch name, unless the
// launch runs: then it starts nothing and returns its state. An ended
// launch starts again (its output kept). Concurrent starts of one name
// start one program.
func (l *Launcher) Start(ctx context.Context, name string, spec Spec) (State, error) {
	const op = "launch.Start"
	if err := CheckName(name); err != nil {
		return State{}, l.err(providers.Invalid, op, name, err)
	}
	if err := spec.Validate(); err != nil {
		return State{}, l.err(providers.Invalid, op, name, err)
	}
	if err := l.takesInput(op, name, spec.Input); err != nil {
		return State{}, err
	}
	req := spec.request(name, l.opts.Facts.Workspace)
	if len(req) > maxRequest {
		return State{}, l.err(providers.TooLarge, op, name, fmt.Errorf("the request takes %d bytes, more than %d", len(req), maxRequest))
	}
	return l.state(ctx, op, "start", name, append(req, spec.Input.private()...))
}

// takesInput checks the box can take in's secrets.
func (l *Launcher) takesInput(op, name string, in Input) error {
	if len(in.Secrets) > 0 && !l.opts.Facts.TakesSecrets() {
		return l.err(providers.Unsupported, op, name, fmt.Errorf("the box cannot take secrets: its facts say secretsVia %q, and they travel only on a real stdin (\"fd\")", l.opts.Facts.SecretsVia))
	}
	if err := in.validate(); err != nil {
		return l.err(providers.Invalid, op, name, err)
	}
	return nil
}

// Restart ends the running incarnation (TERM, the grace, KILL) and starts
// the next one at once, whatever the restart policy says. An ended launch
// starts again from its last spec, with in's secrets and stdin; a launch
// that held secrets needs them again (Refused without).
func (l *Launcher) Restart(ctx context.Context, name string, in Input) (State, error) {
	const op = "launch.Restart"
	if err := CheckName(name); err != nil {
		return State{}, l.err(providers.Invalid, op, name, err)
	}
	if err := l.takesInput(op, name, in); err != nil {
		return State{}, err
	}
	return l.state(ctx, op, "restart", name, in.private())
}

// Stop ends the launch: TERM to the program's process group, KILL after
// the grace (nil: the launch's own), the before-stop program between the
// two. Of two stops at once, one kills and the other waits for it; both
// return the stopped state. Stopping an ended launch returns its state.
func (l *Launcher) Stop(ctx context.Context, name string, grace *time.Duration) (State, error) {
	const op = "launch.Stop"
	if err := CheckName(name); err != nil {
		return State{}, l.err(providers.Invalid, op, name, err)
	}
	g := "-"
	if grace != nil {
		if *grace < 0 || *grace > MaxGrace {
			return State{}, l.err(providers.Invalid, op, name, fmt.Errorf("grace %v is not 0 to %v", *grace, MaxGrace))
		}
		g = strconv.Itoa(int((*grace + time.Second - 1) / time.Second))
	}
	return l.state(ctx, op, "stop", name, nil, g)
}

// State returns the launch's state as its supervisor last wrote it.
func (l *Launcher) State(ctx context.Context, name string) (State, error) {
	const op = "launch.State"
	if err := CheckName(name); err != nil {
		return State{}, l.err(providers.Invalid, op, name, err)
	}
	return l.state(ctx, op, "state", name, nil)
}

// List returns the states of the box's launches, by name.
func (l *Launcher) List(ctx context.Context) ([]State, error) {
	const op = "launch.List"
	out, err := l.run(ctx, op, "list", "-", nil, maxListOut)
	if err != nil {
		return nil, err
	}
	var states []State
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		st, err := parseState(line)
		if err != nil {
			l.log.Warn("launch: an unreadable state in the box was left out", "box", l.box.ID(), "err", err)
			continue
		}
		states = append(states, st)
	}
	return states, nil
}

// Remove forgets an ended launch: its files in the box go, out.log too.
// A launch that runs is Refused.
func (l *Launcher) Remove(ctx context.Context, name string) error {
	const op = "launch.Remove"
	if err := CheckName(name); err != nil {
		return l.err(providers.Invalid, op, name, err)
	}
	_, err := l.run(ctx, op, "remove", name, nil, maxStateOut)
	return err
}

// Log is a piece of a launch's output. Offsets count from the first byte
// the launch ever wrote; the box keeps only the tail, from Base to End.
type Log struct {
	Base, End int64
	Data      []byte // from max(off, Base)
}

// ReadLog reads up to n bytes (at most MaxLogRead) of the launch's output
// from off.
func (l *Launcher) ReadLog(ctx context.Context, name string, off int64, n int) (Log, error) {
	const op = "launch.ReadLog"
	if err := CheckName(name); err != nil {
		return Log{}, l.err(providers.Invalid, op, name, err)
	}
	n = min(max(n, 1), MaxLogRead)
	out, err := l.run(ctx, op, "log", name, nil, n+64, strconv.FormatInt(max(off, 0), 10), strconv.Itoa(n))
	if err != nil {
		return Log{}, err
	}
	head, data, ok := bytes.Cut(out, []byte("\n"))
	var lg Log
	if ok {
		_, err = fmt.Sscanf(string(head), "%d %d", &lg.Base, &lg.End)
	}
	if !ok || err != nil || lg.Base < 0 || lg.End < lg.Base || int64(len(data)) > lg.End-max(off, lg.Base) || len(data) > n {
		return Log{}, l.err(providers.Unknown, op, name, fmt.Errorf("the box answered a log read with %q...", truncate(out, 64)))
	}
	lg.Data = data
	return lg, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// state runs mode and reads the state it prints.
func (l *Launcher) state(ctx context.Context, op, mode, name string, stdin []byte, args ...string) (State, error) {
	out, err := l.run(ctx, op, mode, name, stdin, maxStateOut, args...)
	if err != nil {
		return State{}, err
	}
	st, err := parseState(bytes.TrimSpace(out))
	if err != nil {
		return State{}, l.err(providers.Unknown, op, name, err)
	}
	return st, nil
}

// run runs one mode of the supervisor in the box and returns what it
// printed (at most max bytes).
func (l *Launcher) run(ctx context.Context, op, mode, name string, stdin []byte, max int, args ...string) ([]byte, error) {
	for try := 0; ; try++ {
		via := l.via()
		out, code, stderr, err := l.exec(ctx, via, mode, name, stdin, max, args)
		if err != nil {
			return nil, l.err(0, op, name, err)
		}
		if via == ViaAgent && (code == 126 || code == 127) && l.opts.Force == "" {
			// The binary is not there (or will not run): sh from now on.
			l.log.Warn("launch: the boxfs binary did not run in the box; the sh supervisor takes over", "box", l.box.ID(), "agent", l.opts.Agent, "exit", code, "stderr", stderr)
			l.mu.Lock()
			l.noAgent = true
			l.mu.Unlock()
			if l.via() != "" && try < 3 {
				continue
			}
		}
		if via == ViaSh && code == exitNoScript && try < 3 {
			l.setInstalled(false)
			continue
		}
		if via == ViaSh && code == 0 {
			l.setInstalled(true)
		}
		if code != 0 {
			return nil, l.err(codeOfExit(code), op, name, fmt.Errorf("%s (exit %d)", strings.TrimSpace(strings.TrimPrefix(stderr, "boxfs-launch: ")), code))
		}
		if out.over {
			return nil, l.err(providers.TooLarge, op, name, fmt.Errorf("the box printed more than %d bytes", max))
		}
		return out.b, nil
	}
}

func (l *Launcher) setInstalled(v bool) {
	l.mu.Lock()
	l.installed = v
	l.mu.Unlock()
}

// exec runs mode once through via.
func (l *Launcher) exec(ctx context.Context, via, mode, name string, stdin []byte, max int, args []string) (*capped, int, string, error) {
	var argv []string
	switch via {
	case ViaAgent:
		argv = append([]string{l.opts.Agent, "agent", "-launch", mode, l.tmpDir, name}, args...)
	default:
		script := supervisorScript
		l.mu.Lock()
		if l.installed {
			script = "" // the box has it: 23 KB less on every command
		}
		l.mu.Unlock()
		argv = append([]string{"sh", "-c", bootScript, "boxfs-launch", script, scriptHash, l.tmpDir, mode, name}, args...)
	}
	out, errb := &capped{max: max}, &capped{max: maxErrOut}
	req := providers.ExecRequest{Argv: argv, Dir: "/", Env: map[string]string{"LC_ALL": "C"}, Stdout: out, Stderr: errb}
	if stdin != nil {
		req.Stdin = bytes.NewReader(stdin)
	}
	p, err := l.opts.Exec(ctx, req)
	if err != nil {
		return nil, 0, "", err
	}
	code, err := p.Wait()
	if err != nil {
		return nil, 0, "", err
	}
	return out, code, string(errb.b), nil
}

// codeOfExit classifies the box side's exit codes.
func codeOfExit(code int) providers.Code {
	switch code {
	case exitInvalid:
		return providers.Invalid
	case exitNotFound:
		return providers.NotFound
	case exitUnsupported:
		return providers.Unsupported
	case exitRefused, exitBusy:
		return providers.Refused
	case exitUnsafe:
		return providers.Unsafe
	case exitPermission:
		return providers.Permission
	}
	return providers.Unknown
}

func (l *Launcher) err(code providers.Code, op, name string, err error) error {
	e := providers.E(code, op, err).WithBox(l.box.ID())
	if name != "" && name != "-" {
		e.WithPath("launch/" + name)
	}
	return e
}

// capped keeps the first max bytes written and notes whether more came.
type capped struct {
	mu   sync.Mutex
	b    []byte
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := c.max - len(c.b); n > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.b = append(c.b, p...)
	return n, nil
}

// wireState is the state file as both supervisors write it (times in
// Unix seconds).
type wireState struct {
	Name           string `json:"name"`
	Phase          Phase  `json:"phase"`
	Incarnation    int    `json:"incarnation"`
	Restarts       int    `json:"restarts"`
	LastExit       *int   `json:"lastExit"`
	PID            *int   `json:"pid"`
	Supervisor     *int   `json:"supervisor"`
	Watchdog       *int   `json:"watchdog"`
	StartedAt      *int64 `json:"startedAt"`
	Since          *int64 `json:"since"`
	BeforeStopExit *int   `json:"beforeStopExit"`
	Secrets        bool   `json:"secrets"`
	Via            string `json:"via"`
	Reason         string `json:"reason"`
}

// parseState reads a state file the box wrote: untrusted, so its phase
// and name are checked.
func parseState(b []byte) (State, error) {
	var w wireState
	if err := json.Unmarshal(b, &w); err != nil {
		return State{}, fmt.Errorf("the box's launch state is not JSON: %w", err)
	}
	switch w.Phase {
	case Starting, Running, Restarting, Exited, GaveUp, Stopping, Stopped, Lost:
	default:
		return State{}, fmt.Errorf("the box's launch state has an unknown phase %q", w.Phase)
	}
	if CheckName(w.Name) != nil {
		return State{}, errors.New("the box's launch state has a bad name")
	}
	st := State{
		Name: w.Name, Phase: w.Phase, Incarnation: w.Incarnation, Restarts: w.Restarts,
		LastExit: w.LastExit, BeforeStopExit: w.BeforeStopExit, Secrets: w.Secrets,
		Via: w.Via, Reason: strings.ReplaceAll(w.Reason, "_", " "),
	}
	deref := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	st.PID, st.Supervisor, st.Watchdog = deref(w.PID), deref(w.Supervisor), deref(w.Watchdog)
	if w.StartedAt != nil {
		st.StartedAt = time.Unix(*w.StartedAt, 0).UTC()
	}
	if w.Since != nil {
		st.Since = time.Unix(*w.Since, 0).UTC()
	}
	return st, nil
}
