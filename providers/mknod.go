package providers

import (
	"context"
	"io/fs"
)

// Mknoder is an optional part of Files: special files, as mknod(2) makes
// them. The box's own file system answers: EPERM for a device node where
// the box lacks CAP_MKNOD, EEXIST for a name taken. A path that cannot
// make the kind asked for at all is Unsupported.
type Mknoder interface {
	// Mknod makes name a named pipe, a socket, or a character or block
	// device, the kind mode's type bits say, with mode's permission bits
	// (under the box's umask, as mknod(2)) and, for a device, the device
	// number dev (Linux's 64-bit dev_t).
	Mknod(ctx context.Context, name string, mode FileMode, dev uint64) error
}

// SpecialKinds are the type bits a Mknoder makes.
const SpecialKinds = fs.ModeNamedPipe | fs.ModeSocket | fs.ModeDevice | fs.ModeCharDevice

// IsSpecial reports whether mode is of a kind a Mknoder makes: a named
// pipe, a socket, or a device.
func IsSpecial(mode FileMode) bool { return mode&SpecialKinds != 0 }

// Mkdev makes a device number of major and minor, as Linux's 64-bit dev_t
// (glibc's makedev): a box is Linux whatever the host is.
func Mkdev(major, minor uint32) uint64 {
	return uint64(major&0xfffff000)<<32 | uint64(major&0xfff)<<8 |
		uint64(minor&0xffffff00)<<12 | uint64(minor&0xff)
}

// DevMajor is the major number of the Linux device number dev.
func DevMajor(dev uint64) uint32 {
	return uint32((dev>>8)&0xfff) | uint32((dev>>32)&0xfffff000)
}

// DevMinor is the minor number of the Linux device number dev.
func DevMinor(dev uint64) uint32 {
	return uint32(dev&0xff) | uint32((dev>>12)&0xffffff00)
}
