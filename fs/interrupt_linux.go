package fs

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The signals whose default action is not to end the process: ignored
// (SIGCHLD, SIGURG, SIGWINCH), a continue, or a stop.
var harmless = sigmask(syscall.SIGCHLD, syscall.SIGURG, syscall.SIGWINCH, syscall.SIGCONT,
	syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)

func sigmask(sigs ...syscall.Signal) uint64 {
	var m uint64
	for _, s := range sigs {
		m |= 1 << (uint(s) - 1)
	}
	return m
}

// dying reports whether process pid has a signal pending that ends it: one
// neither caught, ignored nor blocked (SIGKILL always), whose default
// action ends a process. A process that cannot be read (gone, or in a
// namespace of its own) counts as dying: nothing waits on its answer.
func dying(pid int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true
	}
	defer f.Close()
	var pending, blocked, ignored, caught uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
		if err != nil {
			continue
		}
		switch key {
		case "SigPnd", "ShdPnd":
			pending |= n
		case "SigBlk":
			blocked |= n
		case "SigIgn":
			ignored |= n
		case "SigCgt":
			caught |= n
		}
	}
	kill := sigmask(syscall.SIGKILL)
	return pending&kill != 0 || pending&^blocked&^ignored&^caught&^harmless != 0
}
