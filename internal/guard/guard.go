// Package guard keeps a panic in work done for one box (a goroutine that
// watches it, waits for its command, parses what it sent) from ending the
// process that serves every box.
package guard

import (
	"runtime/debug"

	"github.com/boxfs/boxfs/providers"
)

// Run calls fn and returns a panic in it as an Unknown error that carries
// the panic's value and stack; nil when fn returned.
func Run(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = providers.Errorf(providers.Unknown, "guard", "panic: %v\n%s", r, debug.Stack())
		}
	}()
	fn()
	return nil
}

// Go runs fn in a goroutine of its own; a panic in it is handed to
// caught as Run's error instead of ending the process.
func Go(fn func(), caught func(error)) {
	go func() {
		if err := Run(fn); err != nil {
			caught(err)
		}
	}()
}
