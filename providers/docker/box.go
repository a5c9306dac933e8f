package docker

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/boxfs/boxfs/providers"
)

// Box is one container.
type Box struct {
	p         *Provider
	id        string
	labels    map[string]string
	workspace string

	destroyed atomic.Bool

	mu    sync.Mutex
	facts *providers.Facts // measured once, on first use
}

var _ providers.Box = (*Box)(nil)

func (p *Provider) newBox(id string, labels map[string]string) *Box {
	ws := labels[labelWorkspace]
	if ws == "" {
		ws = DefaultWorkspace
	}
	return &Box{p: p, id: id, labels: labels, workspace: ws}
}

// ID returns the container's id.
func (b *Box) ID() string { return b.id }

// Labels returns the container's labels: the caller's and the provider's.
func (b *Box) Labels() map[string]string {
	out := make(map[string]string, len(b.labels))
	for k, v := range b.labels {
		out[k] = v
	}
	return out
}

func (b *Box) gone(op string) error {
	if b.destroyed.Load() {
		return providers.Errorf(providers.Gone, op, "box was destroyed").WithBox(b.id)
	}
	return nil
}

// Status reads the container's state. A container that no longer exists is
// Gone; one whose sleep ended (its lifetime passed) is ended.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "docker.Status"
	if err := b.gone(op); err != nil {
		return providers.Status{}, err
	}
	c, err := b.p.cli.ContainerInspect(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return providers.Status{}, e
	}
	return statusOf(c.State), nil
}

func statusOf(s *container.State) providers.Status {
	if s == nil {
		return providers.Status{State: providers.StateEnded, Reason: "no state"}
	}
	st := providers.Status{StartedAt: parseTime(s.StartedAt)}
	switch {
	case s.Paused:
		st.State, st.Reason = providers.StateStopped, "paused"
	case suspended(s):
		st.State, st.Reason = providers.StateStopped, "suspended"
	case s.Restarting:
		st.State = providers.StateStarting
	case s.Running:
		st.State = providers.StateRunning
	case s.Status == container.StateCreated:
		st.State = providers.StateStarting
	default: // exited, dead, removing
		st.State = providers.StateEnded
		st.EndedAt = parseTime(s.FinishedAt)
		switch {
		case s.OOMKilled:
			st.Reason = "out of memory"
		case s.ExitCode == 0:
			st.Reason = "lifetime passed"
		case s.ExitCode > 128:
			st.Reason = "killed by signal " + strconv.Itoa(s.ExitCode-128)
		default:
			st.Reason = "exited with code " + strconv.Itoa(s.ExitCode)
		}
		if s.Error != "" {
			st.Reason += ": " + s.Error
		}
	}
	return st
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// ending reports whether the box has ended or is ending: its container is
// gone or not running, or its lifetime has passed (then it waits, bounded,
// for Docker to record the end, which comes a moment after the box's
// processes were killed).
func (b *Box) ending(ctx context.Context) bool {
	d := 20 * time.Millisecond
	for {
		c, err := b.p.cli.ContainerInspect(ctx, b.id)
		if err != nil {
			return errorCode(err) == providers.NotFound
		}
		if c.State == nil || !c.State.Running {
			return true
		}
		end, ok := b.deadline()
		if !ok || time.Until(end) > time.Second {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
		d = min(2*d, 500*time.Millisecond)
	}
}

// Destroy removes the container and everything running in it. A container
// that is already gone is not an error.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "docker.Destroy"
	err := b.p.cli.ContainerRemove(ctx, b.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && errorCode(err) != providers.NotFound {
		return wrap(op, b.id, err)
	}
	b.destroyed.Store(true)
	return nil
}

// factsScript measures the box from inside, one key=value per line. Its only
// argument is the workspace.
const factsScript = `ws=$1
echo "cfs=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null)"
echo "cpumax=$(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"
echo "nproc=$(nproc 2>/dev/null || grep -c ^processor /proc/cpuinfo)"
echo "memlimit=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max 2>/dev/null)"
while read -r k v _; do [ "$k" = MemTotal: ] && echo "memtotal=$v"; done </proc/meminfo
echo "df=$(df -Pk "$ws" 2>/dev/null | tail -n 1)"
if [ -r /proc/sys/kernel/yama/ptrace_scope ]; then echo "ptrace=$(cat /proc/sys/kernel/yama/ptrace_scope)"; else echo ptrace=noyama; fi
echo "net=$(ls /sys/class/net 2>/dev/null | tr '\n' ' ')"
echo "arch=$(uname -m)"
echo "shell=$(command -v bash || command -v sh)"
if [ -c /dev/fuse ] && (exec 3<>/dev/fuse) 2>/dev/null; then echo fuse=1; else echo fuse=0; fi
`

// Facts measures the box with one command the first time it is asked, and
// answers from that afterwards (StartedAt is read from Docker each time).
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "docker.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	cached := b.facts
	b.mu.Unlock()
	var f providers.Facts
	if cached != nil {
		f = *cached
	} else {
		var out, errb bytes.Buffer
		proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", factsScript, "boxfs-facts", b.workspace}, Dir: "/", Stdout: &out, Stderr: &errb})
		if err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		code, err := proc.Wait()
		if err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		if code != 0 {
			return providers.Facts{}, providers.Errorf(providers.Unknown, op, "facts script exited %d: %s", code, strings.TrimSpace(errb.String())).WithBox(b.id)
		}
		f = parseFacts(out.Bytes())
		f.Provider, f.ID = Name, b.id
		f.Isolation = providers.IsolationContainer
		f.OS = "linux"
		f.Workspace = b.workspace
		f.TmpDir = tmpDir
		f.LiveProcesses = providers.Bool(true)
		f.Stdin = providers.Bool(true)
		f.SecretsVia = "fd"
		f.Suspend = providers.SuspendFilesystem
		b.mu.Lock()
		b.facts = &f
		b.mu.Unlock()
	}
	f.Ports = []int{} // no ports are published: the daemon has no bridge
	c, err := b.p.cli.ContainerInspect(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if e.Code == providers.NotFound {
			e.Code = providers.Gone
		}
		return providers.Facts{}, e
	}
	if c.State != nil {
		f.StartedAt = parseTime(c.State.StartedAt)
	}
	return f, nil
}

// parseFacts reads factsScript's output.
func parseFacts(out []byte) providers.Facts {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			kv[k] = strings.TrimSpace(v)
		}
	}
	var f providers.Facts

	// CPUs: a CFS quota (cgroup v1 or v2), else the CPUs the box may use.
	nproc, _ := strconv.ParseFloat(kv["nproc"], 64)
	f.CPUs = nproc
	if q, p, ok := strings.Cut(kv["cfs"], " "); ok {
		quota, err1 := strconv.ParseFloat(q, 64)
		period, err2 := strconv.ParseFloat(p, 64)
		if err1 == nil && err2 == nil && quota > 0 && period > 0 {
			f.CPUs = quota / period
		}
	}
	if q, p, ok := strings.Cut(kv["cpumax"], " "); ok && q != "max" {
		quota, err1 := strconv.ParseFloat(q, 64)
		period, err2 := strconv.ParseFloat(p, 64)
		if err1 == nil && err2 == nil && quota > 0 && period > 0 {
			f.CPUs = quota / period
		}
	}
	if nproc > 0 && f.CPUs > nproc {
		f.CPUs = nproc
	}
	f.CPUs = float64(int(f.CPUs*1000+0.5)) / 1000

	// Memory: the cgroup limit, or the machine's memory when that is less.
	totalKB, _ := strconv.ParseInt(kv["memtotal"], 10, 64)
	memMB := totalKB / 1024
	if lim, err := strconv.ParseInt(kv["memlimit"], 10, 64); err == nil && lim > 0 && (memMB == 0 || lim>>20 < memMB) {
		memMB = lim >> 20
	}
	f.MemoryMB = int(memMB)

	// Disk: the size of the workspace's file system.
	if fields := strings.Fields(kv["df"]); len(fields) >= 2 {
		if kb, err := strconv.ParseFloat(fields[1], 64); err == nil {
			f.DiskGB = float64(int(kb/(1<<20)*10+0.5)) / 10
		}
	}

	switch v := kv["ptrace"]; v {
	case "noyama":
		// No Yama: only the classic same-uid rules apply, which is scope 0.
		f.PtraceScope = providers.Int(0)
	default:
		if n, err := strconv.Atoi(v); err == nil {
			f.PtraceScope = providers.Int(n)
		}
	}

	if ifs := strings.Fields(kv["net"]); len(ifs) > 0 {
		f.Network = providers.NetworkNone
		for _, i := range ifs {
			if i != "lo" {
				f.Network = providers.NetworkOpen
			}
		}
	}

	switch a := kv["arch"]; a {
	case "x86_64":
		f.Arch = "amd64"
	case "aarch64", "arm64":
		f.Arch = "arm64"
	case "i686", "i386":
		f.Arch = "386"
	case "":
	default:
		if strings.HasPrefix(a, "armv") {
			f.Arch = "arm"
		} else {
			f.Arch = a
		}
	}
	f.Shell = kv["shell"]
	switch kv["fuse"] {
	case "1":
		f.FUSE = providers.Bool(true)
	case "0":
		f.FUSE = providers.Bool(false)
	}
	return f
}
