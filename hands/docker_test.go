package hands_test

import (
	"testing"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
)

// newBusyboxBox makes a container box of the busybox image (no bash, no
// GNU tools).
func newBusyboxBox(t *testing.T) providers.Box {
	t.Helper()
	return testbox.NewDockerOf(t, providers.Spec{Image: "boxfs-busybox:latest"})
}
