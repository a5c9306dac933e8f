package boxfsbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var cgo struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

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
	cgo.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "boxfs-testbin", checkout())
		if cgo.err = os.MkdirAll(dir, 0o755); cgo.err != nil {
			return
		}
		cgo.path = filepath.Join(dir, "boxfs-cgo")
		tmp := fmt.Sprintf("%s.%d", cgo.path, os.Getpid())
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/boxfs/boxfs/cmd/boxfs")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if cgo.out, cgo.err = cmd.CombinedOutput(); cgo.err != nil {
			os.Remove(tmp)
			return
		}
		cgo.err = os.Rename(tmp, cgo.path)
	})
	if cgo.err != nil {
		t.Fatalf("building boxfs with cgo: %v\n%s", cgo.err, cgo.out)
	}
	return cgo.path
}
