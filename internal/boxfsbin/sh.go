package boxfsbin

import "testing"

var sh binary

// ShPath returns the path of a freshly built boxfs-sh (cmd/boxfs-sh),
// building it on the first call, beside the boxfs binary Path builds.
func ShPath(t testing.TB) string {
	t.Helper()
	return sh.get(t, "boxfs-sh", "github.com/boxfs/boxfs/cmd/boxfs-sh", "CGO_ENABLED=0")
}
