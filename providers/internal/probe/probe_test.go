package probe

import (
	"os/exec"
	"reflect"
	"runtime"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

func TestGoArch(t *testing.T) {
	for machine, want := range map[string]string{
		"x86_64": "amd64", "amd64": "amd64", " x86_64\n": "amd64",
		"aarch64": "arm64", "arm64": "arm64",
		"i386": "386", "i486": "386", "i586": "386", "i686": "386",
		"armv5tel": "arm", "armv6l": "arm", "armv7l": "arm", "armv8l": "arm",
		"riscv64": "riscv64", "ppc64le": "ppc64le", "ppc64": "ppc64", "s390x": "s390x",
		"loongarch64": "loong64",
		// No GOARCH for certain: absent, so no binary is picked for it.
		"": "", "armv7b": "", "aarch64_be": "", "mips": "", "mips64": "", "sparc64": "", "Power Macintosh": "",
	} {
		if got := GoArch(machine); got != want {
			t.Errorf("GoArch(%q) = %q, want %q", machine, got, want)
		}
	}
}

// Reports the script printed in real boxes.
const (
	// boxfs-base (Debian 12) under Docker with --cpus 1.5 -m 512m, cgroup v1.
	debian = `os=Linux
machine=x86_64
pwd=/
tmp=/tmp
shell=/usr/bin/bash
nproc=2
cpumax=
cfs=150000 100000
memmax=536870912
memtotal=24683748
disk=264212084
ptrace=none
net=lo 
gpu=
fuse=0
`
	// BusyBox 1.35 sh and applets (Alpine's user space), --network none,
	// no limits: cgroup v1's "no limit" memory and a -1 quota.
	busybox = `os=Linux
machine=x86_64
pwd=/
tmp=/tmp
shell=sh
nproc=2
cpumax=
cfs=-1 100000
memmax=9223372036854771712
memtotal=24683748
disk=264212084
ptrace=none
net=lo 
gpu=
fuse=0
`
	// An arm64 pod on cgroup v2 with Yama, a GPU and FUSE.
	cgroup2 = `os=Linux
machine=aarch64
pwd=/work
tmp=/tmp
shell=/bin/bash
nproc=8
cpumax=250000 100000
cfs= 
memmax=max
memtotal=4194304
disk=10485760
ptrace=1
net=eth0 lo 
gpu=NVIDIA A100-SXM4-40GB
fuse=1
`
	// gVisor: a file system of exabytes, no Yama settings to read.
	gvisor = `os=Linux
machine=x86_64
nproc=2
memmax=536870912
memtotal=4194304
disk=9007199254740992
ptrace=
fuse=0
`
	// macOS's sh: no /proc, no cgroups, no nproc.
	darwin = `os=Darwin
machine=arm64
pwd=/Users/me
tmp=/var/folders/x/T/
shell=/bin/bash
nproc=
cpumax=
cfs= 
memmax=
disk=971350180
ptrace=none
net=
gpu=
fuse=0
`
)

func TestRead(t *testing.T) {
	for _, c := range []struct {
		name string
		out  string
		want providers.Facts
	}{
		{"debian", debian, providers.Facts{OS: "linux", Arch: "amd64", Shell: "/usr/bin/bash", CPUs: 1.5, MemoryMB: 512, DiskGB: 252,
			Network: providers.NetworkNone, PtraceScope: providers.Int(0), FUSE: providers.Bool(false)}},
		{"busybox", busybox, providers.Facts{OS: "linux", Arch: "amd64", Shell: "sh", CPUs: 2, MemoryMB: 24105, DiskGB: 252,
			Network: providers.NetworkNone, PtraceScope: providers.Int(0), FUSE: providers.Bool(false)}},
		{"cgroup2", cgroup2, providers.Facts{OS: "linux", Arch: "arm64", Shell: "/bin/bash", CPUs: 2.5, MemoryMB: 4096, DiskGB: 10,
			Network: providers.NetworkOpen, PtraceScope: providers.Int(1), GPU: "NVIDIA A100-SXM4-40GB", FUSE: providers.Bool(true)}},
		{"quota above the CPUs there are", "os=Linux\ncfs=800000 100000\nnproc=2\n", providers.Facts{OS: "linux", CPUs: 2}},
		{"v2 quota", "os=Linux\ncpumax=150000 100000\nnproc=4\n", providers.Facts{OS: "linux", CPUs: 1.5}},
		{"nothing measured claims nothing", "os=Linux\n", providers.Facts{OS: "linux"}},
		{"gvisor", gvisor, providers.Facts{OS: "linux", Arch: "amd64", CPUs: 2, MemoryMB: 512, FUSE: providers.Bool(false)}},
	} {
		var f providers.Facts
		if err := Read([]byte(c.out), &f); err != nil {
			t.Errorf("%s: Read: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(f, c.want) {
			t.Errorf("%s: Read =\n %+v\nwant\n %+v", c.name, f, c.want)
		}
	}
}

func TestReadKeeps(t *testing.T) {
	// What the report does not hold is left as the provider set it.
	f := providers.Facts{Provider: "x", Workspace: "/w", TmpDir: "/t", CPUs: 4, MemoryMB: 100}
	if err := Read([]byte("os=Linux\nmachine=riscv64\n"), &f); err != nil {
		t.Fatal(err)
	}
	want := providers.Facts{Provider: "x", Workspace: "/w", TmpDir: "/t", CPUs: 4, MemoryMB: 100, OS: "linux", Arch: "riscv64"}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Read = %+v, want %+v", f, want)
	}
}

func TestReadRefuses(t *testing.T) {
	for _, c := range []struct {
		name, out string
		code      providers.Code
	}{
		{"darwin", darwin, providers.Unsupported},
		{"no os line", "machine=x86_64\nnproc=2\n", providers.Unknown},
		{"empty", "", providers.Unknown},
		{"an error message", "sh: 1: Syntax error: end of file unexpected\n", providers.Unknown},
	} {
		f := providers.Facts{Provider: "x"}
		err := Read([]byte(c.out), &f)
		if providers.CodeOf(err) != c.code {
			t.Errorf("%s: Read = %v, want %v", c.name, err, c.code)
		}
		if !reflect.DeepEqual(f, providers.Facts{Provider: "x"}) {
			t.Errorf("%s: a refused report set %+v", c.name, f)
		}
	}
}

func TestValues(t *testing.T) {
	got := Values([]byte("a=1\nno equals\nb= x=y \na=2\n=v\n"))
	want := map[string]string{"a": "2", "b": "x=y", "": "v"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Values = %v, want %v", got, want)
	}
}

// TestScript runs the script in this machine's sh and, where there is one,
// BusyBox's: it runs, makes the workspace when asked, and its report reads.
func TestScript(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the script measures Linux boxes")
	}
	for _, sh := range [][]string{{"/bin/sh"}, {"busybox", "sh"}} {
		if _, err := exec.LookPath(sh[0]); err != nil {
			t.Logf("%s: not here", sh[0])
			continue
		}
		ws := t.TempDir() + "/new ws"
		argv := Argv(ws, true)
		out, err := exec.Command(sh[0], append(sh[1:], argv[1:]...)...).Output()
		if err != nil {
			t.Fatalf("%s: %v", sh, err)
		}
		var f providers.Facts
		if err := Read(out, &f); err != nil {
			t.Fatalf("%s: Read: %v\n%s", sh, err, out)
		}
		if f.OS != "linux" || f.Arch != runtime.GOARCH || f.CPUs <= 0 || f.MemoryMB <= 0 || f.DiskGB <= 0 || f.Shell == "" || f.FUSE == nil {
			t.Errorf("%s: Read = %+v from\n%s", sh, f, out)
		}
		if Values(out)["pwd"] == "" {
			t.Errorf("%s: no pwd in\n%s", sh, out)
		}
	}
	// The workspace cannot be made: exit 3.
	err := exec.Command("/bin/sh", Argv("/proc/no/such", true)[1:]...).Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("a workspace that cannot be made: %v, want exit 3", err)
	}
}
