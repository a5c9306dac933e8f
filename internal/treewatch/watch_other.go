//go:build !linux

package treewatch

import "context"

// Watch reports the changes under root; only Linux has inotify.
func Watch(ctx context.Context, root string, opts Options) error { return ErrNotLinux }
