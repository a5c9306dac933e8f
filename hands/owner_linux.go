package hands

import (
	"os"
	"strconv"
	"strings"
)

// hostOwner names this host process for command records:
// "hostname/bootid/pid/starttime".
func hostOwner() string {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	pid := os.Getpid()
	return formatOwner(host, strings.TrimSpace(string(boot)), pid, startTime(pid))
}

// startTime is a process's start time in clock ticks since boot (field 22
// of /proc/PID/stat), or "" when it cannot be read.
func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// processRuns reports whether process pid still runs and started at start.
func processRuns(pid, start string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	st := startTime(n)
	return st != "" && st == start
}
