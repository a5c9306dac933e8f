package modal

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// probeScript makes the workspace ($1) when $2 is 1, then reports what the
// box is, one key=value per line. It runs as the sandbox's user (root).
const probeScript = `ws=$1
if [ "$2" = 1 ]; then mkdir -p -- "$ws" || exit 3; fi
echo "nproc=$(nproc 2>/dev/null || grep -c ^processor /proc/cpuinfo)"
echo "cpumax=$(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"
echo "cfs=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null | tr '\n' ' ')"
echo "memmax=$(cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null | head -n 1)"
echo "memtotal=$(sed -n 's/^MemTotal:[^0-9]*\([0-9]*\).*/\1/p' /proc/meminfo)"
echo "disk=$(df -Pk -- "$ws" 2>/dev/null | awk 'NR==2 {print $2}')"
echo "ptrace=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none)"
echo "machine=$(uname -m)"
echo "shell=$(command -v bash || command -v sh)"
echo "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
if [ -c /dev/fuse ] && (exec 3<>/dev/fuse) 2>/dev/null; then echo fuse=yes; else echo fuse=no; fi
`

// measureTries is how often a box's own report is asked for before an
// attached box falls back on the hardware its tag recorded.
const measureTries = 3

// Facts reports what the box is. A box this provider made reports what it
// measured at create, with its network and ports as the spec set them
// (Modal enforces both). An attached box is measured again (three tries,
// else the hardware its tag recorded at create); its network, ports and
// ptrace scope are left unknown, never read from a tag.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "modal.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	cached := b.facts
	b.mu.Unlock()
	var f providers.Facts
	switch {
	case cached != nil:
		f = *cached
	default:
		var err error
		for try := range measureTries {
			if f, err = b.measure(ctx, false); err == nil || providers.IsCode(err, providers.Gone) || ctx.Err() != nil {
				break
			}
			b.p.log.Debug("modal: measuring an attached box failed", "box", b.id, "try", try+1, "err", err)
		}
		if err != nil {
			if providers.IsCode(err, providers.Gone) || ctx.Err() != nil {
				return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
			}
			f = b.base()
			decodeHardware(b.Labels()[tagHardware], &f)
		}
	}
	if b.created != nil {
		f.Network = networkFact(b.created.network)
		f.Ports = make([]int, 0, len(b.created.ports))
		for _, p := range b.created.ports {
			f.Ports = append(f.Ports, int(p.GetPort()))
		}
	} else {
		f.Network, f.Ports, f.PtraceScope = "", nil, nil
	}
	if _, err := b.Status(ctx); err != nil {
		return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
	}
	return f, nil
}

// base are the facts the provider knows without asking the box.
func (b *Box) base() providers.Facts {
	return providers.Facts{
		Provider: Name, ID: b.id, Isolation: b.isolation, OS: "linux",
		Workspace: b.workspace, TmpDir: tmpDir, StartedAt: b.startedAt(),
		LiveProcesses: providers.Bool(true), Stdin: providers.Bool(true), SecretsVia: "fd",
		Suspend: providers.SuspendSnapshot,
	}
}

// measure runs probeScript in the box (making the workspace first when
// mkdir is set) and keeps the result.
func (b *Box) measure(ctx context.Context, mkdir bool) (providers.Facts, error) {
	const op = "modal.measure"
	flag := "0"
	if mkdir {
		flag = "1"
	}
	out, errb := &cappedBuffer{max: 64 << 10}, &cappedBuffer{max: 4 << 10}
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", probeScript, "boxfs-probe", b.workspace, flag}, Dir: "/", Stdout: out, Stderr: errb})
	if err != nil {
		return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
	}
	code, err := pr.Wait()
	if err != nil {
		return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
	}
	if code != 0 {
		return providers.Facts{}, providers.Errorf(providers.Unknown, op, "probe exited %d: %s", code, strings.TrimSpace(errb.String())).WithBox(b.id).WithPath(b.workspace)
	}
	f := b.base()
	readProbe(out.String(), &f)
	b.mu.Lock()
	b.facts = &f
	b.mu.Unlock()
	return f, nil
}

// readProbe reads probeScript's report into f.
func readProbe(out string, f *providers.Facts) {
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = strings.TrimSpace(v)
		}
	}
	cpus, _ := strconv.ParseFloat(kv["nproc"], 64)
	for _, quota := range []string{kv["cpumax"], kv["cfs"]} {
		q := strings.Fields(quota)
		if len(q) != 2 {
			continue
		}
		n, err1 := strconv.ParseFloat(q[0], 64)
		d, err2 := strconv.ParseFloat(q[1], 64)
		if err1 == nil && err2 == nil && n > 0 && d > 0 && (cpus == 0 || n/d < cpus) {
			cpus = n / d
		}
	}
	f.CPUs = math.Round(cpus*1000) / 1000
	memMB, _ := strconv.ParseInt(kv["memtotal"], 10, 64)
	memMB /= 1024
	if lim, err := strconv.ParseInt(kv["memmax"], 10, 64); err == nil && lim > 0 && (memMB == 0 || lim>>20 < memMB) {
		memMB = lim >> 20
	}
	f.MemoryMB = int(memMB)
	// gVisor reports a file system of exabytes: leave a size above 1 PiB out.
	if kb, err := strconv.ParseFloat(kv["disk"], 64); err == nil && kb > 0 && kb <= 1<<40 {
		f.DiskGB = math.Round(kb/(1<<20)*10) / 10
	}
	if n, err := strconv.Atoi(kv["ptrace"]); err == nil {
		f.PtraceScope = providers.Int(n)
	} else if kv["ptrace"] == "none" {
		f.PtraceScope = providers.Int(0) // no Yama: the classic same-uid rule, scope 0
	}
	f.Arch = goArch(kv["machine"])
	f.Shell = kv["shell"]
	f.GPU = kv["gpu"]
	switch kv["fuse"] {
	case "yes":
		f.FUSE = providers.Bool(true)
	case "no":
		f.FUSE = providers.Bool(false)
	}
}

// goArch spells a uname -m machine as GOARCH does.
func goArch(m string) string {
	switch {
	case m == "x86_64":
		return "amd64"
	case m == "aarch64" || m == "arm64":
		return "arm64"
	case slices.Contains([]string{"i386", "i686"}, m):
		return "386"
	case strings.HasPrefix(m, "armv"):
		return "arm"
	}
	return m
}

// networkFact is the network Modal was asked to enforce.
func networkFact(n *pb.NetworkAccess) providers.NetworkMode {
	switch n.GetNetworkAccessType() {
	case pb.NetworkAccess_BLOCKED:
		return providers.NetworkNone
	case pb.NetworkAccess_ALLOWLIST:
		return providers.NetworkAllowlist
	}
	return providers.NetworkOpen
}

// cappedBuffer keeps the first max bytes written to it and drops the rest:
// what a box says about itself is read, never held without bound.
type cappedBuffer struct {
	b   bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string { return c.b.String() }
