package boxes

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/boxfs/boxfs/providers"
)

// ParseSpec reads the key=value words of a `new NAME k=v ...` message (and
// of a configured environment): provider=, image=, lifetime=, cpus=,
// memory=, network=, ports=, workspace=, user=, isolation=, snapshot=,
// region=, gpu=, env.K=, label.K=. Unknown keys and malformed values are
// Invalid; whether the provider can honour a field is the provider's to
// say.
func ParseSpec(words []string) (provider string, spec providers.Spec, err error) {
	const op = "boxes.ParseSpec"
	pairs := make([]pair, 0, len(words))
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return "", spec, providers.Errorf(providers.Invalid, op, "%q is not key=value", w)
		}
		pairs = append(pairs, pair{k, v})
	}
	provider, spec, err = specOf(pairs)
	if err != nil {
		return "", spec, providers.E(providers.Invalid, op, err)
	}
	return provider, spec, nil
}

type pair struct{ k, v string }

// Write modes: when a close(2) in work/ returns (Settings.Write).
const (
	// WriteThrough: once the box has the file's bytes (the default).
	WriteThrough = "through"
	// WriteBehind: once the bytes are in the host's journal; the box gets
	// them in batches within a bounded delay, and before every barrier.
	WriteBehind = "behind"
)

// Settings are what boxfs itself does for a box, set by the keys of a
// `new` message that are not the provider's: write= (WriteThrough or
// WriteBehind; "" is the mount's default) and watch= (WatchOff turns the
// workspace watch off for this box; "" or WatchOn leaves it to the mount).
type Settings struct {
	Write string `json:"write,omitempty"`
	Watch string `json:"watch,omitempty"`
}

// Values of Settings.Watch.
const (
	WatchOn  = "on"
	WatchOff = "off"
)

// ParseNew reads the words of a `new NAME k=v ...` message: boxfs's own
// keys (write=, watch=) into Settings, the rest as ParseSpec does.
func ParseNew(words []string) (provider string, spec providers.Spec, set Settings, err error) {
	const op = "boxes.ParseNew"
	rest := make([]string, 0, len(words))
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		var field *string
		var want []string
		switch k {
		case "write":
			field, want = &set.Write, []string{WriteThrough, WriteBehind}
		case "watch":
			field, want = &set.Watch, []string{WatchOn, WatchOff}
		default:
			rest = append(rest, w)
			continue
		}
		if *field != "" {
			return "", spec, set, providers.Errorf(providers.Invalid, op, "key %q given twice", k)
		}
		if !slices.Contains(want, v) {
			return "", spec, set, providers.Errorf(providers.Invalid, op, "%s=%q: want %s", k, v, strings.Join(want, " or "))
		}
		*field = v
	}
	provider, spec, err = ParseSpec(rest)
	return provider, spec, set, err
}

// CheckName reports whether name can name a new box (Invalid if not):
// 1..63 bytes of UTF-8, no '/' and no control character (C0, DEL or C1: a
// name is printed raw in listings and terminals), no '=' (a ctl message
// reads NAME=... as a key, so no message could name the box), no Unicode
// format character (category Cf, such as U+202E RIGHT-TO-LEFT OVERRIDE or
// U+200B ZERO WIDTH SPACE: a name that displays as another), not starting
// with '.' or '-' (an option to the tools that take it), not one of the
// namespace root's own file names.
func CheckName(name string) error {
	if err := checkName(name); err != nil {
		return providers.E(providers.Invalid, "boxes.CheckName", err)
	}
	return nil
}

// checkName is CheckName's rule, for names given to new, attach, mkdir and
// declared boxes.
func checkName(name string) error {
	if err := checkRecordName(name); err != nil {
		return err
	}
	if strings.ContainsRune(name, '=') {
		return fmt.Errorf("box name %q holds '=' (a ctl message would read it as a key)", name)
	}
	if i := strings.IndexFunc(name, isFormat); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		return fmt.Errorf("box name %q holds the Unicode format character %U (it changes how a name displays)", name, r)
	}
	return nil
}

// isFormat reports whether r is a Unicode format character (category Cf).
func isFormat(r rune) bool { return unicode.Is(unicode.Cf, r) }

// checkRecordName is the rule a box record's name is read back with: the
// rule names were made under before '=' and format characters were
// refused, so a box made then stays listed (and can be destroyed or
// released through its own directory) rather than being left running
// unseen.
func checkRecordName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a box name is needed")
	case len(name) > 63:
		return fmt.Errorf("box name %q is longer than 63 bytes", name)
	case strings.ContainsRune(name, '/'):
		return fmt.Errorf("box name %q holds '/'", name)
	case strings.HasPrefix(name, "."), strings.HasPrefix(name, "-"):
		return fmt.Errorf("box name %q starts with '%s'", name, name[:1])
	case !utf8.ValidString(name):
		return fmt.Errorf("box name %q is not UTF-8", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("box name %q holds a control character", name)
	case name == "ctl" || name == "err":
		return fmt.Errorf("box name %q is taken by the root's own file", name)
	}
	return nil
}

// WorkspaceHost, as a spec's workspace, is the host's path of the box's
// work/ (MOUNT/NAME/work): the box keeps its files at the path the host
// opens them by, so a path a command prints in the box (a compiler's
// error, pwd -P, git rev-parse --show-toplevel) opens on the host as it is.
const WorkspaceHost = "host"

// specOf reads the keys of a new message (and of a config environment) into
// a Spec. Unknown keys and malformed values are errors; whether the provider
// can honour a field is the provider's to say.
func specOf(pairs []pair) (provider string, s providers.Spec, err error) {
	seen := map[string]bool{}
	for _, p := range pairs {
		if seen[p.k] && !strings.HasPrefix(p.k, "env.") && !strings.HasPrefix(p.k, "label.") {
			return "", s, fmt.Errorf("key %q given twice", p.k)
		}
		seen[p.k] = true
		if p.k == "provider" {
			provider = p.v
			continue
		}
		if err := setSpec(&s, p.k, p.v); err != nil {
			return "", s, err
		}
	}
	ws := s.Workspace
	if ws == WorkspaceHost {
		s.Workspace = "/" // an absolute path when the box is made (Manager.make)
	}
	err = s.Validate()
	s.Workspace = ws
	if err != nil {
		var e *providers.Error
		if errors.As(err, &e) && e.Err != nil {
			return "", s, e.Err
		}
		return "", s, err
	}
	return provider, s, nil
}

// setSpec sets the field of s that the key k names to v.
func setSpec(s *providers.Spec, k, v string) error {
	switch {
	case k == "image":
		s.Image = v
	case k == "snapshot":
		s.Snapshot = v
	case k == "region":
		s.Region = v
	case k == "gpu":
		s.GPU = v
	case k == "user":
		s.User = v
	case k == "workspace":
		s.Workspace = v
	case k == "isolation":
		s.Isolation = providers.Isolation(v)
	case k == "lifetime":
		d, err := parseDuration(v)
		if err != nil {
			return fmt.Errorf("lifetime=%q: %v", v, err)
		}
		s.Lifetime = d
	case k == "cpus":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("cpus=%q is not a positive number", v)
		}
		s.CPUs = f
	case k == "memory":
		mb, err := parseMegabytes(v)
		if err != nil {
			return fmt.Errorf("memory=%q: %v", v, err)
		}
		s.MemoryMB = mb
	case k == "network":
		switch v {
		case "open", "none":
			s.Network.Mode = providers.NetworkMode(v)
		case "":
			return fmt.Errorf("network= needs open, none or a comma list of domains")
		default:
			s.Network.Mode = providers.NetworkAllowlist
			s.Network.Allow = strings.Split(v, ",")
		}
	case k == "ports":
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("ports=%q: %q is not a number", v, f)
			}
			s.Ports = append(s.Ports, n)
		}
	case strings.HasPrefix(k, "env."):
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[strings.TrimPrefix(k, "env.")] = v
	case strings.HasPrefix(k, "label."):
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[strings.TrimPrefix(k, "label.")] = v
	default:
		return fmt.Errorf("unknown key %q", k)
	}
	return nil
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
// ParseBytes reads a size in bytes: a number with an optional binary
// suffix k, m, g or t (512m, 2g).
func ParseBytes(v string) (int64, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	mult := int64(1)
	for i, suf := range []string{"k", "m", "g", "t"} {
		if strings.HasSuffix(s, suf) {
			mult, s = int64(1)<<(10*(i+1)), strings.TrimSuffix(s, suf)
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, providers.Errorf(providers.Invalid, "boxes.ParseBytes", "%q is not a size (use 536870912, 512m or 2g)", v)
	}
	return n * mult, nil
}

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
