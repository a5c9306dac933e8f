package testbox

import (
	"os"
	"os/exec"
	"testing"
)

// RequireNPM returns when node and npm are on PATH, which the checks of a
// fake against its vendor's published client need. Without them it skips
// the test, or fails it under BOXFS_REQUIRE_NPM=1 (CI, whose machine has
// Node and reaches the npm registry).
func RequireNPM(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			NPMUnavailable(t, "%s is not on PATH: %v", tool, err)
		}
	}
}

// NPMUnavailable ends a test that could not get what it needs from npm (a
// pack the registry did not serve, a Node too old): it skips, or fails
// under BOXFS_REQUIRE_NPM=1.
func NPMUnavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("BOXFS_REQUIRE_NPM") == "1" {
		t.Fatalf("BOXFS_REQUIRE_NPM=1: "+format, args...)
	}
	t.Skipf(format+" (set BOXFS_REQUIRE_NPM=1 to fail instead of skipping)", args...)
}
