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

var boxfs binary

// Path returns the path of a freshly built static boxfs binary, building it
// on the first call. It fails the test if the build fails.
func Path(t testing.TB) string {
	t.Helper()
	return boxfs.get(t, "boxfs", "github.com/boxfs/boxfs/cmd/boxfs",
		"CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
}

// binary is one program built for the tests, once per test process.
type binary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// get builds pkg with env on its first call, as name in one fixed place
// per checkout, so test runs do not leave a binary each and a run in
// another checkout (other sources) never replaces this one's; every
// process builds to its own name and renames it into place, so a
// concurrent reader always finds a whole file. It fails the test if the
// build fails.
func (b *binary) get(t testing.TB, name, pkg string, env ...string) string {
	t.Helper()
	b.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "boxfs-testbin", checkout())
		if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(dir, name)
		tmp := fmt.Sprintf("%s.%d", b.path, os.Getpid())
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, pkg)
		cmd.Env = append(os.Environ(), env...)
		if b.out, b.err = cmd.CombinedOutput(); b.err != nil {
			os.Remove(tmp)
			return
		}
		b.err = os.Rename(tmp, b.path)
	})
	if b.err != nil {
		t.Fatalf("building %s: %v\n%s", name, b.err, b.out)
	}
	return b.path
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
