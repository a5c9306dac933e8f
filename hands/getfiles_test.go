package hands_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
)

// noStdinBox is a hostBox whose Exec refuses stdin, as an Archil box's
// does, and whose facts say so.
type noStdinBox struct{ *hostBox }

func (b noStdinBox) Facts(ctx context.Context) (providers.Facts, error) {
	f, err := b.hostBox.Facts(ctx)
	f.Stdin = providers.Bool(false)
	return f, err
}

func (b noStdinBox) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	if req.Stdin != nil {
		return nil, providers.Errorf(providers.Unsupported, "nostdin.Exec", "this box takes no stdin")
	}
	return b.hostBox.Exec(ctx, req)
}

// TestGetFilesWithoutStdin: on a box that takes no stdin, GetFiles still
// gives one tar of the paths asked for, hostile names included, however
// many: the names go as arguments, in as many execs as they need.
func TestGetFilesWithoutStdin(t *testing.T) {
	ctx := context.Background()
	box := noStdinBox{newHostBox(t)}
	var execs atomic.Int64
	h, root := openOn(t, box, "", hands.Options{OnExec: func(error) { execs.Add(1) }})

	want := map[string]string{"-dash": "D", "n\nl": "N", "\xff": "F", "sp ace": "S"}
	for i := range 700 {
		want[fmt.Sprintf("file-%03d-%s", i, strings.Repeat("x", 40))] = fmt.Sprint(i)
	}
	for name, body := range want {
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(body), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "sub", "inner"), []byte("I"), 0o644))
	paths := []string{"sub"}
	for name := range want {
		paths = append(paths, name)
	}
	sort.Strings(paths)

	before := execs.Load()
	rc, err := h.GetFiles(ctx, root, paths)
	require.NoError(t, err)
	got := members(t, rc)
	assert.Greater(t, execs.Load()-before, int64(1), "the names need more than one exec")
	var wantMembers []string
	for _, p := range paths {
		if p == "sub" {
			wantMembers = append(wantMembers, "sub/|5|")
		} else {
			wantMembers = append(wantMembers, p+"|0|"+want[p])
		}
	}
	assert.Equal(t, wantMembers, got)

	rc, err = h.GetFiles(ctx, root, nil)
	require.NoError(t, err)
	assert.Empty(t, members(t, rc), "no paths: an empty tar")

	_, err = h.GetFiles(ctx, root+"/missing", []string{"a"})
	assert.True(t, providers.IsCode(err, providers.NotFound), "a missing root: %v", err)
	_, err = h.GetFiles(ctx, root, []string{"../etc/passwd"})
	assert.True(t, providers.IsCode(err, providers.Unsafe), "../etc/passwd: %v", err)

	// A path gone from a later batch fails the archive, after the members
	// before it.
	rc, err = h.GetFiles(ctx, root, append(paths, "zz-gone"))
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	rc.Close()
	assert.Error(t, err, "reading an archive that missed a path")
	assert.Greater(t, len(members(t, io.NopCloser(bytes.NewReader(data)))), 0)
}
