package launch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StartKeys are the keys ParseStart takes, for help texts.
var StartKeys = []string{"restart", "terminal", "burst", "grace", "user", "dir", "env.NAME", "inherit", "before-stop", "before-stop-max", "log"}

// ParseStart parses the words of a start message after its verb:
// key=value words, then "--" and the program's argv:
//
//	restart=on|off terminal=3,4 burst=5/60s grace=5s user=U dir=/path
//	env.NAME=VALUE inherit=NAME,NAME before-stop='CMD LINE'
//	before-stop-max=30s log=8m -- ARGV...
//
// before-stop is a command line for the box's sh; log is a size in bytes
// with an optional k, m or g.
func ParseStart(words []string) (Spec, error) {
	var s Spec
	i := slices.Index(words, "--")
	if i < 0 {
		return s, fmt.Errorf("no program: start [key=value ...] -- PROGRAM [ARG ...]")
	}
	s.Argv = slices.Clone(words[i+1:])
	seen := map[string]bool{}
	for _, w := range words[:i] {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return s, fmt.Errorf("%q is not key=value (keys: %s)", w, strings.Join(StartKeys, ", "))
		}
		if seen[k] {
			return s, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		if err := s.setKey(k, v); err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

func (s *Spec) setKey(k, v string) error {
	var err error
	switch {
	case strings.HasPrefix(k, "env."):
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[strings.TrimPrefix(k, "env.")] = v
	case k == "restart":
		switch v {
		case "on":
		case "off":
			s.NoRestart = true
		default:
			return fmt.Errorf("%q is not on or off", v)
		}
	case k == "terminal":
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("%q is not a list of exit codes", v)
			}
			s.Terminal = append(s.Terminal, n)
		}
	case k == "burst":
		n, w, ok := strings.Cut(v, "/")
		if s.Burst, err = strconv.Atoi(n); err != nil || !ok || s.Burst < 1 {
			return fmt.Errorf("%q is not N/DURATION (5/60s)", v)
		}
		s.BurstWindow, err = duration(w)
	case k == "grace":
		var g time.Duration
		g, err = duration(v)
		s.Grace = &g
	case k == "user":
		s.User = v
	case k == "dir":
		s.Dir = v
	case k == "inherit":
		s.Inherit = strings.Split(v, ",")
	case k == "before-stop":
		s.BeforeStop = []string{"sh", "-c", v}
	case k == "before-stop-max":
		s.BeforeStopMax, err = duration(v)
	case k == "log":
		s.LogMax, err = size(v)
	default:
		return fmt.Errorf("unknown key (keys: %s)", strings.Join(StartKeys, ", "))
	}
	return err
}

// duration reads "5s", "2m" or a number of seconds.
func duration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration (5s, 2m)", v)
	}
	return d, nil
}

// size reads "512k", "8m", "1g" or a number of bytes.
func size(v string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "k"):
		mult, v = 1<<10, strings.TrimSuffix(v, "k")
	case strings.HasSuffix(v, "m"):
		mult, v = 1<<20, strings.TrimSuffix(v, "m")
	case strings.HasSuffix(v, "g"):
		mult, v = 1<<30, strings.TrimSuffix(v, "g")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > MaxLogMax/mult {
		return 0, fmt.Errorf("%q is not a size (8m)", v)
	}
	return n * mult, nil
}

// ParseSecrets reads what is written to a launch's secrets file:
// NAME=VALUE records, ended by NUL bytes when the text holds one (values
// may then hold newlines), else by newlines. Blank lines are skipped.
func ParseSecrets(b []byte) (map[string]string, error) {
	sep := "\n"
	if strings.IndexByte(string(b), 0) >= 0 {
		sep = "\x00"
	}
	out := map[string]string{}
	for _, rec := range strings.Split(string(b), sep) {
		if sep == "\n" {
			rec = strings.TrimSuffix(rec, "\r")
		}
		if strings.TrimSpace(rec) == "" {
			continue
		}
		k, v, ok := strings.Cut(rec, "=")
		if !ok {
			return nil, fmt.Errorf("a secret is NAME=VALUE; one record has no '='")
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("secret %s given twice", k)
		}
		out[k] = v
	}
	if err := (Input{Secrets: out}).validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// StatusLine renders a state as a launch's ctl reads: key=value words.
func StatusLine(st State) string {
	f := []string{"phase=" + string(st.Phase), "incarnation=" + strconv.Itoa(st.Incarnation), "restarts=" + strconv.Itoa(st.Restarts)}
	if st.LastExit != nil {
		f = append(f, "last_exit="+strconv.Itoa(*st.LastExit))
	}
	if st.PID != 0 {
		f = append(f, "pid="+strconv.Itoa(st.PID))
	}
	if st.Via != "" {
		f = append(f, "via="+st.Via)
	}
	if st.Secrets {
		f = append(f, "secrets=yes")
	}
	return strings.Join(f, " ") + "\n"
}
