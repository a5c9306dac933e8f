package main

import (
	"bufio"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

// boxfsMounts lists the mount points of this process's boxfs mounts
// (type fuse.boxfs), as /proc/self/mountinfo has them.
func boxfsMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mnts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, found := strings.Cut(sc.Text(), " - ")
		if !found {
			continue
		}
		fields, pf := strings.Fields(pre), strings.Fields(post)
		if len(fields) >= 5 && len(pf) > 0 && pf[0] == "fuse.boxfs" {
			mnts = append(mnts, unescapeMountinfo(fields[4]))
		}
	}
	return mnts, sc.Err()
}

// getwd is the kernel's name of the working directory (never $PWD, whose
// symbolic links mountinfo does not know).
func getwd() (string, error) { return unix.Getwd() }
