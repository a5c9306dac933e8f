package docker

import (
	"context"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/boxfs/boxfs/providers"
)

func TestIsLocalHost(t *testing.T) {
	for host, want := range map[string]bool{
		"unix:///var/run/docker.sock": true,
		"npipe:////./pipe/docker":     true,
		"tcp://127.0.0.1:2375":        true,
		"tcp://[::1]:2375":            true,
		"tcp://localhost:2375":        true,
		"tcp://10.0.0.5:2376":         false,
		"tcp://docker.example:2376":   false,
		"ssh://me@host":               false,
	} {
		if got := isLocalHost(host); got != want {
			t.Errorf("isLocalHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want providers.Code
	}{
		{fmt.Errorf("x: %w", cerrdefs.ErrNotFound), providers.NotFound},
		{cerrdefs.ErrInvalidArgument, providers.Invalid},
		{cerrdefs.ErrConflict, providers.Refused},
		{cerrdefs.ErrAlreadyExists, providers.Exists},
		{cerrdefs.ErrPermissionDenied, providers.Permission},
		{cerrdefs.ErrUnauthenticated, providers.Auth},
		{cerrdefs.ErrUnavailable, providers.Unavailable},
		{cerrdefs.ErrNotImplemented, providers.Unsupported},
		{context.Canceled, providers.Aborted},
		{fmt.Errorf("w: %w", context.DeadlineExceeded), providers.Timeout},
		{fmt.Errorf("plain"), providers.Unknown},
	} {
		if got := errorCode(c.err); got != c.want {
			t.Errorf("errorCode(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestParseFacts(t *testing.T) {
	v1 := "cfs=50000 100000\ncpumax=\nnproc=2\nmemlimit=268435456\nmemtotal=24000000\n" +
		"df=overlay 264212084 12411916 83089348 13% /\nptrace=noyama\nnet=lo \narch=x86_64\nshell=/usr/bin/bash\nfuse=0\n"
	f := parseFacts([]byte(v1))
	if f.CPUs != 0.5 || f.MemoryMB != 256 || f.DiskGB != 252 || f.PtraceScope == nil || *f.PtraceScope != 0 ||
		f.Network != providers.NetworkNone || f.Arch != "amd64" || f.Shell != "/usr/bin/bash" || f.FUSE == nil || *f.FUSE {
		t.Errorf("cgroup v1 limits: %+v", f)
	}
	// No limits: the machine's CPUs and memory; cgroup v2 spelling; a bridge.
	v2 := "cfs= \ncpumax=max 100000\nnproc=2\nmemlimit=max\nmemtotal=2048000\n" +
		"df=overlay 1048576 1 1 1% /\nptrace=1\nnet=eth0 lo \narch=aarch64\nshell=/bin/sh\nfuse=1\n"
	f = parseFacts([]byte(v2))
	if f.CPUs != 2 || f.MemoryMB != 2000 || f.DiskGB != 1 || *f.PtraceScope != 1 ||
		f.Network != providers.NetworkOpen || f.Arch != "arm64" || !f.HasFUSE() {
		t.Errorf("no limits, cgroup v2: %+v", f)
	}
	// A quota above the CPUs there are is capped at them; a v2 quota counts.
	f = parseFacts([]byte("cpumax=150000 100000\nnproc=4\n"))
	if f.CPUs != 1.5 {
		t.Errorf("cpu.max 150000/100000: cpus %v, want 1.5", f.CPUs)
	}
	f = parseFacts([]byte("cfs=800000 100000\nnproc=2\n"))
	if f.CPUs != 2 {
		t.Errorf("quota of 8 CPUs on 2: cpus %v, want 2", f.CPUs)
	}
	// Nothing measured: nothing claimed.
	f = parseFacts(nil)
	if f.Network != "" || f.PtraceScope != nil || f.FUSE != nil || f.Arch != "" {
		t.Errorf("empty output claims %+v", f)
	}
}
