//go:build !linux

package agent

import "syscall"

// linuxErrnos maps the Linux errno numbers a box reports to this host's.
var linuxErrnos = map[uint32]syscall.Errno{
	1: syscall.EPERM, 2: syscall.ENOENT, 4: syscall.EINTR, 5: syscall.EIO,
	9: syscall.EBADF, 11: syscall.EAGAIN, 12: syscall.ENOMEM, 13: syscall.EACCES,
	16: syscall.EBUSY, 17: syscall.EEXIST, 18: syscall.EXDEV, 19: syscall.ENODEV,
	20: syscall.ENOTDIR, 21: syscall.EISDIR, 22: syscall.EINVAL, 23: syscall.ENFILE,
	24: syscall.EMFILE, 26: syscall.ETXTBSY, 27: syscall.EFBIG, 28: syscall.ENOSPC,
	29: syscall.ESPIPE, 30: syscall.EROFS, 31: syscall.EMLINK, 32: syscall.EPIPE,
	36: syscall.ENAMETOOLONG, 38: syscall.ENOSYS, 39: syscall.ENOTEMPTY, 40: syscall.ELOOP,
	95: syscall.ENOTSUP, 110: syscall.ETIMEDOUT, 122: syscall.EDQUOT,
}

// hostErrno converts a Linux errno number from the wire to this host's.
func hostErrno(n uint32) syscall.Errno {
	if e, ok := linuxErrnos[n]; ok {
		return e
	}
	return syscall.EIO
}
