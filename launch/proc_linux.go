package launch

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// proc is what /proc/PID/stat says of a process.
type proc struct {
	state byte
	pgrp  string
	start string // its start time in clock ticks after boot (field 22)
}

func (p proc) dead() bool { return p.state == 'Z' || p.state == 'X' || p.state == 'x' }

// readProc reads /proc/PID/stat (a zombie's too).
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}, false
	}
	return proc{state: f[0][0], pgrp: string(f[2]), start: string(f[19])}, true
}

// alive reports whether pid runs (not a zombie) and is the process that
// started at start.
func alive(pid, start string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	p, ok := readProc(n)
	return ok && !p.dead() && p.start == start
}

// groupMembers returns the live processes of the process group pg that
// started no earlier than its leader (started at start): an incarnation's
// group, even once its leader is gone.
func groupMembers(pg, start string) []int {
	if _, err := strconv.Atoi(pg); err != nil {
		return nil
	}
	s0, err := strconv.ParseUint(start, 10, 64)
	if err != nil {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(pid)
		if !ok || p.dead() || p.pgrp != pg {
			continue
		}
		if s, err := strconv.ParseUint(p.start, 10, 64); err == nil && s >= s0 {
			out = append(out, pid)
		}
	}
	return out
}

// groupSignal sends sig to each member of the group, one by one.
func groupSignal(sig syscall.Signal, pg, start string) {
	for _, pid := range groupMembers(pg, start) {
		syscall.Kill(pid, sig)
	}
}

// termDrain sends TERM to the group (to its whole group at once while the
// leader is the one that started at start), then waits up to secs seconds
// for the group to be empty.
func termDrain(pg, start string, secs int) {
	if alive(pg, start) {
		n, _ := strconv.Atoi(pg)
		syscall.Kill(-n, syscall.SIGTERM)
	} else {
		groupSignal(syscall.SIGTERM, pg, start)
	}
	for deadline := time.Now().Add(time.Duration(secs) * time.Second); time.Now().Before(deadline); {
		if len(groupMembers(pg, start)) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killConfirm sends KILL to the group until it is empty, for about 10 s;
// it reports whether the group is gone.
func killConfirm(pg, start string) bool {
	for _, d := range []time.Duration{10, 50, 100, 200, 500, 1000, 1000, 2000, 2000, 3000} {
		groupSignal(syscall.SIGKILL, pg, start)
		if len(groupMembers(pg, start)) == 0 {
			return true
		}
		time.Sleep(d * time.Millisecond)
	}
	return len(groupMembers(pg, start)) == 0
}

// exitCode is a process's exit status as sh says it: 128+n for signal n.
func exitCode(ps *os.ProcessState) int {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return ps.ExitCode()
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
