package agent

import (
	"os"
	"syscall"
)

// fileIdentity returns the device, inode and change time of st's file.
func fileIdentity(st os.FileInfo) (dev, ino uint64, ctime int64) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Dev), sys.Ino, sys.Ctim.Nano()
	}
	return 0, 0, 0
}
