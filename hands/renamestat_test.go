package hands_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/boxfs/boxfs/hands"
)

// Over a local box's own files, a rename is answered with the attributes
// it left (the box's RenameStat), as over the agent channel: the cache
// records the moved file's new change time and drops the watch's report
// of it as the echo of the rename (F-echo).
func TestRenameStatNativeFiles(t *testing.T) {
	ctx := context.Background()
	h, root := openOn(t, newLocalBox(t), hands.ViaNativeFiles, hands.Options{})
	for _, n := range []string{"f", "g"} {
		if err := os.WriteFile(filepath.Join(root, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fi, dirs, err := h.RenameStat(ctx, filepath.Join(root, "f"), filepath.Join(root, "g"))
	if err != nil {
		t.Fatalf("RenameStat over a local box's files: %v", err)
	}
	want, err := h.Lstat(ctx, filepath.Join(root, "g"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Ino != want.Ino || !fi.Ctime.Equal(want.Ctime) || fi.Size != 1 || len(dirs) != 1 {
		t.Errorf("RenameStat says %+v and %d directories; a stat after it %+v", fi, len(dirs), want)
	}
}
