package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Files of the state directory the command keeps (the namespace keeps
// boxes/, cache/, cmds/, marks/; providers keep providers/NAME/).
const (
	lockFile   = "lock"       // flock: exclusive by the mount, shared by direct-mode commands
	mountFile  = "mount.json" // the mount serving this state directory
	mountLog   = "mount.log"  // a background mount's log
	answerWait = 5 * time.Second
)

// mountRecord is what mount.json holds.
type mountRecord struct {
	Mountpoint string    `json:"mountpoint"`
	PID        int       `json:"pid"`
	Started    time.Time `json:"started"`
	Version    string    `json:"version"`
}

func readMountRecord(state string) (mountRecord, error) {
	var r mountRecord
	b, err := os.ReadFile(filepath.Join(state, mountFile))
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(b, &r)
	return r, err
}

func writeMountRecord(state string, r mountRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	name := filepath.Join(state, mountFile)
	if err := os.WriteFile(name+".tmp", append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(name+".tmp", name)
}

// stateLock is a held lock on the state directory.
type stateLock struct{ f *os.File }

// errLocked says another process holds the lock.
var errLocked = errors.New("state directory locked")

// lockState takes the state directory's lock: exclusive for the mount,
// shared for a direct-mode command. It does not wait: errLocked if taken.
func lockState(state string, exclusive bool) (*stateLock, error) {
	f, err := os.OpenFile(filepath.Join(state, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, providers.E(0, "state.lock", err).WithPath(state)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, errLocked
		}
		return nil, providers.E(0, "state.lock", err).WithPath(state)
	}
	return &stateLock{f: f}, nil
}

func (l *stateLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// pidAlive reports whether a process pid exists (not a zombie).
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// pid (comm) S ...: the state follows the last ')'.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}

// answers reports whether the namespace mounted at mnt answers a stat of
// its root ctl within the bound. A hung mount leaves one goroutine blocked.
func answers(mnt string, within time.Duration) bool {
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(mnt, "ctl"))
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(within):
		return false
	}
}
