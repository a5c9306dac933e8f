package providers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultLifetime is the lifetime of a box whose Spec sets none. Every box
// has one: a box is never left to run forever because its host went away.
const DefaultLifetime = 2 * time.Hour

// MaxLifetime bounds what a Spec may ask for.
const MaxLifetime = 7 * 24 * time.Hour

// Isolation is how a box is separated from its host.
type Isolation string

// Isolation kinds. The empty Isolation means the provider's default.
const (
	IsolationNone      Isolation = "none"      // a directory on this machine, no separation
	IsolationContainer Isolation = "container" // namespaces and cgroups on a shared kernel
	IsolationGVisor    Isolation = "gvisor"    // a user-space kernel
	IsolationMicroVM   Isolation = "microvm"   // a kernel of its own
)

// NetworkMode is what a box may reach.
type NetworkMode string

// Network modes. The empty mode means the provider's default.
const (
	NetworkOpen      NetworkMode = "open"      // anything the provider lets out
	NetworkNone      NetworkMode = "none"      // loopback only
	NetworkAllowlist NetworkMode = "allowlist" // only Network.Allow
)

// Network is the box's network policy.
type Network struct {
	Mode  NetworkMode `json:"mode,omitempty"`
	Allow []string    `json:"allow,omitempty"` // domains (or CIDRs where a provider takes them) for NetworkAllowlist
}

// Mount binds a path of the host (or of the provider's storage) into the box.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Capabilities adjusts the Linux capabilities of the box's processes.
type Capabilities struct {
	Drop []string `json:"drop,omitempty"` // e.g. "ALL", "NET_RAW"
}

// Spec is what a box is made from. A zero field means "the provider's
// default"; a set field the provider cannot honour is refused with
// Unsupported, never ignored.
type Spec struct {
	Image        string            `json:"image,omitempty"`
	Snapshot     string            `json:"snapshot,omitempty"`
	Region       string            `json:"region,omitempty"`
	Lifetime     time.Duration     `json:"lifetime,omitempty"` // 0: DefaultLifetime
	CPUs         float64           `json:"cpus,omitempty"`
	MemoryMB     int               `json:"memoryMb,omitempty"`
	GPU          string            `json:"gpu,omitempty"` // a model name, or "any"
	Isolation    Isolation         `json:"isolation,omitempty"`
	Network      Network           `json:"network,omitempty"`
	Ports        []int             `json:"ports,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Mounts       []Mount           `json:"mounts,omitempty"`
	Workspace    string            `json:"workspace,omitempty"` // the box-side directory the host works in
	User         string            `json:"user,omitempty"`      // "uid:gid" the box's processes run as
	Capabilities Capabilities      `json:"capabilities,omitempty"`
}

// SpecFields are the names of Spec's fields, as Fields and CheckSupported
// use them (the JSON names).
var SpecFields = []string{
	"image", "snapshot", "region", "lifetime", "cpus", "memoryMb", "gpu",
	"isolation", "network", "ports", "env", "labels", "mounts", "workspace",
	"user", "capabilities",
}

// Fields returns the names of the fields s sets, in SpecFields order.
func (s Spec) Fields() []string {
	set := map[string]bool{
		"image":        s.Image != "",
		"snapshot":     s.Snapshot != "",
		"region":       s.Region != "",
		"lifetime":     s.Lifetime != 0,
		"cpus":         s.CPUs != 0,
		"memoryMb":     s.MemoryMB != 0,
		"gpu":          s.GPU != "",
		"isolation":    s.Isolation != "",
		"network":      s.Network.Mode != "" || len(s.Network.Allow) > 0,
		"ports":        len(s.Ports) > 0,
		"env":          len(s.Env) > 0,
		"labels":       len(s.Labels) > 0,
		"mounts":       len(s.Mounts) > 0,
		"workspace":    s.Workspace != "",
		"user":         s.User != "",
		"capabilities": len(s.Capabilities.Drop) > 0,
	}
	var out []string
	for _, f := range SpecFields {
		if set[f] {
			out = append(out, f)
		}
	}
	return out
}

// CheckSupported returns an Unsupported error naming the first field s sets
// that is not among supported, or nil. Providers call it first in Create, then
// check the values of the fields they do support.
func (s Spec) CheckSupported(op string, supported ...string) error {
	for _, f := range s.Fields() {
		if !slices.Contains(supported, f) {
			return Errorf(Unsupported, op, "spec field %q is not supported by this provider", f)
		}
	}
	return nil
}

// LifetimeOrDefault returns the lifetime the box gets.
func (s Spec) LifetimeOrDefault() time.Duration {
	if s.Lifetime == 0 {
		return DefaultLifetime
	}
	return s.Lifetime
}

// Validate checks what every provider requires of a spec, whatever it
// supports: label and env names, a lifetime within bounds, non-negative
// resources, ports in range, absolute mount targets and workspace. Errors
// are Invalid.
func (s Spec) Validate() error {
	const op = "providers.Spec.Validate"
	if s.Lifetime < 0 || s.Lifetime > MaxLifetime {
		return Errorf(Invalid, op, "lifetime %v is outside 0..%v", s.Lifetime, MaxLifetime)
	}
	if s.CPUs < 0 || s.MemoryMB < 0 {
		return Errorf(Invalid, op, "cpus and memoryMb must not be negative")
	}
	for _, p := range s.Ports {
		if p < 1 || p > 65535 {
			return Errorf(Invalid, op, "port %d is outside 1..65535", p)
		}
	}
	switch s.Network.Mode {
	case "", NetworkOpen, NetworkNone:
		if len(s.Network.Allow) > 0 {
			return Errorf(Invalid, op, "network allow list given with mode %q", s.Network.Mode)
		}
	case NetworkAllowlist:
		if len(s.Network.Allow) == 0 {
			return Errorf(Invalid, op, "network mode allowlist needs at least one entry")
		}
	default:
		return Errorf(Invalid, op, "unknown network mode %q", s.Network.Mode)
	}
	switch s.Isolation {
	case "", IsolationNone, IsolationContainer, IsolationGVisor, IsolationMicroVM:
	default:
		return Errorf(Invalid, op, "unknown isolation %q", s.Isolation)
	}
	if err := CheckLabels(s.Labels); err != nil {
		return err
	}
	for k, v := range s.Env {
		if !ValidEnvName(k) {
			return Errorf(Invalid, op, "env name %q is not a valid variable name", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Errorf(Invalid, op, "env %s holds a NUL byte", k)
		}
	}
	for _, m := range s.Mounts {
		if m.Source == "" || !strings.HasPrefix(m.Target, "/") {
			return Errorf(Invalid, op, "mount %q -> %q needs a source and an absolute target", m.Source, m.Target)
		}
	}
	if s.Workspace != "" && !strings.HasPrefix(s.Workspace, "/") {
		return Errorf(Invalid, op, "workspace %q is not an absolute path", s.Workspace)
	}
	if s.User != "" && !validUser(s.User) {
		return Errorf(Invalid, op, "user %q is not uid:gid", s.User)
	}
	return nil
}

// ReservedLabel reports whether a label key belongs to providers: "boxfs"
// and anything under "boxfs.". Callers may not set such labels.
func ReservedLabel(key string) bool {
	return key == "boxfs" || strings.HasPrefix(key, "boxfs.")
}

// CheckLabels checks caller-given labels: keys of 1..128 bytes of
// [A-Za-z0-9._/-], not reserved; values of at most 1024 bytes without NUL or
// newline. Errors are Invalid.
func CheckLabels(labels map[string]string) error {
	const op = "providers.CheckLabels"
	for k, v := range labels {
		if ReservedLabel(k) {
			return Errorf(Invalid, op, "label %q is reserved for providers", k)
		}
		if k == "" || len(k) > 128 {
			return Errorf(Invalid, op, "label key %q must be 1..128 bytes", k)
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
				return Errorf(Invalid, op, "label key %q holds %q; use [A-Za-z0-9._/-]", k, c)
			}
		}
		if len(v) > 1024 || strings.ContainsAny(v, "\x00\n") {
			return Errorf(Invalid, op, "label %q: value must be at most 1024 bytes without NUL or newline", k)
		}
	}
	return nil
}

// MatchLabels reports whether have holds every key of want with the same value.
func MatchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// ValidEnvName reports whether k can name an environment variable: a letter or
// underscore, then letters, digits and underscores. Every provider checks env
// keys with it before a key reaches a box.
func ValidEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// ParseUser reads a Spec.User, "uid:gid"; ok is false for anything else
// (the empty string included).
func ParseUser(u string) (uid, gid int, ok bool) {
	a, b, ok := strings.Cut(u, ":")
	if !ok || !isDigits(a) || !isDigits(b) {
		return 0, 0, false
	}
	uid, err1 := strconv.Atoi(a)
	gid, err2 := strconv.Atoi(b)
	return uid, gid, err1 == nil && err2 == nil
}

func validUser(u string) bool {
	uid, gid, ok := strings.Cut(u, ":")
	return ok && isDigits(uid) && isDigits(gid)
}

func isDigits(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String renders a spec compactly for logs: only the fields it sets, env
// values left out (they may be secrets).
func (s Spec) String() string {
	var parts []string
	for _, f := range s.Fields() {
		switch f {
		case "image":
			parts = append(parts, "image="+s.Image)
		case "lifetime":
			parts = append(parts, "lifetime="+s.Lifetime.String())
		case "env":
			keys := make([]string, 0, len(s.Env))
			for k := range s.Env {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts = append(parts, "env="+strings.Join(keys, ","))
		case "workspace":
			parts = append(parts, "workspace="+s.Workspace)
		default:
			parts = append(parts, f)
		}
	}
	return fmt.Sprintf("spec{%s}", strings.Join(parts, " "))
}
