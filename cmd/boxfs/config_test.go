package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigDocExamples loads every TOML and YAML example of
// docs/config.md: the reference must describe a file boxfs takes.
func TestConfigDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(toml|yaml)\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) < 2 {
		t.Fatalf("found %d examples in docs/config.md, want a TOML and a YAML one", len(blocks))
	}
	for i, b := range blocks {
		name := filepath.Join(t.TempDir(), "config."+string(b[1]))
		if err := os.WriteFile(name, b[2], 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(name, true)
		if err != nil {
			t.Errorf("example %d (%s): %v", i+1, b[1], err)
			continue
		}
		if _, err := cfg.declared(); err != nil {
			t.Errorf("example %d (%s): declared boxes: %v", i+1, b[1], err)
		}
		if len(cfg.Environments) == 0 || len(cfg.Boxes) == 0 {
			t.Errorf("example %d (%s): %d environments, %d boxes; the example shows both", i+1, b[1], len(cfg.Environments), len(cfg.Boxes))
		}
	}
}

// TestEnvironmentPairs: an environment becomes the keys of a new message,
// and the command line's keys replace its.
func TestEnvironmentPairs(t *testing.T) {
	e := Environment{Provider: "docker", Memory: "2g", Lifetime: "3600", Env: map[string]string{"B": "2", "A": "1"}}
	got := mergePairs(e.pairs(), []string{"memory=512", "env.A=x"})
	want := []string{"provider=docker", "lifetime=3600", "env.B=2", "memory=512", "env.A=x"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

// A configuration file holding a credential is said to be exposed while
// its group or others can read it.
func TestConfigSecretsExposed(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		mode       os.FileMode
		want       string // a word of the warning; "" none
	}{
		{"provider key, world-readable", "[providers.daytona]\napi_key = \"k\"\n", 0o644, "providers.daytona.api_key"},
		{"provider key, group-readable", "[providers.daytona]\napi_key = \"k\"\n", 0o640, "providers.daytona.api_key"},
		{"provider key, private", "[providers.daytona]\napi_key = \"k\"\n", 0o600, ""},
		{"env token", "[environments.dev]\nenv = { GITHUB_TOKEN = \"t\" }\n", 0o644, "environments.dev.env.GITHUB_TOKEN"},
		{"nothing secret", "[environments.dev]\nenv = { LANG = \"C\" }\n", 0o644, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "config.toml")
			require.NoError(t, os.WriteFile(name, []byte(tt.text), 0o600))
			require.NoError(t, os.Chmod(name, tt.mode))
			cfg, err := loadConfig(name, true)
			require.NoError(t, err)
			got := cfg.exposedSecret()
			if tt.want == "" {
				assert.Empty(t, got)
			} else {
				assert.Contains(t, got, tt.want)
			}
		})
	}
}
