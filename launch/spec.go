package launch

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// Defaults and bounds of a Spec.
const (
	DefaultBurst       = 5 // restarts allowed in DefaultBurstWindow
	DefaultBurstWindow = 60 * time.Second
	DefaultGrace       = 5 * time.Second // between TERM and KILL at a stop
	MaxGrace           = 600 * time.Second
	DefaultBeforeStop  = 30 * time.Second // the bound of the before-stop program
	DefaultLogMax      = 8 << 20          // bytes of output kept: the tail
	MinLogMax          = 64 << 10
	MaxLogMax          = 1 << 30
	MaxSecrets         = 64 << 10 // bytes of secrets, as the fd carries them
	MaxStdin           = 64 << 10
	maxRequest         = 256 << 10 // the escaped request without secrets and stdin
)

// Spec is what a launch runs and how it is kept alive.
type Spec struct {
	// Argv is the program and its arguments, run as they are (no shell).
	Argv []string
	// Dir is the program's working directory in the box; "" is the
	// box's workspace.
	Dir string
	// Env is added to the program's environment (PATH, HOME, LANG,
	// BOXFS_INCARNATION). Names shaped like keys (*_KEY, *_TOKEN,
	// *_SECRET, *PASSWORD*, *CREDENTIAL*) and loader or shell variables
	// (LD_*, BASH_ENV ...) are refused: secrets go in Secrets.
	Env map[string]string
	// Inherit names variables of the box's own environment the program
	// gets too (none by default); the names follow Env's rules.
	Inherit []string
	// NoRestart leaves the program ended when it exits, whatever its code.
	NoRestart bool
	// Terminal are exit codes that end the launch (as 0 does) instead of
	// restarting it.
	Terminal []int
	// Burst restarts are allowed within BurstWindow; one more ends the
	// launch as gave_up. Zero: DefaultBurst in DefaultBurstWindow.
	Burst       int
	BurstWindow time.Duration
	// Grace is how long a stop waits after TERM before KILL (0 to
	// MaxGrace); nil is DefaultGrace.
	Grace *time.Duration
	// User runs the program as this user of the box (a name or a uid),
	// resolved in the box; "" is the launcher's own.
	User string
	// BeforeStop, when set, runs once at each stop, after the drain and
	// before the final kill, within BeforeStopMax (default
	// DefaultBeforeStop); its exit is logged and never fails the stop.
	BeforeStop    []string
	BeforeStopMax time.Duration
	// LogMax bounds out.log: the tail of the output is kept (default
	// DefaultLogMax).
	LogMax int64
	// Input is what the box keeps only in its supervisor's memory.
	Input
}

// Input is what a launch's incarnations get that travels once, on the
// stdin of the command that starts the supervisor, and is kept only in the
// supervisor's memory: never in argv, env, a file, the state or a log.
type Input struct {
	// Secrets reach every incarnation on an inherited descriptor (its
	// number in BOXFS_SECRETS_FD) as NAME=VALUE records each ended by a
	// NUL byte, as /proc/PID/environ holds them (at most MaxSecrets bytes).
	Secrets map[string]string
	// Stdin is each incarnation's standard input (at most MaxStdin bytes).
	Stdin []byte
}

func (in Input) validate() error {
	if n := secretsSize(in.Secrets); n > MaxSecrets {
		return fmt.Errorf("secrets take %d bytes, more than %d", n, MaxSecrets)
	}
	for k, v := range in.Secrets {
		if !providers.ValidEnvName(k) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("secret %q: a variable name, and a value without NUL", k)
		}
	}
	if len(in.Stdin) > MaxStdin {
		return fmt.Errorf("stdin is %d bytes, more than %d", len(in.Stdin), MaxStdin)
	}
	return nil
}

// Phase is where a launch is in its life.
type Phase string

// The phases a launch's state says.
const (
	Starting   Phase = "starting"   // the supervisor runs; the program not yet
	Running    Phase = "running"    // an incarnation runs
	Restarting Phase = "restarting" // the program exited; the next one starts soon
	Exited     Phase = "exited"     // ended: exit 0, a terminal code, or restart off
	GaveUp     Phase = "gave_up"    // ended: more restarts than the burst allows
	Stopping   Phase = "stopping"   // a stop is draining the program
	Stopped    Phase = "stopped"    // ended by a stop
	Lost       Phase = "lost"       // its supervisor died and could not be brought back
)

// Ended reports whether nothing runs for the launch any more (its
// program may still, for a lost one).
func (p Phase) Ended() bool {
	switch p {
	case Exited, GaveUp, Stopped, Lost:
		return true
	}
	return false
}

// State is a launch's state as its supervisor wrote it in the box.
type State struct {
	Name        string `json:"name"`
	Phase       Phase  `json:"phase"`
	Incarnation int    `json:"incarnation"` // 1 for the first program run
	Restarts    int    `json:"restarts"`
	// LastExit is the last incarnation's exit code (128+n for signal n);
	// nil when none ended or its code is not known.
	LastExit *int `json:"lastExit"`
	// PID leads the running program's process group (the last one's,
	// once it ended); 0 for none yet.
	PID        int       `json:"pid"`
	Supervisor int       `json:"supervisor"`
	Watchdog   int       `json:"watchdog"`
	StartedAt  time.Time `json:"startedAt,omitzero"` // when the launch started
	Since      time.Time `json:"since,omitzero"`     // when it entered its phase
	// BeforeStopExit is the before-stop program's exit at the last stop.
	BeforeStopExit *int   `json:"beforeStopExit,omitempty"`
	Secrets        bool   `json:"secrets"` // the launch holds secrets
	Via            string `json:"via"`     // the supervisor: "agent" or "sh"
	Reason         string `json:"reason,omitempty"`
}

// CheckName checks a launch's name: 1 to 64 of [A-Za-z0-9._-], not
// starting with '.' or '-'.
func CheckName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("a launch name is 1 to 64 bytes, not %d", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("launch name %q: only letters, digits, '.', '_' and '-'", name)
		}
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("launch name %q starts with %q", name, name[0])
	}
	return nil
}

// refusedEnv reports why an environment name may not be given to a
// launch, or "".
func refusedEnv(name string) string {
	if !providers.ValidEnvName(name) {
		return "not a variable name"
	}
	u := strings.ToUpper(name)
	switch {
	case strings.HasSuffix(u, "_KEY"), strings.HasSuffix(u, "_TOKEN"), strings.HasSuffix(u, "_SECRET"),
		strings.Contains(u, "PASSWORD"), strings.Contains(u, "CREDENTIAL"):
		return "shaped like a key: pass it in secrets, which never reach the environment"
	case strings.HasPrefix(u, "LD_"), strings.HasPrefix(u, "BASH_FUNC_"), strings.HasPrefix(u, "BOXFS_"):
		return "a loader, shell or boxfs variable"
	}
	switch u {
	case "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS4", "PROMPT_COMMAND", "CDPATH",
		"GLOBIGNORE", "GCONV_PATH", "MALLOC_CHECK_", "NODE_OPTIONS", "PERL5OPT", "PYTHONSTARTUP", "RUBYOPT":
		return "a loader or shell variable"
	}
	return ""
}

// Validate checks the spec on the host; the box checks what only it
// knows (the user, ptrace_scope, the tools it needs).
func (s Spec) Validate() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return fmt.Errorf("no program given")
	}
	if strings.Contains(s.Argv[0], "=") {
		return fmt.Errorf("the program %q holds '='", s.Argv[0])
	}
	for _, a := range append(slices.Clone(s.Argv), s.BeforeStop...) {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("an argument holds a NUL byte")
		}
	}
	if s.Dir != "" && (!strings.HasPrefix(s.Dir, "/") || strings.IndexByte(s.Dir, 0) >= 0) {
		return fmt.Errorf("dir %q is not an absolute path", s.Dir)
	}
	for k, v := range s.Env {
		if why := refusedEnv(k); why != "" {
			return fmt.Errorf("env %s: %s", k, why)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("env %s holds a NUL byte", k)
		}
	}
	for _, k := range s.Inherit {
		if why := refusedEnv(k); why != "" {
			return fmt.Errorf("inherit %s: %s", k, why)
		}
	}
	for _, c := range s.Terminal {
		if c < 0 || c > 255 {
			return fmt.Errorf("terminal exit code %d is not 0 to 255", c)
		}
	}
	if s.Burst < 0 || s.Burst > 1000 || s.BurstWindow < 0 || s.BurstWindow > 24*time.Hour {
		return fmt.Errorf("burst %d/%v: at most 1000 restarts in at most 24h", s.Burst, s.BurstWindow)
	}
	if s.Grace != nil && (*s.Grace < 0 || *s.Grace > MaxGrace) {
		return fmt.Errorf("grace %v is not 0 to %v", *s.Grace, MaxGrace)
	}
	if s.User != "" && !validUser(s.User) {
		return fmt.Errorf("user %q is not a user name or uid", s.User)
	}
	if s.BeforeStopMax < 0 || s.BeforeStopMax > MaxGrace {
		return fmt.Errorf("before-stop bound %v is not 0 to %v", s.BeforeStopMax, MaxGrace)
	}
	if s.LogMax != 0 && (s.LogMax < MinLogMax || s.LogMax > MaxLogMax) {
		return fmt.Errorf("log size %d is not %d to %d bytes", s.LogMax, MinLogMax, MaxLogMax)
	}
	return s.Input.validate()
}

func validUser(u string) bool {
	if len(u) > 32 {
		return false
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return u != "" && u[0] != '-'
}

func secretsSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + 1 + len(v) + 1
	}
	return n
}

// secretRecords renders secrets as the descriptor carries them:
// NAME=VALUE records each ended by a NUL byte, sorted by name.
func secretRecords(m map[string]string) []byte {
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, m[k]...)
		b = append(b, 0)
	}
	return b
}

// request renders the start request the box reads on its stdin: one
// "key value" line per item, values escaped (shell.Escape) so no line
// holds a newline, secrets and stdin last, then "end".
func (s Spec) request(name, workspace string) []byte {
	var b strings.Builder
	line := func(k, v string) { b.WriteString(k + " " + v + "\n") }
	line("boxfs-launch", "1")
	line("name", name)
	dir := s.Dir
	if dir == "" {
		dir = workspace
	}
	if dir == "" {
		dir = "/"
	}
	line("dir", shell.Escape(dir))
	for _, a := range s.Argv {
		line("argv", shell.Escape(a))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		line("env", k+" "+shell.Escape(s.Env[k]))
	}
	for _, k := range s.Inherit {
		line("inherit", k)
	}
	line("restart", map[bool]string{true: "off", false: "on"}[s.NoRestart])
	if len(s.Terminal) > 0 {
		codes := make([]string, len(s.Terminal))
		for i, c := range s.Terminal {
			codes[i] = strconv.Itoa(c)
		}
		line("terminal", strings.Join(codes, " "))
	}
	n, w := s.Burst, s.BurstWindow
	if n == 0 {
		n = DefaultBurst
	}
	if w == 0 {
		w = DefaultBurstWindow
	}
	line("burst", fmt.Sprintf("%d %d", n, max(1, int(w.Round(time.Second)/time.Second))))
	g := DefaultGrace
	if s.Grace != nil {
		g = *s.Grace
	}
	line("grace", strconv.Itoa(int((g+time.Second-1)/time.Second)))
	if s.User != "" {
		line("user", s.User)
	}
	for _, a := range s.BeforeStop {
		line("before", shell.Escape(a))
	}
	bm := s.BeforeStopMax
	if bm == 0 {
		bm = DefaultBeforeStop
	}
	line("beforemax", strconv.Itoa(int((bm+time.Second-1)/time.Second)))
	lm := s.LogMax
	if lm == 0 {
		lm = DefaultLogMax
	}
	line("logmax", strconv.FormatInt(lm, 10))
	if len(s.Secrets) > 0 {
		line("hassecrets", "1")
	}
	return []byte(b.String())
}

// private renders the request's last lines, which the box keeps only in
// its supervisor's memory: the secrets and stdin, then "end".
func (in Input) private() []byte {
	var b strings.Builder
	if len(in.Secrets) > 0 {
		b.WriteString("secrets " + shell.Escape(string(secretRecords(in.Secrets))) + "\n")
	}
	if len(in.Stdin) > 0 {
		b.WriteString("stdin " + shell.Escape(string(in.Stdin)) + "\n")
	}
	b.WriteString("end\n")
	return []byte(b.String())
}
