package hands_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
)

// Hands sets a link's own times and owner on every path: the local box's
// own files, the agent, and the fixed scripts (chown -h, touch -h).
func TestLinkAttrs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		via  string
		opts hands.Options
	}{
		{hands.ViaNativeFiles, hands.Options{}},
		{hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)}},
		{hands.ViaScript, hands.Options{}},
	} {
		t.Run("via="+tc.via, func(t *testing.T) {
			h, root := openOn(t, newLocalBox(t), tc.via, tc.opts)
			target := filepath.Join(root, "target")
			require.NoError(t, h.WriteFile(ctx, target, strings.NewReader("x"), 0o644))
			tbefore, err := h.Lstat(ctx, target)
			require.NoError(t, err)
			for _, name := range []string{"dangling", "link"} {
				link := filepath.Join(root, name)
				require.NoError(t, h.Symlink(ctx, map[string]string{"dangling": "missing", "link": "target"}[name], link))
				before, err := h.Lstat(ctx, link)
				require.NoError(t, err)
				mt := time.Date(2002, 2, 2, 2, 2, 2, 123456789, time.UTC)
				require.NoError(t, h.Lutimes(ctx, link, time.Time{}, mt))
				cerr := h.Lchown(ctx, link, -1, 4322)
				after, err := h.Lstat(ctx, link)
				require.NoError(t, err)
				assert.True(t, after.Mtime.Equal(mt), "%s: mtime %v, want %v", name, after.Mtime, mt)
				if os.Geteuid() == 0 {
					assert.NoError(t, cerr)
					assert.Equal(t, uint32(4322), after.GID, name)
					assert.Equal(t, before.UID, after.UID, name)
				}
			}
			tafter, err := h.Lstat(ctx, target)
			require.NoError(t, err)
			assert.True(t, tafter.Mtime.Equal(tbefore.Mtime), "the link's target changed: mtime %v, was %v", tafter.Mtime, tbefore.Mtime)
			assert.Equal(t, tbefore.GID, tafter.GID, "the link's target's group changed")
		})
	}
}
