package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// killBound is how long a kill (of a process group, or of a whole box) may
// take to be confirmed before it is reported as failed: SIGKILL cannot be
// caught, so only a process stuck in the kernel outlasts it.
const killBound = 10 * time.Second

// procStat is what /proc/PID/stat says about a process.
type procStat struct {
	state byte // R, S, D, Z, ...
	ppid  int
	pgrp  int
}

func (s procStat) dead() bool { return s.state == 'Z' || s.state == 'X' || s.state == 'x' }

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return procStat{state: f[0][0], ppid: ppid, pgrp: pgrp}, nil
}

// pids lists the processes in /proc.
func pids() ([]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// hasMarker reports whether process pid's environment holds the box's
// marker. A process we may not read (another user's) is not ours.
func hasMarker(pid int, marker []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for len(b) > 0 {
		var kv []byte
		kv, b, _ = bytes.Cut(b, []byte{0})
		if bytes.Equal(kv, marker) {
			return true
		}
	}
	return false
}

// boxProcs returns the live processes of box id: every process whose
// environment carries the box's marker, and every descendant of one. The
// calling process is never among them.
func boxProcs(id string) ([]int, error) {
	all, err := pids()
	if err != nil {
		return nil, err
	}
	marker := []byte(MarkerEnv + "=" + id)
	self := os.Getpid()
	stats := make(map[int]procStat, len(all))
	children := make(map[int][]int)
	var found []int
	for _, pid := range all {
		st, err := readStat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
		if !st.dead() && pid != self && hasMarker(pid, marker) {
			found = append(found, pid)
		}
	}
	seen := make(map[int]bool, len(found))
	queue := slices.Clone(found)
	for _, pid := range found {
		seen[pid] = true
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !seen[c] && c != self && !stats[c].dead() {
				seen[c] = true
				found = append(found, c)
				queue = append(queue, c)
			}
		}
	}
	slices.Sort(found)
	return found, nil
}

// sweep kills every process of box id and returns once none is left, or
// with an error naming the survivors after killBound.
func sweep(ctx context.Context, id string) error {
	deadline := time.Now().Add(killBound)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		procs, err := boxProcs(id)
		if err != nil {
			return err
		}
		if len(procs) == 0 {
			return nil
		}
		for _, pid := range procs {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of box %s outlived SIGKILL for %v", procs, id, killBound)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(delay)
	}
}

// groupAlive reports whether process group pgid has a live member. A
// group of zombies waiting for a parent to reap them is not alive.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	all, err := pids()
	if err != nil {
		return true // cannot tell: assume the worst
	}
	for _, pid := range all {
		if st, err := readStat(pid); err == nil && st.pgrp == pgid && !st.dead() {
			return true
		}
	}
	return false
}

// markedGroupMembers returns the live members of group pgid that carry
// box id's marker: those a Kill may still signal after the group's leader
// was reaped and its number could in principle have been reused.
func markedGroupMembers(pgid int, id string) []int {
	all, err := pids()
	if err != nil {
		return nil
	}
	marker := []byte(MarkerEnv + "=" + id)
	var out []int
	for _, pid := range all {
		if st, err := readStat(pid); err == nil && st.pgrp == pgid && !st.dead() && hasMarker(pid, marker) {
			out = append(out, pid)
		}
	}
	return out
}

// killGroup sends SIGKILL to process group pgid until no live member is
// left, and returns nil once that is confirmed; or an error when ctx ends
// or killBound passes first.
func killGroup(ctx context.Context, pgid int) error {
	deadline := time.Now().Add(killBound)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if !groupAlive(pgid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d outlived SIGKILL for %v", pgid, killBound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// lockBox takes the box's lock (flock on DIR/lock), shared or exclusive,
// waiting for it until ctx ends. A box directory that is gone gives an
// error satisfying errors.Is(err, fs.ErrNotExist).
func lockBox(ctx context.Context, dir string, exclusive bool) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var ferr error
		if err := rc.Control(func(fd uintptr) {
			ferr = syscall.Flock(int(fd), how|syscall.LOCK_NB)
		}); err != nil {
			ferr = err
		}
		if ferr == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(ferr, syscall.EWOULDBLOCK) && !errors.Is(ferr, syscall.EINTR) {
			f.Close()
			return nil, ferr
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// mountsUnder returns the mount points at or below dir.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sealInheritedFDs marks close-on-exec every descriptor of this process
// above stderr that lacks the flag. Go opens every file close-on-exec, so
// such descriptors were inherited from whoever started us (a shell, a test
// harness); left alone, every box program and every watchdog would inherit
// them in turn and could hold, say, our parent's pipe open for ever.
// ExtraFiles of other exec.Cmds are unaffected: exec duplicates them anew.
func sealInheritedFDs() {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
		}
	}
}

// memoryMB reads MemTotal from /proc/meminfo; 0 if unknown.
func memoryMB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.Atoi(fields[1])
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}

// ptraceScope reads kernel.yama.ptrace_scope: 0 if the kernel has no Yama
// (the classic same-uid rule, as the providers' in-box probe reads it), nil
// if the setting is there but cannot be read.
func ptraceScope() *int {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if errors.Is(err, fs.ErrNotExist) {
		return providers.Int(0)
	}
	if err != nil {
		return nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return &v
}

// diskGB is the size of the file system holding dir, in GB; 0 if unknown.
func diskGB(dir string) float64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return float64(st.Blocks) * float64(st.Bsize) / 1e9
}
