//go:build unix

package ledger

import (
	"os"
	"syscall"
)

// lockedAppendLabel takes the next box number under an exclusive flock of
// the labels file: it reads the highest number listed (or known, if
// higher), appends the next one and fsyncs it.
func lockedAppendLabel(name string, known int) (int, error) {
	_, statErr := os.Stat(name)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close() // releases the lock
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	return appendNextLabel(f, known, os.IsNotExist(statErr))
}
