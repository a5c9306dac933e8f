package boxes

import (
	"os"

	"golang.org/x/sys/unix"
)

// punchHole frees the blocks of f from off for n bytes; its size and the
// offsets of what follows stay.
func punchHole(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
