package fs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// pfExiting is the kernel's PF_EXITING task flag: the task is in do_exit,
// where the files it still holds are closed (each close a FLUSH).
const pfExiting = 0x4

// abandoned says why the close (FLUSH) at ctx is not that of a writer that
// finished: "" for a close(2) and for a process that exits with a status
// and the file still open; else how the writer ended (killed by a
// signal), or why that cannot be told. It reads the flags and exit code
// of the closing task in /proc/PID/stat: a task being ended by a signal
// closes its files in do_exit, after its exit code is set.
func abandoned(ctx context.Context) string {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return "closed it from outside the mount's view of processes"
	}
	data, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.Pid), 10) + "/stat")
	if err != nil {
		return "could not be read in /proc as it closed"
	}
	return closeCause(data, c.Uid == uint32(os.Geteuid()) || os.Geteuid() == 0)
}

// closeCause is abandoned's reading of a /proc/PID/stat line; readable
// says whether its exit_code field is shown to this process (the kernel
// shows 0 to a process that may not trace the task).
func closeCause(stat []byte, readable bool) string {
	i := bytes.LastIndexByte(stat, ')') // the command name may hold blanks and parentheses
	if i < 0 {
		return "could not be read in /proc as it closed"
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3, state
	if len(f) < 50 {
		return "could not be read in /proc as it closed"
	}
	flags, err1 := strconv.ParseUint(f[9-3], 10, 64)
	code, err2 := strconv.ParseInt(f[52-3], 10, 64)
	if err1 != nil || err2 != nil {
		return "could not be read in /proc as it closed"
	}
	switch {
	case flags&pfExiting == 0:
		return "" // a close(2)
	case code&0x7f != 0:
		return fmt.Sprintf("was killed by signal %d", code&0x7f)
	case !readable:
		return "ended in a way boxfs may not read (another user's process)"
	}
	return "" // exit(status)
}
