//go:build !unix

package ledger

import "os"

// lockedAppendLabel takes the next box number; without flock, processes
// sharing a state directory may race.
func lockedAppendLabel(name string, known int) (int, error) {
	_, statErr := os.Stat(name)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return appendNextLabel(f, known, os.IsNotExist(statErr))
}
