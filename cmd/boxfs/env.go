package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
)

// defaultProvider is the provider of boxes whose flags, message and
// configuration name none.
const defaultProvider = "local"

func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "state",
			Usage:   "the state directory: box records, caches, journals, logs (default $XDG_STATE_HOME/boxfs, /var/lib/boxfs for root)",
			EnvVars: []string{"BOXFS_STATE"},
		},
		&cli.StringFlag{
			Name:    "config",
			Usage:   "the configuration file, TOML or YAML (default /etc/boxfs/config.toml for root, else $XDG_CONFIG_HOME/boxfs/config.toml, when it exists)",
			EnvVars: []string{"BOXFS_CONFIG"},
		},
		&cli.StringFlag{
			Name:    "provider",
			Usage:   "the default provider of new boxes (default: the config's, else local)",
			EnvVars: []string{"BOXFS_PROVIDER"},
		},
		&cli.StringFlag{
			Name:    "log-format",
			Usage:   "log format: auto (human text on a terminal, logfmt text otherwise), text, json",
			Value:   "auto",
			EnvVars: []string{"BOXFS_LOG_FORMAT"},
		},
		&cli.StringFlag{
			Name:    "log-level",
			Usage:   "least level logged: debug, info, warn, error (default info for mount, warn for the other commands)",
			EnvVars: []string{"BOXFS_LOG_LEVEL"},
		},
	}
}

// env is what a command works with: the resolved global settings.
type env struct {
	state       string // absolute state directory
	cfg         *Config
	provider    string // default provider
	logFormat   string
	logLevel    string
	log         *slog.Logger
	stdout      io.Writer
	stderr      io.Writer
	attrTimeout time.Duration
	opTimeout   time.Duration
}

// defaultStateDir is $XDG_STATE_HOME/boxfs, /var/lib/boxfs for root.
func defaultStateDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/lib/boxfs", nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "boxfs"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no state directory: set --state, XDG_STATE_HOME or HOME")
	}
	return filepath.Join(home, ".local", "state", "boxfs"), nil
}

// newEnv resolves the global flags and reads the configuration. daemon
// selects the mount's defaults (info-level logs).
func newEnv(c *cli.Context, daemon bool) (*env, error) {
	e := &env{
		stdout:    c.App.Writer,
		stderr:    c.App.ErrWriter,
		logFormat: c.String("log-format"),
		logLevel:  c.String("log-level"),
	}
	switch e.logFormat {
	case "auto", "text", "json":
	default:
		return nil, usagef("--log-format %q: want auto, text or json", e.logFormat)
	}
	if e.logLevel == "" {
		e.logLevel = "warn"
		if daemon {
			e.logLevel = "info"
		}
	}
	level, err := parseLevel(e.logLevel)
	if err != nil {
		return nil, err
	}
	e.log = newLogger(e.stderr, e.logFormat, level)

	state := c.String("state")
	if state == "" {
		if state, err = defaultStateDir(); err != nil {
			return nil, usagef("%v", err)
		}
	}
	if e.state, err = filepath.Abs(state); err != nil {
		return nil, usagef("--state %q: %v", state, err)
	}
	// --config "" (set, empty) reads none; unset reads the default file
	// if it exists.
	file, explicit := c.String("config"), c.IsSet("config")
	if !explicit {
		file = defaultConfigFile()
	}
	if e.cfg, err = loadConfig(file, explicit); err != nil {
		return nil, err
	}
	if warn := e.cfg.exposedSecret(); warn != "" {
		e.log.Warn(warn)
	}
	e.provider = c.String("provider")
	if e.provider == "" {
		e.provider = e.cfg.Provider
	}
	if e.provider == "" {
		e.provider = defaultProvider
	}
	if !slices.Contains(providers.Names(), e.provider) {
		return nil, usagef("--provider %q: unknown provider (have %s)", e.provider, strings.Join(providers.Names(), ", "))
	}
	e.attrTimeout, _ = e.cfg.attrTimeout()
	e.opTimeout, _ = e.cfg.opTimeout()
	return e, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func (e *env) makeStateDir() error {
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		return providers.E(0, "state", err).WithPath(e.state)
	}
	return nil
}

// boxOptions are the box manager's options for this state directory and
// configuration: providers opened from the registry with their options,
// the ledger as the meter when prices are configured, declared boxes, the
// agent binary. daemon says the mount asks (it logs what it decides).
func (e *env) boxOptions(daemon bool) (boxes.Options, error) {
	declared, err := e.cfg.declared()
	if err != nil {
		return boxes.Options{}, err
	}
	opts := boxes.Options{
		StateDir:        e.state,
		DefaultProvider: e.provider,
		AttrTimeout:     e.attrTimeout,
		OpTimeout:       e.opTimeout,
		Declared:        declared,
		Logger:          e.log,
		OpenProvider: func(name string) (providers.Provider, error) {
			dir := filepath.Join(e.state, "providers", name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, providers.E(0, "providers.Open", err).WithPath(dir)
			}
			return providers.Open(name, providers.Config{StateDir: dir, Options: e.cfg.providerOptions(name), Logger: e.log})
		},
	}
	opts.AgentBinary, opts.AgentOff = e.agentBinary(daemon)
	if ps := e.cfg.prices(); len(ps) > 0 {
		led, err := ledger.Open(ledger.Config{StateDir: e.state, Prices: ps, Logger: e.log})
		if err != nil {
			return boxes.Options{}, err
		}
		opts.Meter = led
	}
	return opts, nil
}

var agentOnce sync.Once

// agentBinary is the binary uploaded into boxes for the agent channel, or
// "" and why the channel is off when this binary cannot serve as the
// agent (off is "" when the configuration turned it off).
func (e *env) agentBinary(daemon bool) (bin, off string) {
	switch a := e.cfg.Agent; a {
	case "off":
		return "", ""
	case "":
		exe, err := agent.SelfBinary()
		if err != nil {
			off = agentOffNote(err)
			level := slog.LevelDebug
			if daemon {
				level = slog.LevelWarn
			}
			agentOnce.Do(func() {
				e.log.Log(context.Background(), level, off)
			})
			return "", off
		}
		return exe, ""
	default:
		return a, ""
	}
}

// agentOffNote says that the agent channel is off because of err (from
// agent.SelfBinary), what that costs and how to build a binary that has
// it: the mount's terminal line, its log line and facts.json's agentOff.
func agentOffNote(err error) string {
	return fmt.Sprintf("agent channel off (%s): boxes without a native file API, such as Docker's, are reached by one exec per operation and show their own changes only after the attribute timeout; "+
		"build with CGO_ENABLED=0 go build ./cmd/boxfs for the whole boxfs", strings.TrimPrefix(err.Error(), "agent: "))
}

// noteAgentOff says on the terminal, in one line, when this binary cannot
// serve as the agent in every box: not at all (the mount runs without the
// agent channel), or, dynamically linked (built with cgo on), only in
// boxes whose C library runs it. A developer who built boxfs the usual way
// learns it at mount, not from the log. served says this process is the
// daemon, whose log is the terminal too: its log line is then not written
// again.
func (e *env) noteAgentOff(served bool) {
	if e.cfg.Agent != "" {
		return
	}
	exe, err := agent.SelfBinary()
	if err != nil {
		fmt.Fprintf(e.stderr, "boxfs: %s\n", agentOffNote(err))
		if served {
			agentOnce.Do(func() {})
		}
		return
	}
	if interp, glibc, err := agent.Linking(exe); err == nil && interp != "" {
		fmt.Fprintf(e.stderr, "boxfs: %s\n", dynamicNote(interp, glibc))
	}
}

// dynamicNote says where a dynamically linked boxfs runs as the agent.
func dynamicNote(interp, glibc string) string {
	needs := "the GNU C library"
	if glibc != "" {
		needs += " " + glibc + " or newer"
	}
	return fmt.Sprintf("this boxfs is dynamically linked (built with cgo): the agent channel runs only in boxes with %s at %s; "+
		"others (musl boxes such as Alpine's) are reached without it, slower and staler, and their facts.json says agentOff; "+
		"build with CGO_ENABLED=0 go build ./cmd/boxfs for an agent that runs in every box", needs, interp)
}
