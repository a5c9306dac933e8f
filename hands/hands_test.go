package hands_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
)

// target is one way hands reaches one kind of box.
type target struct {
	name string // "via=script/box=hostbox"
	// open makes a fresh box and a Hands over it, and returns an empty
	// box-side directory to work in.
	open    func(t *testing.T) (h *hands.Hands, root string)
	partial bool
	known   map[string]string // see row.known
	// hostile is the set of names the hostile-path test uses; nil is
	// hostileNames. Rows that spend an exec in a container per operation
	// (~150 ms, several times that on a loaded machine) use fewer, and are
	// skipped under -short.
	hostile []string
}

// skipSlow skips a row that spends an exec in a container per operation
// under -short.
func (tg target) skipSlow(t *testing.T) {
	if tg.hostile != nil && testing.Short() {
		t.Skip("-short: an exec in a container per operation")
	}
}

func newLocalBox(t *testing.T) providers.Box {
	t.Helper()
	ctx := context.Background()
	box, err := local.New(t.TempDir()).Create(ctx, providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Destroy(context.Background()) })
	return box
}

// openOn makes a Hands pinned to via (or chosen, for "") over box, and a
// fresh directory under the box's workspace.
func openOn(t *testing.T, box providers.Box, via string, opts hands.Options) (*hands.Hands, string) {
	t.Helper()
	ctx := context.Background()
	opts.Force = via
	if via == hands.ViaNativeFiles {
		opts.Force = ""
	}
	h, err := hands.New(ctx, box, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if via != "" && h.Via() != via {
		t.Fatalf("hands chose %q, want %q", h.Via(), via)
	}
	root := filepath.Join(h.Facts().Workspace, "t")
	if err := h.Mkdir(ctx, root, 0o755); err != nil {
		t.Fatal(err)
	}
	return h, root
}

func targets() []target {
	return []target{
		{name: "via=script/box=hostbox", open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, newHostBox(t), hands.ViaScript, hands.Options{})
		}},
		{name: "via=native-files/box=local", open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, newLocalBox(t), hands.ViaNativeFiles, hands.Options{})
		}},
		{name: "via=script/box=local", open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, newLocalBox(t), hands.ViaScript, hands.Options{})
		}},
		{name: "via=agent/box=local", open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, newLocalBox(t), hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)})
		}},
		{name: "via=agent/box=docker", open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, testbox.NewDocker(t), hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)})
		}},
		{name: "via=native/box=docker", hostile: hostileMin, open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, testbox.NewDocker(t), hands.ViaNative, hands.Options{})
		}},
		{name: "via=script/box=docker", hostile: hostileCore, open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, testbox.NewDocker(t), hands.ViaScript, hands.Options{})
		}},
		{name: "via=script/box=busybox", hostile: hostileMin, open: func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, newBusyboxBox(t), hands.ViaScript, hands.Options{})
		}, known: map[string]string{
			"utimes": "busybox's touch and stat know whole seconds only",
			"mknod":  "busybox has no python3 or perl to make a socket with: Unsupported",
		}},
	}
}

// TestConformance runs the table against every path hands has, each
// compared with the os package on a host directory.
func TestConformance(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			tg.skipSlow(t)
			h, root := tg.open(t)
			runConformance(t, row{name: tg.name, files: h, walker: h, root: root, partial: tg.partial, known: tg.known})
		})
	}
}

// TestHostilePaths does every operation on names with spaces, newlines,
// quotes, a leading '-', non-UTF-8 bytes and shell syntax, through each
// path, compared with the os package.
func TestHostilePaths(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			tg.skipSlow(t)
			h, root := tg.open(t)
			names := hostileNames
			if tg.hostile != nil {
				names = tg.hostile
			}
			runHostile(t, row{name: tg.name, files: h, walker: h, root: root, partial: tg.partial}, names)
			for _, dir := range []string{"/", h.Facts().Workspace, root} {
				if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
					t.Errorf("a name ran as a command in the box: %s/pwned exists", dir)
				}
			}
		})
	}
}
