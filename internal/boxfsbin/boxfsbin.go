// Package boxfsbin builds the boxfs binary for tests: static (CGO off), for
// this host's OS and architecture, once per test process.
package boxfsbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
	out  []byte
)

// Path returns the path of a freshly built static boxfs binary, building it
// on the first call. It fails the test if the build fails.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		// One fixed place per checkout, so test runs do not leave a
		// binary each and a run in another checkout (other sources) never
		// replaces this one's; every process builds to its own name and
		// renames it into place, so a concurrent reader always finds a
		// whole file.
		dir := filepath.Join(os.TempDir(), "boxfs-testbin", checkout())
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return
		}
		path = filepath.Join(dir, "boxfs")
		tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/boxfs/boxfs/cmd/boxfs")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
		if out, err = cmd.CombinedOutput(); err != nil {
			os.Remove(tmp)
			return
		}
		err = os.Rename(tmp, path)
	})
	if err != nil {
		t.Fatalf("building boxfs: %v\n%s", err, out)
	}
	return path
}

// checkout names the module's directory: a short hash of its path (the
// nearest directory above the working directory holding go.mod).
func checkout() string {
	dir, err := os.Getwd()
	if err != nil {
		return "unknown"
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			dir = d
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:6])
}
