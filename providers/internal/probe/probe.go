// Package probe measures a box from inside: the one shell script the
// providers run in a box to learn what it is, and the reading of its report
// into providers.Facts.
package probe

import (
	"bufio"
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// Script reports what the box is, one key=value per line, in POSIX sh (a
// BusyBox sh does). Its first argument is the workspace ("" or none: the
// directory it starts in), whose file system is measured; with "1" as its
// second it makes the workspace first, and exits 3 when it cannot. Run it
// as Argv does.
const Script = `set -f
ws=${1:-.}
if [ "$2" = 1 ]; then mkdir -p -- "$ws" || exit 3; fi
echo "os=$(uname -s)"
echo "machine=$(uname -m)"
echo "pwd=$(pwd)"
echo "tmp=${TMPDIR:-/tmp}"
echo "shell=$(command -v bash || command -v sh)"
echo "nproc=$(nproc 2>/dev/null || grep -c ^processor /proc/cpuinfo 2>/dev/null)"
echo "cpumax=$(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"
echo "cfs=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null)"
echo "memmax=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)"
if [ -r /proc/meminfo ]; then while read -r k v _; do [ "$k" = MemTotal: ] && echo "memtotal=$v"; done </proc/meminfo; fi
set -- $(df -Pk -- "$ws" 2>/dev/null | tail -n 1)
echo "disk=$2"
if [ -e /proc/sys/kernel/yama/ptrace_scope ]; then echo "ptrace=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null)"; else echo ptrace=none; fi
echo "net=$(ls /sys/class/net 2>/dev/null | tr '\n' ' ')"
echo "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
if [ -c /dev/fuse ] && (exec 3<>/dev/fuse) 2>/dev/null; then echo fuse=1; else echo fuse=0; fi
`

// Argv is the command that runs Script in a box: in workspace, made first
// when mkdir is set.
func Argv(workspace string, mkdir bool) []string {
	flag := "0"
	if mkdir {
		flag = "1"
	}
	return []string{"/bin/sh", "-c", Script, "boxfs-probe", workspace, flag}
}

// Values reads Script's report as key=value pairs; a line without "=" is
// skipped, and a later key wins.
func Values(out []byte) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = strings.TrimSpace(v)
		}
	}
	return kv
}

// maxDiskKB is the largest file system believed: gVisor reports one of
// exabytes, which is no size at all.
const maxDiskKB = 1 << 40 // 1 PiB

// Read sets what Script measured in f: OS, Arch, Shell, CPUs (the fewest
// of the CPUs the box may use and its cgroup quota), MemoryMB (the
// machine's or the cgroup limit, whichever is less), DiskGB (the
// workspace's file system), GPU, Network (NetworkNone when the box has only
// a loopback interface, else open), PtraceScope (0 when the kernel has no
// Yama, which leaves the classic same-uid rule; absent when the setting
// could not be read) and FUSE. A fact the report does not hold is left as f
// has it. A report from anything but Linux is refused as Unsupported: the
// rest of boxfs's reading of a box (proc, cgroups, Yama) holds for Linux
// only. A report without its os line is Unknown.
func Read(out []byte, f *providers.Facts) error {
	const op = "probe.Read"
	kv := Values(out)
	switch os := kv["os"]; os {
	case "Linux":
	case "":
		return providers.Errorf(providers.Unknown, op, "the box's report names no OS: %q", clip(out))
	default:
		return providers.Errorf(providers.Unsupported, op, "the box runs %s; boxfs measures Linux boxes", os)
	}
	f.OS = "linux"
	if a := GoArch(kv["machine"]); a != "" {
		f.Arch = a
	}
	if s := kv["shell"]; s != "" {
		f.Shell = s
	}
	if c := cpus(kv); c > 0 {
		f.CPUs = c
	}
	if m := memoryMB(kv); m > 0 {
		f.MemoryMB = m
	}
	if kb, err := strconv.ParseFloat(kv["disk"], 64); err == nil && kb > 0 && kb <= maxDiskKB {
		f.DiskGB = math.Round(kb/(1<<20)*10) / 10
	}
	if g := kv["gpu"]; g != "" {
		f.GPU = g
	}
	if ifs := strings.Fields(kv["net"]); len(ifs) > 0 {
		f.Network = providers.NetworkNone
		if slices.ContainsFunc(ifs, func(i string) bool { return i != "lo" }) {
			f.Network = providers.NetworkOpen
		}
	}
	switch v := kv["ptrace"]; v {
	case "none":
		f.PtraceScope = providers.Int(0) // no Yama: the classic same-uid rule, scope 0
	default:
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			f.PtraceScope = providers.Int(n)
		}
	}
	switch kv["fuse"] {
	case "1":
		f.FUSE = providers.Bool(true)
	case "0":
		f.FUSE = providers.Bool(false)
	}
	return nil
}

// cpus is the fewest of the CPUs the box may use and its CFS quota (cgroup
// v2 cpu.max, or v1 quota and period), to three decimals; 0 unknown.
func cpus(kv map[string]string) float64 {
	n, _ := strconv.ParseFloat(kv["nproc"], 64)
	if n < 0 {
		n = 0
	}
	for _, quota := range []string{kv["cpumax"], kv["cfs"]} {
		q := strings.Fields(quota)
		if len(q) != 2 {
			continue
		}
		num, err1 := strconv.ParseFloat(q[0], 64)
		den, err2 := strconv.ParseFloat(q[1], 64)
		if err1 == nil && err2 == nil && num > 0 && den > 0 && (n == 0 || num/den < n) {
			n = num / den
		}
	}
	return math.Round(n*1000) / 1000
}

// memoryMB is the machine's memory or the cgroup's limit, whichever is
// less, in MiB; 0 unknown.
func memoryMB(kv map[string]string) int {
	kb, _ := strconv.ParseInt(kv["memtotal"], 10, 64)
	mb := max(kb, 0) >> 10
	if lim, err := strconv.ParseInt(kv["memmax"], 10, 64); err == nil && lim > 0 && (mb == 0 || lim>>20 < mb) {
		mb = lim >> 20
	}
	return int(mb)
}

// GoArch spells a machine as uname -m prints it the way GOARCH does; ""
// for a machine no GOARCH names for certain (a big-endian ARM, a MIPS of
// unknown byte order, anything unknown), so that no binary is picked for a
// machine it does not run on.
func GoArch(machine string) string {
	m := strings.TrimSpace(machine)
	switch m {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "i386", "i486", "i586", "i686":
		return "386"
	case "riscv64", "ppc64le", "ppc64", "s390x":
		return m
	case "loongarch64":
		return "loong64"
	}
	// armv5tel, armv6l, armv7l, armv8l (a 32-bit user space): little-endian ARM.
	if strings.HasPrefix(m, "armv") && strings.HasSuffix(m, "l") {
		return "arm"
	}
	return ""
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
