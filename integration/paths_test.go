package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWorkspaceHostPathsAgree makes a Docker box with workspace=host: the
// box keeps its workspace at the host's path of its work/, so what a
// command prints of a workspace file (pwd -P, realpath, git's top level,
// a compiler-style error with an absolute path) is a path the host opens
// as it is, and sees the box's bytes at.
func TestWorkspaceHostPathsAgree(t *testing.T) {
	requireProvider(t, "docker")
	m := startMount(t, "docker", 15*time.Second)
	b := m.newBox(t, "pa", "workspace=host")
	if err := os.MkdirAll(filepath.Join(b.work, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.work, "src", "main.c"), []byte("int main() { return 0 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	top := strings.TrimSpace(b.must(t, "pwd -P"))
	if top != b.work {
		t.Errorf("pwd -P in the box: %q, want the host's %q", top, b.work)
	}
	// A compiler's error, with the absolute path it was given.
	msg := strings.TrimSpace(b.must(t, `cd src && echo "$(realpath main.c):1:24: error: expected ';'"`))
	printed, _, _ := strings.Cut(msg, ":")
	got, err := os.ReadFile(printed)
	if err != nil || !strings.HasPrefix(string(got), "int main()") {
		t.Errorf("the host opening the path the box printed (%q): %q, %v", printed, got, err)
	}
	if git := strings.TrimSpace(b.must(t, "command -v git >/dev/null || { echo nogit; exit 0; }; git init -q src && cd src && git rev-parse --show-toplevel")); git != "nogit" {
		if want := filepath.Join(b.work, "src"); git != want {
			t.Errorf("git rev-parse --show-toplevel in the box: %q, want %q", git, want)
		}
	}
}
