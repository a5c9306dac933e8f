package agent

import "syscall"

// hostErrno converts a Linux errno number from the wire to this host's.
func hostErrno(n uint32) syscall.Errno { return syscall.Errno(n) }
