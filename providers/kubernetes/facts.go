package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/boxfs/boxfs/providers"
)

// factsScript measures the box from inside, one "key value" line each. Its
// only argument is the workspace.
const factsScript = `printf 'arch %s\n' "$(uname -m)"
printf 'shell %s\n' "$(command -v bash || command -v sh)"
printf 'nproc %s\n' "$(nproc 2>/dev/null || grep -c ^processor /proc/cpuinfo)"
while read -r k v _; do [ "$k" = MemTotal: ] && printf 'memkb %s\n' "$v"; done </proc/meminfo
set -- $(df -Pk "$1" 2>/dev/null | tail -n 1)
printf 'diskkb %s\n' "$2"
printf 'ifaces %s\n' "$(ls /sys/class/net 2>/dev/null | tr '\n' ' ')"
printf 'ptrace %s\n' "$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none)"
if (exec 3<>/dev/fuse) 2>/dev/null; then echo 'fuse 1'; else echo 'fuse 0'; fi
`

// LifetimeVia names what enforces a box's lifetime, for Facts.
const LifetimeVia = "activeDeadlineSeconds"

// Facts measures the box with one command the first time it is asked and
// answers from that afterwards; what the pod says (start time, limits,
// whether its NetworkPolicy is still there) is read each time.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "kubernetes.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	pod, err := b.pod(ctx, op)
	if err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	cached := b.facts
	b.mu.Unlock()
	var f providers.Facts
	if cached != nil {
		f = *cached
	} else {
		code, out, err := b.run(ctx, []string{"/bin/sh", "-c", factsScript, "boxfs-facts", b.workspace}, nil)
		if err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		if code != 0 {
			return providers.Facts{}, providers.Errorf(providers.Unknown, op, "facts script exited %d: %s", code, bytes.TrimSpace(out)).WithBox(b.id)
		}
		f = measured(out)
		f.Provider, f.ID = Name, b.id
		f.Isolation = providers.IsolationContainer
		f.OS = "linux"
		f.Workspace = b.workspace
		f.TmpDir = tmpDir
		f.LiveProcesses = providers.Bool(true)
		f.Stdin = providers.Bool(true)
		f.SecretsVia = "fd" // a real stdin, its end carried (WebSocket v5, SPDY)
		f.LifetimeVia = LifetimeVia
		b.mu.Lock()
		b.facts = &f
		b.mu.Unlock()
	}
	f.Ports = slices.Clone(b.ports)
	if f.Ports == nil {
		f.Ports = []int{}
	}
	if pod.Status.StartTime != nil {
		f.StartedAt = pod.Status.StartTime.Time
	}
	limits(pod, &f)
	if b.fenced {
		// Fenced only while the policy is there: fail closed.
		if _, err := b.p.getPolicy(ctx, b.id); err == nil {
			f.Network = providers.NetworkNone
		} else if f.Network == providers.NetworkNone {
			f.Network = ""
		}
	}
	return f, nil
}

// limits sets CPUs and MemoryMB from the container's limits where it has
// them: what the cluster enforces, rather than what the node has.
func limits(pod *corev1.Pod, f *providers.Facts) {
	for _, c := range pod.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			f.CPUs = math.Round(float64(q.MilliValue())) / 1000
		}
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			f.MemoryMB = int(q.Value() >> 20)
		}
	}
}

// machineArch maps uname -m to GOARCH.
var machineArch = map[string]string{
	"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "i686": "386", "i386": "386",
	"armv7l": "arm", "armv6l": "arm", "riscv64": "riscv64", "ppc64le": "ppc64le", "s390x": "s390x",
}

// measured reads factsScript's output.
func measured(out []byte) providers.Facts {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok {
			kv[k] = strings.TrimSpace(v)
		}
	}
	var f providers.Facts
	f.Arch = machineArch[kv["arch"]]
	f.Shell = kv["shell"]
	if n, err := strconv.ParseFloat(kv["nproc"], 64); err == nil {
		f.CPUs = n
	}
	if kb, err := strconv.ParseInt(kv["memkb"], 10, 64); err == nil {
		f.MemoryMB = int(kb >> 10)
	}
	if kb, err := strconv.ParseFloat(kv["diskkb"], 64); err == nil {
		f.DiskGB = math.Round(kb/(1<<20)*10) / 10
	}
	if ifs := strings.Fields(kv["ifaces"]); len(ifs) > 0 {
		f.Network = providers.NetworkNone
		if slices.ContainsFunc(ifs, func(i string) bool { return i != "lo" }) {
			f.Network = providers.NetworkOpen
		}
	}
	switch v := kv["ptrace"]; v {
	case "none":
		// No Yama: only the classic same-uid rules apply, which is scope 0.
		f.PtraceScope = providers.Int(0)
	default:
		if n, err := strconv.Atoi(v); err == nil {
			f.PtraceScope = providers.Int(n)
		}
	}
	f.FUSE = providers.Bool(kv["fuse"] == "1")
	return f
}
