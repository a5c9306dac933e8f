package boxfsbin

import (
	"os"
	"os/exec"
	"testing"
)

var cgo binary

// CgoPath returns the path of a boxfs binary built the usual way with a C
// compiler at hand (CGO_ENABLED=1, so dynamically linked: net and os/user
// use cgo), building it on the first call. The test is skipped when no C
// compiler is found (CI has one); a failed build fails it.
func CgoPath(t testing.TB) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s): a cgo build cannot be made here", cc)
	}
	return cgo.get(t, "boxfs-cgo", "github.com/boxfs/boxfs/cmd/boxfs", "CGO_ENABLED=1")
}
