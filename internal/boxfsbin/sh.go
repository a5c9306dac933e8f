package boxfsbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var sh struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// ShPath returns the path of a freshly built boxfs-sh (cmd/boxfs-sh),
// building it on the first call, beside the boxfs binary Path builds.
func ShPath(t testing.TB) string {
	t.Helper()
	sh.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "boxfs-testbin", checkout())
		if sh.err = os.MkdirAll(dir, 0o755); sh.err != nil {
			return
		}
		sh.path = filepath.Join(dir, "boxfs-sh")
		tmp := fmt.Sprintf("%s.%d", sh.path, os.Getpid())
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/boxfs/boxfs/cmd/boxfs-sh")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if sh.out, sh.err = cmd.CombinedOutput(); sh.err != nil {
			os.Remove(tmp)
			return
		}
		sh.err = os.Rename(tmp, sh.path)
	})
	if sh.err != nil {
		t.Fatalf("building boxfs-sh: %v\n%s", sh.err, sh.out)
	}
	return sh.path
}
