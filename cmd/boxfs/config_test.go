package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
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
