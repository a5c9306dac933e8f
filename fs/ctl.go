package fs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/boxfs/boxfs/providers"
)

// ctlMsg is one parsed ctl message: a verb, its positional words and its
// key=value pairs in the order given.
type ctlMsg struct {
	verb string
	args []string
	kv   []kv
}

type kv struct{ k, v string }

// splitMessages cuts a write into newline-terminated messages. A final
// message without its newline is taken too (printf without \n); empty lines
// and lines starting with # are skipped.
func splitMessages(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out
}

// tokenize splits a message into words: blanks separate words, and single
// or double quotes keep blanks inside one (key='a b' or "a b"); a backslash
// inside double quotes escapes the next byte.
func tokenize(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false // a word is open
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, fmt.Errorf("unterminated \" quote")
			}
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// parseMessage parses one message: the verb, then words, where a word with
// '=' (not at its start) is a key=value pair.
func parseMessage(line string) (ctlMsg, error) {
	words, err := tokenize(line)
	if err != nil {
		return ctlMsg{}, err
	}
	if len(words) == 0 {
		return ctlMsg{}, fmt.Errorf("empty message")
	}
	m := ctlMsg{verb: words[0]}
	for _, w := range words[1:] {
		if k, v, ok := strings.Cut(w, "="); ok && k != "" {
			m.kv = append(m.kv, kv{k, v})
		} else {
			m.args = append(m.args, w)
		}
	}
	return m, nil
}

// checkName checks a box name: 1..63 bytes of UTF-8, no '/', no NUL, no
// leading '.', not one of the root's own file names.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a box name is needed")
	case len(name) > 63:
		return fmt.Errorf("box name %q is longer than 63 bytes", name)
	case strings.ContainsAny(name, "/\x00\n"):
		return fmt.Errorf("box name %q holds '/', NUL or a newline", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("box name %q starts with '.'", name)
	case !utf8.ValidString(name):
		return fmt.Errorf("box name %q is not UTF-8", name)
	case name == "ctl" || name == "err":
		return fmt.Errorf("box name %q is taken by the root's own file", name)
	}
	return nil
}

// rootCmd is a parsed root ctl message.
type rootCmd struct {
	verb     string // new, attach, forget
	name     string
	provider string
	id       string
	spec     providers.Spec
}

// parseRootCtl parses every message of a write to the root ctl before any
// runs: one bad message fails the whole write (Invalid).
func parseRootCtl(text string) ([]rootCmd, error) {
	const op = "ctl"
	var out []rootCmd
	lines := splitMessages(text)
	if len(lines) == 0 {
		return nil, providers.Errorf(providers.Invalid, op, "no message")
	}
	for _, line := range lines {
		m, err := parseMessage(line)
		if err != nil {
			return nil, providers.Errorf(providers.Invalid, op, "%q: %v", line, err)
		}
		c, err := rootCmdOf(m)
		if err != nil {
			return nil, providers.Errorf(providers.Invalid, op, "%q: %v", line, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func rootCmdOf(m ctlMsg) (rootCmd, error) {
	c := rootCmd{verb: m.verb}
	switch m.verb {
	case "new", "attach", "forget":
	default:
		return c, fmt.Errorf("unknown verb %q (root ctl takes new, attach, forget)", m.verb)
	}
	if len(m.args) != 1 {
		return c, fmt.Errorf("%s takes one box name, got %d words", m.verb, len(m.args))
	}
	c.name = m.args[0]
	if err := checkName(c.name); err != nil {
		return c, err
	}
	switch m.verb {
	case "forget":
		if len(m.kv) > 0 {
			return c, fmt.Errorf("forget takes no keys")
		}
	case "attach":
		for _, p := range m.kv {
			switch p.k {
			case "provider":
				c.provider = p.v
			case "id":
				c.id = p.v
			default:
				return c, fmt.Errorf("attach: unknown key %q (takes provider=, id=)", p.k)
			}
		}
		if c.provider == "" || c.id == "" {
			return c, fmt.Errorf("attach needs provider= and id=")
		}
	case "new":
		var err error
		c.provider, c.spec, err = specOf(m.kv)
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// specOf reads the keys of a new message (and of a config environment) into
// a Spec. Unknown keys and malformed values are errors; whether the provider
// can honour a field is the provider's to say.
func specOf(pairs []kv) (provider string, s providers.Spec, err error) {
	seen := map[string]bool{}
	for _, p := range pairs {
		if seen[p.k] && !strings.HasPrefix(p.k, "env.") && !strings.HasPrefix(p.k, "label.") {
			return "", s, fmt.Errorf("key %q given twice", p.k)
		}
		seen[p.k] = true
		switch {
		case p.k == "provider":
			provider = p.v
		case p.k == "image":
			s.Image = p.v
		case p.k == "snapshot":
			s.Snapshot = p.v
		case p.k == "region":
			s.Region = p.v
		case p.k == "gpu":
			s.GPU = p.v
		case p.k == "user":
			s.User = p.v
		case p.k == "workspace":
			s.Workspace = p.v
		case p.k == "isolation":
			s.Isolation = providers.Isolation(p.v)
		case p.k == "lifetime":
			d, err := parseDuration(p.v)
			if err != nil {
				return "", s, fmt.Errorf("lifetime=%q: %v", p.v, err)
			}
			s.Lifetime = d
		case p.k == "cpus":
			f, err := strconv.ParseFloat(p.v, 64)
			if err != nil || f <= 0 {
				return "", s, fmt.Errorf("cpus=%q is not a positive number", p.v)
			}
			s.CPUs = f
		case p.k == "memory":
			mb, err := parseMegabytes(p.v)
			if err != nil {
				return "", s, fmt.Errorf("memory=%q: %v", p.v, err)
			}
			s.MemoryMB = mb
		case p.k == "network":
			switch p.v {
			case "open", "none":
				s.Network.Mode = providers.NetworkMode(p.v)
			case "":
				return "", s, fmt.Errorf("network= needs open, none or a comma list of domains")
			default:
				s.Network.Mode = providers.NetworkAllowlist
				s.Network.Allow = strings.Split(p.v, ",")
			}
		case p.k == "ports":
			for _, f := range strings.Split(p.v, ",") {
				n, err := strconv.Atoi(f)
				if err != nil {
					return "", s, fmt.Errorf("ports=%q: %q is not a number", p.v, f)
				}
				s.Ports = append(s.Ports, n)
			}
		case strings.HasPrefix(p.k, "env."):
			if s.Env == nil {
				s.Env = map[string]string{}
			}
			s.Env[strings.TrimPrefix(p.k, "env.")] = p.v
		case strings.HasPrefix(p.k, "label."):
			if s.Labels == nil {
				s.Labels = map[string]string{}
			}
			s.Labels[strings.TrimPrefix(p.k, "label.")] = p.v
		default:
			return "", s, fmt.Errorf("unknown key %q", p.k)
		}
	}
	if err := s.Validate(); err != nil {
		var e *providers.Error
		if errors.As(err, &e) && e.Err != nil {
			return "", s, e.Err
		}
		return "", s, err
	}
	return provider, s, nil
}

// parseDuration takes a Go duration ("90m", "2h") or plain seconds ("300").
func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("must be positive")
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("not a duration (use 300, 90m or 2h)")
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive")
	}
	return d, nil
}

// parseMegabytes takes megabytes ("512"), or a number with m/g ("512m", "2g").
func parseMegabytes(v string) (int, error) {
	mult := 1
	s := strings.ToLower(v)
	switch {
	case strings.HasSuffix(s, "g"):
		mult, s = 1024, strings.TrimSuffix(s, "g")
	case strings.HasSuffix(s, "m"):
		s = strings.TrimSuffix(s, "m")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("not a size (use 512, 512m or 2g)")
	}
	return n * mult, nil
}

// boxVerbs are what a box's ctl takes.
var boxVerbs = map[string]string{
	"destroy": "end the box and remove it",
	"release": "push dirty files, then stop presenting the box (it keeps running)",
	"flush":   "push dirty files to the box",
	"sync":    "push dirty files, then re-read the box's listing",
	"kill":    "kill the box's running commands",
}

// parseBoxCtl parses every message of a write to a box's ctl.
func parseBoxCtl(text string) ([]string, error) {
	const op = "ctl"
	lines := splitMessages(text)
	if len(lines) == 0 {
		return nil, providers.Errorf(providers.Invalid, op, "no message")
	}
	var verbs []string
	for _, line := range lines {
		m, err := parseMessage(line)
		if err != nil {
			return nil, providers.Errorf(providers.Invalid, op, "%q: %v", line, err)
		}
		if _, ok := boxVerbs[m.verb]; !ok {
			return nil, providers.Errorf(providers.Invalid, op, "unknown verb %q (a box's ctl takes destroy, release, flush, sync, kill)", m.verb)
		}
		if len(m.args) > 0 || len(m.kv) > 0 {
			return nil, providers.Errorf(providers.Invalid, op, "%s takes no arguments", m.verb)
		}
		verbs = append(verbs, m.verb)
	}
	return verbs, nil
}
