package boxes_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/syncengine"
)

// A tree seeded into a box comes back whole by a pull, odd names
// included, on a box that streams stdin (local) and on one that takes none
// (archil), where the pull's list of paths cannot ride on stdin.
func TestSeedThenPull(t *testing.T) {
	for _, row := range rowsNamed("local", "archil") {
		t.Run("provider="+row.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			p, spec := row.open(t)
			m := managerOn(t, p)
			require.NoError(t, m.Create(ctx, "a", "", spec))
			defer func() { assert.NoError(t, m.Destroy(ctx, "a")) }()

			src := t.TempDir()
			want := map[string]string{"-dash": "D", "n\nl": "N", "sp ace": "S", "sub/inner": "I"}
			for i := range 600 { // more names than one command's arguments take
				want[fmt.Sprintf("d%d/file-%03d-%040d", i%3, i, i)] = fmt.Sprint(i)
			}
			for name, body := range want {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(body), 0o644))
			}
			_, err := m.Seed(ctx, "a", src, syncengine.SeedOptions{})
			require.NoError(t, err)

			dst := t.TempDir()
			rc, err := m.Pull(ctx, "a", dst, syncengine.PullOptions{})
			require.NoError(t, err)
			assert.Equal(t, len(want), rc.Files)
			for name, body := range want {
				got, err := os.ReadFile(filepath.Join(dst, name))
				if assert.NoError(t, err, name) {
					assert.Equal(t, body, string(got), name)
				}
			}
		})
	}
}
