package hands_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// checkRemoveFiles removes a tree's names through h in one RemoveFiles and
// checks each entry's result and what is left: in order (a directory
// emptied by the entries before it goes), NotFound for a name already
// gone, Exists for a directory not empty, Invalid for a directory given
// as a file; over the agent, in one round trip.
func checkRemoveFiles(t *testing.T, h *hands.Hands, root string) {
	t.Helper()
	ctx := context.Background()
	for _, d := range []string{"d", "d/sub", "kept"} {
		require.NoError(t, h.Mkdir(ctx, root+"/"+d, 0o755))
	}
	for _, f := range []string{"d/a", "d/sub/b", "kept/k"} {
		require.NoError(t, h.WriteFile(ctx, root+"/"+f, strings.NewReader(f), 0o644))
	}
	require.NoError(t, h.Symlink(ctx, "sub", root+"/d/link"))
	rms := []providers.FileRemove{
		{Name: root + "/d/a"},
		{Name: root + "/d/sub/b"},
		{Name: root + "/d/link"},
		{Name: root + "/d/sub", Dir: true},
		{Name: root + "/d", Dir: true},
		{Name: root + "/d/a"},
		{Name: root + "/kept", Dir: true},
		{Name: root + "/kept"},
	}
	before, viaAgent := h.AgentStats()
	errs, err := h.RemoveFiles(ctx, rms)
	require.NoError(t, err)
	if after, _ := h.AgentStats(); viaAgent {
		assert.Equal(t, int64(1), after.RoundTrips-before.RoundTrips, "round trips of the agent")
	}
	require.Len(t, errs, len(rms))
	want := []providers.Code{0, 0, 0, 0, 0, providers.NotFound, providers.Exists, providers.Invalid}
	for i, err := range errs {
		if want[i] == 0 {
			assert.NoError(t, err, "entry %d (%+v)", i, rms[i])
		} else {
			assert.Equal(t, want[i].String(), providers.CodeOf(err).String(), "entry %d (%+v): %v", i, rms[i], err)
		}
	}
	_, err = h.Lstat(ctx, root+"/d")
	assert.True(t, providers.IsCode(err, providers.NotFound), "the removed tree: %v", err)
	_, err = h.Lstat(ctx, root+"/kept/k")
	assert.NoError(t, err, "the directory not removed keeps its file")
}

// RemoveFiles removes in order, with each entry's own result, on every
// path: in one round trip over the agent, one call each elsewhere.
func TestRemoveFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		box  func(*testing.T) providers.Box
		via  string
		opts hands.Options
	}{
		{"via=agent/box=local", newLocalBox, hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)}},
		{"via=native-files/box=local", newLocalBox, hands.ViaNativeFiles, hands.Options{}},
		{"via=script/box=local", newLocalBox, hands.ViaScript, hands.Options{}},
		{"via=agent/box=docker", testbox.NewDocker, hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, root := openOn(t, tc.box(t), tc.via, tc.opts)
			checkRemoveFiles(t, h, root)
		})
	}
}

// batchlessBox is a local box whose files have a BatchRemover that
// answers Unsupported, as an agent without the operation does.
type batchlessBox struct {
	*local.Box
	asked atomic.Int32
}

func (b *batchlessBox) RemoveFiles(ctx context.Context, rms []providers.FileRemove) ([]error, error) {
	b.asked.Add(1)
	return nil, providers.Errorf(providers.Unsupported, "test.RemoveFiles", "no batches")
}

// A BatchRemover that answers Unsupported is not asked again: the
// removals go one call each, in order, with the same results.
func TestRemoveFilesUnsupported(t *testing.T) {
	lb, ok := newLocalBox(t).(*local.Box)
	require.True(t, ok, "the local provider's box is a *local.Box")
	box := &batchlessBox{Box: lb}
	h, root := openOn(t, box, hands.ViaNativeFiles, hands.Options{})
	checkRemoveFiles(t, h, root)
	checkRemoveFiles(t, h, root+"/kept")
	assert.Equal(t, int32(1), box.asked.Load(), "the batch remover was asked")
}
