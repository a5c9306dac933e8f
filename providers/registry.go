package providers

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Config is what a provider is opened with.
type Config struct {
	// StateDir is a directory the provider may keep its records in (the
	// local provider's boxes live under it). It exists.
	StateDir string
	// Options are provider-specific settings from flags or the config file
	// ("root", "host", "image"); a provider refuses a key it does not know
	// with Invalid.
	Options map[string]string
	// Logger receives the provider's log lines; nil is slog.Default().
	Logger *slog.Logger
}

// Factory opens a provider.
type Factory func(Config) (Provider, error)

var registry struct {
	sync.Mutex
	m map[string]Factory
}

// Register makes a provider available by name. It panics on an empty name, a
// nil factory or a name registered twice: all are programming errors, found at
// start-up.
func Register(name string, f Factory) {
	if name == "" || f == nil {
		panic("providers: Register with an empty name or a nil factory")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = map[string]Factory{}
	}
	if _, dup := registry.m[name]; dup {
		panic(fmt.Sprintf("providers: Register called twice for %q", name))
	}
	registry.m[name] = f
}

// Open opens the provider registered as name.
func Open(name string, cfg Config) (Provider, error) {
	registry.Lock()
	f := registry.m[name]
	registry.Unlock()
	if f == nil {
		return nil, Errorf(NotFound, "providers.Open", "no provider %q (have %v)", name, Names())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return f(cfg)
}

// Names returns the registered provider names, sorted.
func Names() []string {
	registry.Lock()
	defer registry.Unlock()
	names := make([]string, 0, len(registry.m))
	for n := range registry.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// CheckOptions returns an Invalid error for the first key of opts that is not
// among known.
func CheckOptions(op string, opts map[string]string, known ...string) error {
	for k := range opts {
		if !slices.Contains(known, k) {
			return Errorf(Invalid, op, "unknown option %q (known: %v)", k, known)
		}
	}
	return nil
}
