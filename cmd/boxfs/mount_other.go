//go:build !linux

package main

import (
	"errors"
	"syscall"

	"github.com/boxfs/boxfs/providers"
)

func isStale(err error) bool {
	return errors.Is(err, syscall.ENOTCONN)
}

func lazyUnmount(mnt string) error {
	return providers.Errorf(providers.Unsupported, "umount", "lazy unmount is implemented on Linux only").WithPath(mnt)
}

func unmount(mnt string) error {
	return syscall.Unmount(mnt, 0)
}

func mountedAt(mnt string) (string, bool) { return "", false }

func lockHolder(state string) (int, bool) { return 0, false }
