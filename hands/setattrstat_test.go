package hands_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
)

// Over the agent channel a chmod and an unlink of one name of a hard
// link are answered with what they left (the file's change time, the
// other name's link count), so the cache drops the watch's reports of
// them as echoes; the script path cannot answer so, and says Unsupported
// having changed nothing.
func TestSetattrAndRemoveStat(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		via  string
		opts hands.Options
	}{
		{hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)}},
		{hands.ViaScript, hands.Options{}},
	} {
		t.Run("via="+tc.via, func(t *testing.T) {
			h, root := openOn(t, newLocalBox(t), tc.via, tc.opts)
			obj, tmp := filepath.Join(root, "obj"), filepath.Join(root, "tmp")
			require.NoError(t, os.WriteFile(tmp, []byte("object"), 0o644))
			require.NoError(t, os.Link(tmp, obj))

			fi, err := h.ChmodStat(ctx, obj, 0o444)
			if tc.via != hands.ViaAgent {
				assert.True(t, providers.IsCode(err, providers.Unsupported), "ChmodStat: %v", err)
				_, err = h.RemoveStat(ctx, tmp)
				assert.True(t, providers.IsCode(err, providers.Unsupported), "RemoveStat: %v", err)
				st, err := os.Lstat(tmp)
				require.NoError(t, err, "the name an unsupported RemoveStat was asked to remove")
				assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), "the mode after an unsupported ChmodStat")
				return
			}
			require.NoError(t, err)
			want, err := h.Lstat(ctx, obj)
			require.NoError(t, err)
			assert.True(t, fi.Ctime.Equal(want.Ctime) && fi.Ino == want.Ino && fi.Mode == want.Mode && fi.Mode.Perm() == 0o444,
				"ChmodStat says %+v; a stat after it %+v", fi, want)

			fi, err = h.RemoveStat(ctx, tmp)
			require.NoError(t, err)
			want, err = h.Lstat(ctx, obj)
			require.NoError(t, err)
			assert.True(t, fi.Ctime.Equal(want.Ctime) && fi.Ino == want.Ino && fi.Nlink == 1 && want.Nlink == 1,
				"RemoveStat says %+v; a stat of the other name after it %+v", fi, want)
			_, err = os.Lstat(tmp)
			assert.True(t, os.IsNotExist(err), "the removed name: %v", err)
		})
	}
}
