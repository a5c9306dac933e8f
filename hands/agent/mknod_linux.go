package agent

import (
	"net/url"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// mknodAt makes the special file p (opMknod) with the query's mode and
// dev, and answers its attributes when asked. Only the kinds mknod(2)
// makes without a regular file's or a directory's calls are taken.
func mknodAt(p string, q url.Values) error {
	mode, err := strconv.ParseUint(q.Get("mode"), 8, 32)
	if err != nil {
		return errnoErr(syscall.EINVAL)
	}
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR, unix.S_IFBLK:
	default:
		return errnoErr(syscall.EINVAL)
	}
	dev, err := strconv.ParseUint(q.Get("dev"), 10, 64)
	if err != nil {
		return errnoErr(syscall.EINVAL)
	}
	if err := unix.Mknod(p, uint32(mode), int(dev)); err != nil {
		return toWire(err)
	}
	return answerStat(q, p)
}
