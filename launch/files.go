package launch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/boxfs/boxfs/internal/shell"
)

// The files of a launch in the box (SPOOL/NAME/), which both supervisors
// read and write the same way (supervisor.sh describes each one): a
// launch started by one can be stopped, read or brought back by the other.

// boxConfig is a launch's config file: the request without its secrets
// and stdin, plus what the box resolved at the start.
type boxConfig struct {
	dir        string
	argv       []string
	env        []string // NAME=VALUE
	inherit    []string
	restart    bool
	terminal   []int
	burstN     int
	burstT     int // seconds
	grace      int // seconds
	user       string
	uid, gid   string // resolved at the start
	home, drop string
	before     []string
	beforeMax  int // seconds
	logMax     int64
	secrets    bool
}

// parseConfig reads a config (or a request's lines before "end").
func parseConfig(b []byte) (boxConfig, error) {
	c := boxConfig{dir: "/", restart: true, burstN: DefaultBurst, burstT: 60, grace: 5, beforeMax: 30, logMax: DefaultLogMax}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxRequest+MaxSecrets*4+MaxStdin*4)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if err := c.set(k, v); err != nil {
			return c, fmt.Errorf("config %s: %w", k, err)
		}
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if len(c.argv) == 0 {
		return c, fmt.Errorf("config: no program")
	}
	return c, nil
}

func (c *boxConfig) set(k, v string) error {
	var err error
	num := func(p *int) {
		var n int
		n, err = strconv.Atoi(v)
		if err == nil && n < 0 {
			err = fmt.Errorf("%d is negative", n)
		}
		*p = n
	}
	dec := func() string {
		var s string
		s, err = shell.Unescape(v)
		return s
	}
	switch k {
	case "dir":
		c.dir = dec()
	case "argv":
		c.argv = append(c.argv, dec())
	case "before":
		c.before = append(c.before, dec())
	case "env":
		name, val, _ := strings.Cut(v, " ")
		v = val
		c.env = append(c.env, name+"="+dec())
	case "inherit":
		c.inherit = append(c.inherit, v)
	case "restart":
		c.restart = v != "off"
	case "terminal":
		for _, f := range strings.Fields(v) {
			n, e := strconv.Atoi(f)
			if e != nil {
				return e
			}
			c.terminal = append(c.terminal, n)
		}
	case "burst":
		n, t, _ := strings.Cut(v, " ")
		v = n
		num(&c.burstN)
		v = t
		num(&c.burstT)
	case "grace":
		num(&c.grace)
	case "beforemax":
		num(&c.beforeMax)
	case "logmax":
		c.logMax, err = strconv.ParseInt(v, 10, 64)
	case "user":
		c.user = v
	case "uid":
		c.uid = v
	case "gid":
		c.gid = v
	case "home":
		c.home = v
	case "drop":
		c.drop = v
	case "hassecrets":
		c.secrets = true
	}
	return err
}

// vars is the vars file: the state as the supervisors read it back. Every
// field but phase, inc and restarts is "-" when unknown; pids go with
// their start times (field 22 of /proc/PID/stat), so a saved pid is never
// taken for another process that got its number later.
type vars struct {
	phase               Phase
	inc, restarts       int
	lastExit            string
	pid, pidStart       string
	sup, supStart       string
	dog, dogStart       string
	started, since      string
	runner, runnerStart string
	beforeStopExit, why string
}

func newVars() vars {
	return vars{phase: "new", lastExit: "-", pid: "-", pidStart: "-", sup: "-", supStart: "-", dog: "-", dogStart: "-",
		started: "-", since: "-", runner: "-", runnerStart: "-", beforeStopExit: "-", why: "-"}
}

func parseVars(b []byte) vars {
	v := newVars()
	f := strings.Fields(string(b))
	if len(f) < 16 {
		return v
	}
	v.phase = Phase(f[0])
	v.inc, _ = strconv.Atoi(f[1])
	v.restarts, _ = strconv.Atoi(f[2])
	v.lastExit, v.pid, v.pidStart, v.sup, v.supStart, v.dog, v.dogStart = f[3], f[4], f[5], f[6], f[7], f[8], f[9]
	v.started, v.since, v.runner, v.runnerStart, v.beforeStopExit, v.why = f[10], f[11], f[12], f[13], f[14], f[15]
	return v
}

func (v vars) line() string {
	return fmt.Sprintf("%s %d %d %s %s %s %s %s %s %s %s %s %s %s %s %s\n", v.phase, v.inc, v.restarts, v.lastExit,
		v.pid, v.pidStart, v.sup, v.supStart, v.dog, v.dogStart, v.started, v.since, v.runner, v.runnerStart, v.beforeStopExit, v.why)
}

// stateJSON renders the state file from v.
func (v vars) stateJSON(name string, secrets bool, via string) []byte {
	num := func(s string) *int {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil
		}
		return &n
	}
	unix := func(s string) *int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil
		}
		return &n
	}
	w := wireState{Name: name, Phase: v.phase, Incarnation: v.inc, Restarts: v.restarts,
		LastExit: num(v.lastExit), PID: num(v.pid), Supervisor: num(v.sup), Watchdog: num(v.dog),
		StartedAt: unix(v.started), Since: unix(v.since), BeforeStopExit: num(v.beforeStopExit),
		Secrets: secrets, Via: via}
	if v.why != "-" {
		w.Reason = v.why
	}
	b, _ := json.Marshal(w)
	return append(b, '\n')
}
