package boxes

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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

// CheckName reports whether name can name a box (Invalid if not): 1..63
// bytes of UTF-8, no '/', NUL or newline, no leading '.', not one of the
// namespace root's own file names.
func CheckName(name string) error {
	if err := checkName(name); err != nil {
		return providers.E(providers.Invalid, "boxes.CheckName", err)
	}
	return nil
}

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
