package agent

import (
	"bytes"
	"encoding/binary"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// removeAll does each entry of a batch of removals (see batchremove.go)
// in order, an entry's path resolved as the agent's other operations
// resolve theirs, and answers each one's errno. A batch that is not such
// records, or holds more than removeMax, is EINVAL, removing nothing.
func removeAll(data string) error {
	type entry struct {
		dir bool
		p   string
	}
	var rms []entry
	for rest := []byte(data); len(rest) > 0; {
		end := bytes.IndexByte(rest, 0)
		if end < 1 || len(rms) == removeMax {
			return errnoErr(syscall.EINVAL)
		}
		kind, p := rest[0], string(rest[1:end])
		if (kind != removeFile && kind != removeDir) || !path.IsAbs(p) {
			return errnoErr(syscall.EINVAL)
		}
		rms = append(rms, entry{kind == removeDir, p})
		rest = rest[end+1:]
	}
	if len(rms) == 0 {
		return errnoErr(syscall.EINVAL)
	}
	raw := make([]byte, 0, 4*len(rms))
	for _, rm := range rms {
		var err error
		if rm.dir {
			err = unix.Rmdir(rm.p)
		} else {
			err = unix.Unlink(rm.p)
		}
		errno := uint32(0)
		if err != nil {
			errno = uint32(syscall.EIO)
			if e, ok := err.(syscall.Errno); ok && e != 0 {
				errno = uint32(e)
			}
		}
		raw = binary.BigEndian.AppendUint32(raw, errno)
	}
	return &batchAnswer{raw}
}
