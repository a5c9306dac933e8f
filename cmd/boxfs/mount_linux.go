package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/internal/boxsh"
)

// isStale reports whether err (of a stat of a mount point) says the mount's
// daemon is gone: "transport endpoint is not connected".
func isStale(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
}

// lazyUnmount detaches the mount at mnt now, whatever still uses it.
func lazyUnmount(mnt string) error {
	err := unix.Unmount(mnt, unix.MNT_DETACH)
	if err == nil || err == unix.EINVAL && !isMountpoint(mnt) {
		return nil
	}
	if ferr := fusermount(mnt, "-uz"); ferr == nil {
		return nil
	}
	return fmt.Errorf("umount -l %s: %w", mnt, err)
}

// unmount unmounts mnt; a busy mount is an error.
func unmount(mnt string) error {
	err := unix.Unmount(mnt, 0)
	if err == nil {
		return nil
	}
	if err == unix.EPERM {
		if ferr := fusermount(mnt, "-u"); ferr == nil {
			return nil
		} else {
			return ferr
		}
	}
	if err == unix.EBUSY {
		return fmt.Errorf("%s is busy (a process has a file or its working directory there): %w", mnt, err)
	}
	return err
}

// fusermount runs fusermount3 (or fusermount) with flag on mnt: how a user
// who is not root unmounts.
func fusermount(mnt, flag string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error = errors.New("no fusermount3 or fusermount in PATH")
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			continue
		}
		cmd := exec.CommandContext(ctx, path, flag, mnt)
		cmd.Cancel = func() error { return cmd.Process.Kill() }
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%s %s: %v: %s", bin, flag, err, strings.TrimSpace(string(out)))
	}
	return last
}

func isMountpoint(mnt string) bool {
	_, ok := mountedAt(mnt)
	return ok
}

// mountedAt returns the file system type of the mount whose mount point is
// mnt (the last one, when several are stacked), from /proc/self/mountinfo.
func mountedAt(mnt string) (fstype string, ok bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		line := sc.Text()
		pre, post, found := strings.Cut(line, " - ")
		if !found {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) < 5 || boxsh.UnescapeMountinfo(fields[4]) != mnt {
			continue
		}
		if pf := strings.Fields(post); len(pf) > 0 {
			fstype, ok = pf[0], true
		}
	}
	return fstype, ok
}

// lockHolder returns the pid of the process that holds the exclusive
// flock of the state directory's lock file (its mount daemon), from
// /proc/locks.
func lockHolder(state string) (int, bool) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(state, lockFile), &st); err != nil {
		return 0, false
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END; a waiter's
		// line has "->" after N:.
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[3] != "WRITE" || fs[5] != id {
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil {
			return pid, true
		}
	}
	return 0, false
}
