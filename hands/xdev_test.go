package hands_test

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// TestCrossDevice: a rename or link from the workspace to /dev/shm (a
// tmpfs on this machine and in every container) is EXDEV, as rename(2) and
// link(2) say, never a copy.
func TestCrossDevice(t *testing.T) {
	var shm, tmp syscall.Stat_t
	if err := syscall.Stat("/dev/shm", &shm); err != nil || syscall.Stat(t.TempDir(), &tmp) != nil || shm.Dev == tmp.Dev {
		t.Skipf("/dev/shm is not a file system of its own here (%v)", err)
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (*hands.Hands, string)
	}{
		{"via=script/box=hostbox", func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, newHostBox(t), hands.ViaScript, hands.Options{})
		}},
		{"via=agent/box=hostbox", func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, newHostBox(t), hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)})
		}},
		{"via=script/box=docker", func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, testbox.NewDocker(t), hands.ViaScript, hands.Options{})
		}},
		{"via=agent/box=docker", func(t *testing.T) (*hands.Hands, string) {
			return openOn(t, testbox.NewDocker(t), hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, root := tc.open(t)
			ctx := context.Background()
			if err := h.WriteFile(ctx, root+"/f", strings.NewReader("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			other := "/dev/shm/.boxfs-xdev-" + strings.ReplaceAll(t.Name(), "/", "-")
			for name, err := range map[string]error{
				"rename": h.Rename(ctx, root+"/f", other),
				"link":   h.Link(ctx, root+"/f", other),
			} {
				if errno, _ := providers.ErrnoOf(err); errno != syscall.EXDEV {
					t.Errorf("%s across file systems: %v, want EXDEV", name, err)
				}
			}
			if _, err := h.Lstat(ctx, other); !providers.IsCode(err, providers.NotFound) {
				t.Errorf("something landed at %s: %v", other, err)
				h.Remove(ctx, other)
			}
		})
	}
}
