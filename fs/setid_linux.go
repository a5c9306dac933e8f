package fs

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// inGroup reports whether process pid has gid among its supplementary
// groups (/proc/PID/status); a process that cannot be read has none.
func inGroup(pid int, gid uint32) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		val, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		for _, g := range strings.Fields(val) {
			if g == strconv.FormatUint(uint64(gid), 10) {
				return true
			}
		}
		return false
	}
	return false
}
