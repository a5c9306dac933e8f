package hands_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/boxfs/boxfs/hands"
)

// TestConformance runs the table against every path hands has, each
// compared with the os package on a host directory.
func TestConformance(t *testing.T) {
	t.Run("via=script/box=hostbox", func(t *testing.T) {
		box := newHostBox(t)
		h, err := hands.New(context.Background(), box, hands.Options{Force: hands.ViaScript})
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(box.dir, "conf")
		if err := h.Mkdir(context.Background(), root, 0o755); err != nil {
			t.Fatal(err)
		}
		runConformance(t, row{name: "script", files: h, walker: h, root: root})
	})
}

// TestHostilePaths does every operation on names with spaces, newlines,
// quotes, a leading '-', non-UTF-8 bytes and shell syntax, through each
// path, compared with the os package.
func TestHostilePaths(t *testing.T) {
	t.Run("via=script/box=hostbox", func(t *testing.T) {
		box := newHostBox(t)
		h, err := hands.New(context.Background(), box, hands.Options{Force: hands.ViaScript})
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(box.dir, "hostile")
		if err := h.Mkdir(context.Background(), root, 0o755); err != nil {
			t.Fatal(err)
		}
		runHostile(t, row{name: "script", files: h, walker: h, root: root})
		for _, dir := range []string{"/", box.dir, root} {
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Errorf("a name ran as a command in the box: %s/pwned exists", dir)
			}
		}
	})
}
