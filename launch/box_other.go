//go:build !linux

package launch

import (
	"fmt"
	"os"
)

// BoxMain runs the launch supervisor in a box, which is Linux only.
func BoxMain(args []string) int {
	fmt.Fprintln(os.Stderr, "boxfs-launch: the launch supervisor runs on Linux only")
	return exitUnsupported
}
