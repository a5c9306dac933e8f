//go:build linux || darwin

package syncengine

import (
	"context"
	"io/fs"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// hostStat stats the host's copy of rel without following a link at it.
func hostStat(hostDir, rel string) (HostStat, error) {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(hostDir, filepath.FromSlash(rel)), &st); err != nil {
		return HostStat{}, err
	}
	return HostStat{
		Size:    st.Size,
		Mode:    fs.FileMode(st.Mode & 0o7777),
		MtimeNs: st.Mtim.Nano(),
		CtimeNs: st.Ctim.Nano(),
		Ino:     uint64(st.Ino),
	}, nil
}

// lockPoll is how often a pull waiting for another one into the same host
// directory tries the lock again.
const lockPoll = 20 * time.Millisecond

// lockDir takes an exclusive flock on the directory dir itself, waiting
// until it is free or ctx ends. flock locks belong to an open file, so two
// pulls in one process exclude each other as two processes do. The
// returned func releases it.
func lockDir(ctx context.Context, dir string) (func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, providers.PathError("syncengine.lockDir", "", dir, err.(unix.Errno))
	}
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil // closing the last handle releases the lock
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			unix.Close(fd)
			return nil, providers.PathError("syncengine.lockDir", "", dir, err.(unix.Errno))
		}
		select {
		case <-ctx.Done():
			unix.Close(fd)
			return nil, providers.E(0, "syncengine.lockDir", ctx.Err()).WithPath(dir)
		case <-t.C:
		}
	}
}
