package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
)

// Config is the configuration file (docs/config.md). TOML, or YAML when the
// file's name ends in .yaml or .yml. Unknown keys are errors.
type Config struct {
	// Provider is the default provider: of `new NAME` without provider=,
	// of mkdir in the mount, of a box whose environment names none.
	Provider string `toml:"provider" yaml:"provider"`
	// AttrTimeout and OpTimeout set the mount's attribute timeout and the
	// bound of one operation on a box ("1s", or seconds).
	AttrTimeout scalar `toml:"attr_timeout" yaml:"attr_timeout"`
	OpTimeout   scalar `toml:"op_timeout" yaml:"op_timeout"`
	// RequestBound bounds how long one request of the mount may take
	// before it is answered ETIMEDOUT ("5m", or seconds).
	RequestBound scalar `toml:"request_bound" yaml:"request_bound"`
	// Agent is the static boxfs binary uploaded into boxes for the agent
	// channel: "" is this binary when it is static, "off" none.
	Agent string `toml:"agent" yaml:"agent"`
	// Providers holds each provider's options (providers.Config.Options).
	Providers map[string]map[string]scalar `toml:"providers" yaml:"providers"`
	// Environments are named kinds of box.
	Environments map[string]Environment `toml:"environments" yaml:"environments"`
	// Boxes are boxes presented by name, made at their first use.
	Boxes map[string]BoxConfig `toml:"boxes" yaml:"boxes"`
	// Prices price boxes by "provider/kind" (or "provider"); with any, a
	// receipt is written for every box that ends.
	Prices map[string]PriceConfig `toml:"prices" yaml:"prices"`

	file string // where it was read; "" for none
}

// Environment is a named kind of box: the keys of `new NAME k=v ...`.
type Environment struct {
	Provider  string            `toml:"provider" yaml:"provider"`
	Image     string            `toml:"image" yaml:"image"`
	Lifetime  scalar            `toml:"lifetime" yaml:"lifetime"` // "2h", or seconds
	CPUs      scalar            `toml:"cpus" yaml:"cpus"`
	Memory    scalar            `toml:"memory" yaml:"memory"` // megabytes, or "512m", "2g"
	Network   string            `toml:"network" yaml:"network"`
	Workspace string            `toml:"workspace" yaml:"workspace"`
	User      string            `toml:"user" yaml:"user"`
	Isolation string            `toml:"isolation" yaml:"isolation"`
	GPU       string            `toml:"gpu" yaml:"gpu"`
	Region    string            `toml:"region" yaml:"region"`
	Snapshot  string            `toml:"snapshot" yaml:"snapshot"`
	Ports     []int             `toml:"ports" yaml:"ports"`
	Env       map[string]string `toml:"env" yaml:"env"`
	Labels    map[string]string `toml:"labels" yaml:"labels"`
}

// BoxConfig declares a box.
type BoxConfig struct {
	Environment string `toml:"environment" yaml:"environment"`
	// Resume is "auto" (a use of work/ resumes the box when suspended) or
	// "manual" (the default).
	Resume string `toml:"resume" yaml:"resume"`
}

// PriceConfig is ledger.Price with the configuration's names.
type PriceConfig struct {
	USDPerSecond *float64 `toml:"usd_per_second" yaml:"usd_per_second"`
	USDPerCall   *float64 `toml:"usd_per_call" yaml:"usd_per_call"`
	Source       string   `toml:"source" yaml:"source"`
	Priced       string   `toml:"priced" yaml:"priced"`
}

// scalar is a configuration value written as a string or a number.
type scalar string

func (s *scalar) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		*s = scalar(v)
	case int64:
		*s = scalar(strconv.FormatInt(v, 10))
	case float64:
		*s = scalar(strconv.FormatFloat(v, 'f', -1, 64))
	case bool:
		*s = scalar(strconv.FormatBool(v))
	default:
		return fmt.Errorf("want a string or a number, not %T", v)
	}
	return nil
}

func (s *scalar) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a string or a number", n.Line)
	}
	*s = scalar(n.Value)
	return nil
}

// defaultConfigFile is where the configuration is read from when --config
// does not say: /etc/boxfs/config.toml for root, else
// $XDG_CONFIG_HOME/boxfs/config.toml. A missing default file is no error.
func defaultConfigFile() string {
	if os.Geteuid() == 0 {
		return "/etc/boxfs/config.toml"
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "boxfs", "config.toml")
}

// loadConfig reads and checks the configuration file. explicit says the
// user named it (then it must exist). Every error is a usageError: one
// line naming the file.
func loadConfig(file string, explicit bool) (*Config, error) {
	cfg := &Config{}
	if file == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return cfg, nil
		}
		return nil, usagef("config %s: %v", file, unwrapPathError(err))
	}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	cfg.file = file
	bad := func(err error) error {
		return usagef("config %s: %s", file, oneLine(err.Error()))
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".yaml", ".yml":
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
			return nil, bad(yamlError(err))
		}
	default:
		md, err := toml.Decode(string(data), cfg)
		if err != nil {
			return nil, bad(err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, bad(fmt.Errorf("unknown key %q", und[0].String()))
		}
	}
	if err := cfg.check(); err != nil {
		return nil, bad(err)
	}
	return cfg, nil
}

// secretNameRE matches the names of options and variables that hold
// credentials.
var secretNameRE = regexp.MustCompile(`(?i)key|token|secret|passw|credential`)

// exposedSecret says which credential the file holds (a provider option or
// an environment variable named like one) while its group or others can
// read it; "" when it holds none or only its owner can read it.
func (c *Config) exposedSecret() string {
	if c.file == "" {
		return ""
	}
	fi, err := os.Stat(c.file)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return ""
	}
	var found string
	for _, p := range sortedKeys(c.Providers) {
		for _, k := range sortedKeys(c.Providers[p]) {
			if found == "" && c.Providers[p][k] != "" && secretNameRE.MatchString(k) {
				found = "providers." + p + "." + k
			}
		}
	}
	for _, e := range sortedKeys(c.Environments) {
		for _, k := range sortedKeys(c.Environments[e].Env) {
			if found == "" && secretNameRE.MatchString(k) {
				found = "environments." + e + ".env." + k
			}
		}
	}
	if found == "" {
		return ""
	}
	return fmt.Sprintf("config %s holds %s and is readable by others than its owner (mode %04o): chmod 600 it", c.file, found, fi.Mode().Perm())
}

// yamlFieldRE is yaml's message for an unknown key, which names a Go type.
var yamlFieldRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)

// yamlError says yaml's type errors as the TOML path does: `line 3:
// unknown key "provder"`, not the Go type the key was not found in.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		if sm := yamlFieldRE.FindStringSubmatch(m); sm != nil {
			m = fmt.Sprintf("line %s: unknown key %q", sm[1], sm[2])
		}
		msgs[i] = m
	}
	return errors.New(strings.Join(msgs, "; "))
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, ":\n", ": ")
	s = strings.ReplaceAll(s, "\n", "; ")
	for strings.Contains(s, ";  ") {
		s = strings.ReplaceAll(s, ";  ", "; ")
	}
	return s
}

// check checks everything it can without opening a provider: names,
// durations, every environment's keys, the boxes' environments, prices.
func (c *Config) check() error {
	known := providers.Names()
	checkProvider := func(where, p string) error {
		if p != "" && !slices.Contains(known, p) {
			return fmt.Errorf("%s: unknown provider %q (have %s)", where, p, strings.Join(known, ", "))
		}
		return nil
	}
	if err := checkProvider("provider", c.Provider); err != nil {
		return err
	}
	if _, err := c.attrTimeout(); err != nil {
		return err
	}
	if _, err := c.opTimeout(); err != nil {
		return err
	}
	if _, err := c.requestBound(); err != nil {
		return err
	}
	for _, name := range sortedKeys(c.Providers) {
		if err := checkProvider("providers."+name, name); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(c.Environments) {
		if _, _, err := boxes.ParseSpec(c.Environments[name].pairs()); err != nil {
			return fmt.Errorf("environments.%s: %v", name, specError(err))
		}
		if err := checkProvider("environments."+name+".provider", c.Environments[name].Provider); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(c.Boxes) {
		if err := boxes.CheckName(name); err != nil {
			return fmt.Errorf("boxes.%s: %v", name, specError(err))
		}
		if env := c.Boxes[name].Environment; env != "" {
			if _, ok := c.Environments[env]; !ok {
				return fmt.Errorf("boxes.%s: no environment %q", name, env)
			}
		}
	}
	if a := c.Agent; a != "" && a != "off" {
		if !filepath.IsAbs(a) && c.file != "" {
			c.Agent = filepath.Join(filepath.Dir(c.file), a)
		}
		if fi, err := os.Stat(c.Agent); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("agent = %q: not a file (a static boxfs binary, \"\" for this one, or \"off\")", a)
		}
	}
	if err := c.prices().Check(); err != nil {
		return specError(err)
	}
	return nil
}

// specError is err's message without the op prefix ParseSpec adds.
func specError(err error) error {
	var e *providers.Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err
	}
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func parseSeconds(what string, v scalar) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseFloat(string(v), 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("%s = %q: must be positive", what, v)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s = %q: not a positive duration (use 1s, 500ms or 2)", what, v)
	}
	return d, nil
}

func (c *Config) attrTimeout() (time.Duration, error) {
	return parseSeconds("attr_timeout", c.AttrTimeout)
}
func (c *Config) opTimeout() (time.Duration, error) { return parseSeconds("op_timeout", c.OpTimeout) }
func (c *Config) requestBound() (time.Duration, error) {
	return parseSeconds("request_bound", c.RequestBound)
}

// prices returns the configured prices as the ledger takes them.
func (c *Config) prices() ledger.Prices {
	if len(c.Prices) == 0 {
		return nil
	}
	ps := ledger.Prices{}
	for k, p := range c.Prices {
		ps[k] = ledger.Price{USDPerSecond: p.USDPerSecond, USDPerCall: p.USDPerCall, Source: p.Source, Priced: p.Priced}
	}
	return ps
}

// providerOptions returns the options of provider name.
func (c *Config) providerOptions(name string) map[string]string {
	opts := c.Providers[name]
	if len(opts) == 0 {
		return nil
	}
	out := make(map[string]string, len(opts))
	for k, v := range opts {
		out[k] = string(v)
	}
	return out
}

// pairs renders an environment as the key=value words of a new message.
func (e Environment) pairs() []string {
	var out []string
	add := func(k, v string) {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	add("provider", e.Provider)
	add("image", e.Image)
	add("lifetime", string(e.Lifetime))
	add("cpus", string(e.CPUs))
	add("memory", string(e.Memory))
	add("network", e.Network)
	add("workspace", e.Workspace)
	add("user", e.User)
	add("isolation", e.Isolation)
	add("gpu", e.GPU)
	add("region", e.Region)
	add("snapshot", e.Snapshot)
	if len(e.Ports) > 0 {
		ps := make([]string, len(e.Ports))
		for i, p := range e.Ports {
			ps[i] = strconv.Itoa(p)
		}
		add("ports", strings.Join(ps, ","))
	}
	for _, k := range sortedKeys(e.Env) {
		out = append(out, "env."+k+"="+e.Env[k])
	}
	for _, k := range sortedKeys(e.Labels) {
		out = append(out, "label."+k+"="+e.Labels[k])
	}
	return out
}

// mergePairs returns base with over applied: a key given in over replaces
// base's (env.K and label.K by their full key).
func mergePairs(base, over []string) []string {
	keyOf := func(p string) string { k, _, _ := strings.Cut(p, "="); return k }
	replaced := map[string]bool{}
	for _, p := range over {
		replaced[keyOf(p)] = true
	}
	var out []string
	for _, p := range base {
		if !replaced[keyOf(p)] {
			out = append(out, p)
		}
	}
	return append(out, over...)
}

// declared returns the configured boxes as the namespace takes them.
func (c *Config) declared() ([]boxes.Declared, error) {
	var out []boxes.Declared
	for _, name := range sortedKeys(c.Boxes) {
		var pairs []string
		if env := c.Boxes[name].Environment; env != "" {
			pairs = c.Environments[env].pairs()
		}
		prov, spec, err := boxes.ParseSpec(pairs)
		if err != nil {
			return nil, usagef("config %s: boxes.%s: %v", c.file, name, specError(err))
		}
		auto, _, err := boxes.SplitResume([]string{"resume=" + cmp.Or(c.Boxes[name].Resume, "manual")})
		if err != nil {
			return nil, usagef("config %s: boxes.%s: %v", c.file, name, specError(err))
		}
		out = append(out, boxes.Declared{Name: name, Provider: prov, Spec: spec, ResumeAuto: auto})
	}
	return out, nil
}
