package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/stretchr/testify/require"
)

// posixtestSkip says why a case of go-fuse's suite is not run on a box
// whose facts say isolation, or "" to run it.
func posixtestSkip(name, isolation string) string {
	switch {
	case name == "FcntlFlockLocksFile":
		return "it expects a lock of one process to conflict with another lock of the same process, " +
			"which POSIX locks never do: it fails on the host's own disk too"
	case name == "SymlinkReadlink" && isolation != "none":
		return "an absolute symlink target on a box that isolates reads relative, inside the mount " +
			"(transform_symlinks, docs/namespace.md)"
	}
	return ""
}

// TestGoFusePosix runs go-fuse's POSIX suite (posixtest.All) in a fresh
// directory of work/ of each provider row's box.
func TestGoFusePosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, prov := range providerRows {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMount(t, prov, 20*time.Second)
			b := m.newBox(t, "box", "provider="+prov)
			data, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
			require.NoError(t, err)
			var facts struct {
				Isolation string `json:"isolation"`
			}
			require.NoError(t, json.Unmarshal(data, &facts), "%s", data)
			for _, name := range names {
				t.Run(name, func(t *testing.T) {
					if why := posixtestSkip(name, facts.Isolation); why != "" {
						t.Skip(why)
					}
					dir := filepath.Join(b.work, name)
					require.NoError(t, os.Mkdir(dir, 0o755))
					posixtest.All[name](t, dir)
				})
			}
		})
	}
}
