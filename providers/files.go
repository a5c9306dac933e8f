package providers

import (
	"io/fs"
	"syscall"
	"time"
)

// FileMode is Go's portable file mode: type bits plus permissions, including
// setuid, setgid and sticky.
type FileMode = fs.FileMode

// FileInfo is one box file's attributes, to the nanosecond.
type FileInfo struct {
	Name  string    `json:"name"` // the base name
	Mode  FileMode  `json:"mode"`
	Size  int64     `json:"size"`
	Mtime time.Time `json:"mtime"`
	Atime time.Time `json:"atime,omitzero"`
	Ctime time.Time `json:"ctime,omitzero"`
	Ino   uint64    `json:"ino,omitempty"`
	Nlink uint32    `json:"nlink,omitempty"`
	UID   uint32    `json:"uid"`
	GID   uint32    `json:"gid"`
	Dev   uint64    `json:"dev,omitempty"`
	// Rdev is a device node's device number, as Linux's 64-bit dev_t
	// (unix.Mkdev); 0 for anything else.
	Rdev uint64 `json:"rdev,omitempty"`
	// Target is a symlink's target where the listing carried it.
	Target string `json:"target,omitempty"`
}

// IsDir reports whether the entry is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }

// IsRegular reports whether the entry is a regular file.
func (fi FileInfo) IsRegular() bool { return fi.Mode.IsRegular() }

// IsSymlink reports whether the entry is a symbolic link.
func (fi FileInfo) IsSymlink() bool { return fi.Mode&fs.ModeSymlink != 0 }

// StatFS is a box file system's capacity.
type StatFS struct {
	Bsize   uint32 `json:"bsize"`
	Blocks  uint64 `json:"blocks"`
	Bfree   uint64 `json:"bfree"`
	Bavail  uint64 `json:"bavail"`
	Files   uint64 `json:"files"`
	Ffree   uint64 `json:"ffree"`
	NameLen uint32 `json:"nameLen"`
}

// Unix mode bits, as Linux numbers them (a box is Linux whatever the host is).
const (
	unixIFMT   = 0o170000
	unixIFSOCK = 0o140000
	unixIFLNK  = 0o120000
	unixIFREG  = 0o100000
	unixIFBLK  = 0o060000
	unixIFDIR  = 0o040000
	unixIFCHR  = 0o020000
	unixIFIFO  = 0o010000
	unixISUID  = 0o4000
	unixISGID  = 0o2000
	unixISVTX  = 0o1000
)

// UnixMode converts a FileMode to a Linux st_mode.
func UnixMode(m FileMode) uint32 {
	u := uint32(m.Perm())
	switch {
	case m.IsDir():
		u |= unixIFDIR
	case m&fs.ModeSymlink != 0:
		u |= unixIFLNK
	case m&fs.ModeNamedPipe != 0:
		u |= unixIFIFO
	case m&fs.ModeSocket != 0:
		u |= unixIFSOCK
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice != 0:
		u |= unixIFCHR
	case m&fs.ModeDevice != 0:
		u |= unixIFBLK
	default:
		u |= unixIFREG
	}
	if m&fs.ModeSetuid != 0 {
		u |= unixISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= unixISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= unixISVTX
	}
	return u
}

// FileModeFromUnix converts a Linux st_mode to a FileMode.
func FileModeFromUnix(u uint32) FileMode {
	m := FileMode(u & 0o777)
	switch u & unixIFMT {
	case unixIFDIR:
		m |= fs.ModeDir
	case unixIFLNK:
		m |= fs.ModeSymlink
	case unixIFIFO:
		m |= fs.ModeNamedPipe
	case unixIFSOCK:
		m |= fs.ModeSocket
	case unixIFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unixIFBLK:
		m |= fs.ModeDevice
	}
	if u&unixISUID != 0 {
		m |= fs.ModeSetuid
	}
	if u&unixISGID != 0 {
		m |= fs.ModeSetgid
	}
	if u&unixISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// PathError builds the error of a file operation that failed in the box with
// errno: its code comes from the errno, which stays as its cause.
func PathError(op, box, path string, errno syscall.Errno) *Error {
	return &Error{Code: CodeOfErrno(errno), Op: op, Box: box, Path: path, Err: errno}
}
