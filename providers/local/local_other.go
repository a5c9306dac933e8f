//go:build !linux

package local

import (
	"context"
	"errors"

	"github.com/boxfs/boxfs/providers"
)

// The local provider finds a box's processes through /proc and starts its
// watchdog through /proc/self/exe: it runs on Linux only. Elsewhere it
// compiles, and refuses to make boxes.

var errNotLinux = errors.New("the local provider needs Linux")

func startWatchdog(ctx context.Context, dir string) (int, error) {
	return 0, providers.E(providers.Unsupported, "local.Create", errNotLinux)
}

func ensureWatchdog(ctx context.Context, dir string, rec record) error {
	return providers.E(providers.Unsupported, "local.Attach", errNotLinux)
}

func watchdogMain(dir string) int { return 2 }

func stopWatchdog(pid int, dir string) {}

func lockBox(ctx context.Context, dir string, exclusive bool) (func(), error) {
	return nil, providers.E(providers.Unsupported, "local.lock", errNotLinux)
}

func sweep(ctx context.Context, id string) error { return errNotLinux }

func mountsUnder(dir string) []string { return nil }

func memoryMB() int { return 0 }

func ptraceScope() *int { return nil }

func diskGB(dir string) float64 { return 0 }

// Exec is Unsupported off Linux.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	return nil, providers.E(providers.Unsupported, "local.Exec", errNotLinux).WithBox(b.id)
}

func lstatChange(root, rel string) providers.Change { return providers.Change{Path: rel} }
