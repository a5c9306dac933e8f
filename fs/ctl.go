package fs

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/boxfs/boxfs/boxes"
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

// rootCmd is a parsed root ctl message.
type rootCmd struct {
	verb       string // new, attach, forget
	name       string
	provider   string
	id         string
	spec       providers.Spec
	set        boxes.Settings // boxfs's own keys of new (write=)
	resumeAuto bool           // resume=auto: a use of work/ resumes the box when suspended
}

// parseRootCtl parses every message of a write to the root ctl before any
// runs: one bad message fails the whole write (Invalid).
func parseRootCtl(text string) ([]rootCmd, error) { return parseAll(text, rootCmdOf) }

// parseAll parses every message of a write with of: one bad message fails
// the whole write (Invalid, naming the message).
func parseAll[T any](text string, of func(ctlMsg) (T, error)) ([]T, error) {
	const op = "ctl"
	lines := splitMessages(text)
	if len(lines) == 0 {
		return nil, providers.Errorf(providers.Invalid, op, "no message")
	}
	out := make([]T, 0, len(lines))
	for _, line := range lines {
		m, err := parseMessage(line)
		if err != nil {
			return nil, badMessage(op, line, err)
		}
		c, err := of(m)
		if err != nil {
			return nil, badMessage(op, line, err)
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
		return c, fmt.Errorf("unknown verb (root ctl takes new, attach, forget)")
	}
	if len(m.args) != 1 {
		return c, fmt.Errorf("%s takes one box name, got %d words", m.verb, len(m.args))
	}
	c.name = m.args[0]
	if err := boxes.CheckName(c.name); err != nil {
		return c, cause(err)
	}
	switch m.verb {
	case "forget":
		if len(m.kv) > 0 {
			return c, fmt.Errorf("forget takes no keys")
		}
	case "attach":
		var rest []kv
		for _, p := range m.kv {
			switch p.k {
			case "provider":
				c.provider = p.v
			case "id":
				c.id = p.v
			default:
				rest = append(rest, p)
			}
		}
		auto, left, err := boxes.SplitResume(words(rest))
		if err != nil {
			return c, cause(err)
		}
		if len(left) > 0 {
			return c, fmt.Errorf("attach: unknown key %q (takes provider=, id=, resume=)", left[0])
		}
		c.resumeAuto = auto
		if c.provider == "" || c.id == "" {
			return c, fmt.Errorf("attach needs provider= and id=")
		}
	case "new":
		auto, rest, err := boxes.SplitResume(words(m.kv))
		if err != nil {
			return c, cause(err)
		}
		c.resumeAuto = auto
		c.provider, c.spec, c.set, err = boxes.ParseNew(rest)
		if err != nil {
			return c, cause(err)
		}
	}
	return c, nil
}

// words renders key=value pairs as the words they came from.
func words(kvs []kv) []string {
	out := make([]string, len(kvs))
	for i, p := range kvs {
		out[i] = p.k + "=" + p.v
	}
	return out
}

// boxVerbs are what a box's ctl takes.
var boxVerbs = map[string]string{
	"destroy":  "end the box and remove it",
	"release":  "push dirty files, then stop presenting the box (it keeps running)",
	"flush":    "push dirty files to the box",
	"sync":     "push dirty files, then re-read the box's listing",
	"kill":     "kill the box's running commands",
	"setaside": "move the host's unpushed copy of a work/ file aside and drop its writes",
	"suspend":  "suspend the box (suspend force: kill its commands first)",
	"resume":   "resume a suspended box",
	"snapshot": "save the box's filesystem as snapshot NAME",
}

// boxCmd is a parsed message of a box's ctl: a verb and its argument
// ("force" for suspend, the name for snapshot).
type boxCmd struct {
	verb, arg string
}

// parseBoxCtl parses every message of a write to a box's ctl.
func parseBoxCtl(text string) ([]boxCmd, error) { return parseAll(text, boxCmdOf) }

func boxCmdOf(m ctlMsg) (boxCmd, error) {
	c := boxCmd{verb: m.verb}
	if _, ok := boxVerbs[m.verb]; !ok {
		return c, fmt.Errorf("unknown verb %q (a box's ctl takes destroy, release, flush, sync, kill, suspend, resume, snapshot, setaside)", m.verb)
	}
	if m.verb == "setaside" && len(m.kv) == 1 && len(m.args) == 0 {
		// A path with "=" in it, read as a key.
		m.args, m.kv = []string{m.kv[0].k + "=" + m.kv[0].v}, nil
	}
	if len(m.kv) > 0 {
		return c, fmt.Errorf("%s takes no key=value", m.verb)
	}
	switch m.verb {
	case "suspend":
		if len(m.args) > 1 || len(m.args) == 1 && m.args[0] != "force" {
			return c, fmt.Errorf("suspend takes nothing, or force")
		}
	case "setaside":
		if len(m.args) != 1 || !filepath.IsLocal(m.args[0]) || filepath.Clean(m.args[0]) != m.args[0] {
			return c, fmt.Errorf("setaside takes one path, relative to work/ and clean (a/b.txt)")
		}
	case "snapshot":
		if len(m.args) != 1 {
			return c, fmt.Errorf("snapshot takes one name")
		}
		if err := boxes.CheckSnapshotName(m.args[0]); err != nil {
			return c, cause(err)
		}
	default:
		if len(m.args) > 0 {
			return c, fmt.Errorf("%s takes no arguments", m.verb)
		}
	}
	if len(m.args) == 1 {
		c.arg = m.args[0]
	}
	return c, nil
}

// cause is what a boxes error says without its op and code, for an error
// that names the ctl message instead.
func cause(err error) error {
	var e *providers.Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err
	}
	return err
}

// maxQuote is the most of a bad message, or of what is said of it, an
// error keeps: a 1 MiB line must not grow err and the log by as much.
const maxQuote = 256

// quoteMessage renders a message for an error: env.* values (often
// secrets) redacted, at most maxQuote bytes of it, quoted.
func quoteMessage(line string) string {
	line = redactMessage(line)
	if len(line) <= maxQuote {
		return fmt.Sprintf("%q", line)
	}
	return fmt.Sprintf("%q... (%d bytes)", clip(line, maxQuote), len(line))
}

// redactMessage returns line with the value of every env.* key replaced by
// <redacted>. It judges the words as the parser reads them, so no quoting
// hides a key ('env'.TOKEN=..., env."TOKEN"=...; any case of "env."), and
// renders them again, quoted where they hold blanks or quotes. A line the
// parser cannot read loses its quote characters and is cut at its first
// "env.", whatever follows.
func redactMessage(line string) string {
	words, err := tokenize(line)
	if err != nil {
		plain := strings.NewReplacer(`'`, "", `"`, "", `\`, "").Replace(line)
		for i := 0; i+4 <= len(plain); i++ {
			if strings.EqualFold(plain[i:i+4], "env.") {
				return plain[:i] + "env.<redacted>"
			}
		}
		return plain
	}
	for i, w := range words {
		k, v, ok := strings.Cut(w, "=")
		switch {
		case !ok || k == "":
			words[i] = quoteWord(w)
		case strings.HasPrefix(strings.ToLower(k), "env."):
			words[i] = quoteWord(k) + "=<redacted>"
		case v == "":
			words[i] = quoteWord(k) + "="
		default:
			words[i] = quoteWord(k) + "=" + quoteWord(v)
		}
	}
	return strings.Join(words, " ")
}

// quoteWord renders w as one word of a message: as it is, or in single
// quotes when it holds a blank or a quote (in double quotes when it holds a
// single quote).
func quoteWord(w string) string {
	if w != "" && !strings.ContainsAny(w, " \t'\"") {
		return w
	}
	if !strings.Contains(w, "'") {
		return "'" + w + "'"
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(w) + `"`
}

// clip returns at most n bytes of s, cut at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// badMessage is the Invalid error of a message that cannot be taken: the
// message quoted, and at most maxQuote bytes of why.
func badMessage(op, line string, err error) error {
	why := err.Error()
	if len(why) > maxQuote {
		why = clip(why, maxQuote) + "..."
	}
	return providers.Errorf(providers.Invalid, op, "%s: %s", quoteMessage(line), why)
}
