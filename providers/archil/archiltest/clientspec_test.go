package archiltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/testbox"
)

// TestClientSpec re-checks every fact the fake relies on against the
// vendor's published client, fetched with npm. Where npm is missing or
// cannot reach the registry, it skips and says why, or fails under
// BOXFS_REQUIRE_NPM=1.
func TestClientSpec(t *testing.T) {
	testbox.RequireNPM(t)
	dir := t.TempDir()
	out, err := exec.Command("npm", "pack", ClientPackage, "--pack-destination", dir, "--silent").CombinedOutput()
	if err != nil {
		testbox.NPMUnavailable(t, "npm pack %s failed (no registry here?): %v\n%s", ClientPackage, err, out)
	}
	tgz := filepath.Join(dir, strings.TrimSpace(lastLine(string(out))))
	require.NoError(t, exec.Command("tar", "-xzf", tgz, "-C", dir).Run())
	files := map[string]string{}
	for _, f := range ClientSpec {
		if _, ok := files[f.File]; !ok {
			b, err := os.ReadFile(filepath.Join(dir, f.File))
			require.NoError(t, err, "the client package has no %s", f.File)
			files[f.File] = string(b)
		}
		assert.Contains(t, files[f.File], f.Needle, "%s: %s no longer says it", f.What, f.File)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
