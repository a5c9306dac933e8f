package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/docker"
)

// create makes a box for t, destroyed when t ends.
func create(t *testing.T, p providers.Provider, spec providers.Spec) providers.Box {
	t.Helper()
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[testbox.Label] = t.Name()
	if spec.Lifetime == 0 {
		spec.Lifetime = 10 * time.Minute // a crashed run's boxes end by themselves
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create(%v): %v", spec, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return b
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run runs argv in b and returns stdout, failing t unless it exits 0.
func run(t *testing.T, ctx context.Context, b providers.Box, req providers.ExecRequest) string {
	t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	proc, err := b.Exec(ctx, req)
	if err != nil {
		t.Fatalf("Exec(%q): %v", req.Argv, err)
	}
	code, err := proc.Wait()
	if err != nil || code != 0 {
		t.Fatalf("Exec(%q): exit %d, %v; stderr %q", req.Argv, code, err, errb.String())
	}
	return out.String()
}

func wantCode(t *testing.T, err error, code providers.Code, what string) {
	t.Helper()
	if got := providers.CodeOf(err); err == nil || got != code {
		t.Errorf("%s: got %v (code %v), want code %v", what, err, got, code)
	}
}

// leftovers fails t if a container of t's label exists.
func noLeftovers(t *testing.T, p providers.Provider) {
	t.Helper()
	bs, err := p.List(testCtx(t), map[string]string{testbox.Label: t.Name()})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, b := range bs {
		t.Errorf("a refused Create left container %s behind", b.ID())
		b.Destroy(testCtx(t))
	}
}

// The box ends at its lifetime by Docker's doing: after Create the test
// makes no call until well past the lifetime, then finds the container
// exited, and exited when its lifetime was up.
func TestLifetimeEndsWithNoHostCall(t *testing.T) {
	p := newProvider(t)
	const lifetime = 2 * time.Second
	b := create(t, p, providers.Spec{Lifetime: lifetime})
	time.Sleep(lifetime + 4*time.Second) // no call to the box or the engine
	st, err := b.Status(testCtx(t))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.State != providers.StateEnded || st.Reason != "lifetime passed" {
		t.Fatalf("Status after the lifetime = %+v, want ended, lifetime passed", st)
	}
	ran := st.EndedAt.Sub(st.StartedAt)
	if ran < lifetime || ran > lifetime+3*time.Second {
		t.Errorf("the container ran %v, want its lifetime of %v", ran, lifetime)
	}
	_, err = b.Exec(testCtx(t), providers.ExecRequest{Argv: []string{"true"}})
	wantCode(t, err, providers.Gone, "Exec after the lifetime")
}

// groupScript prints its process group id, then leaves a tree of processes
// in that group: two background sleeps and a subshell with one of its own.
const groupScript = `read -r _ _ _ _ pg _ </proc/$$/stat; echo "$pg"; sleep 300 & (sleep 301 & wait) & sleep 302; wait`

func countGroup(t *testing.T, b providers.Box, pg string) int {
	t.Helper()
	// A fixed script: count processes whose pgrp is $1 and that are not zombies.
	script := `n=0; for d in /proc/[0-9]*; do read -r s <"$d/stat" 2>/dev/null || continue; s=${s##*) }; set -- $s; if [ "$3" = "$PG" ] && [ "$1" != Z ]; then n=$((n+1)); fi; done; echo $n`
	out := run(t, testCtx(t), b, providers.ExecRequest{Argv: []string{"sh", "-c", script}, Env: map[string]string{"PG": pg}})
	var n int
	for _, c := range strings.TrimSpace(out) {
		n = n*10 + int(c-'0')
	}
	return n
}

// startGroup starts groupScript under ctx and returns it with its group id,
// once the whole tree runs.
func startGroup(t *testing.T, ctx context.Context, b providers.Box) (providers.Process, string) {
	t.Helper()
	pr, pw := io.Pipe()
	proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", groupScript}, Stdout: pw})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	line := make([]byte, 0, 16)
	buf := make([]byte, 1)
	for !bytes.HasSuffix(line, []byte("\n")) {
		if _, err := pr.Read(buf); err != nil {
			t.Fatalf("reading the group id: %v", err)
		}
		line = append(line, buf[0])
	}
	go io.Copy(io.Discard, pr)
	pg := strings.TrimSpace(string(line))
	deadline := time.Now().Add(30 * time.Second)
	for countGroup(t, b, pg) < 6 { // wrapper sh, sh, 3 sleeps, subshell
		if time.Now().After(deadline) {
			t.Fatalf("the process tree of group %s did not start", pg)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return proc, pg
}

// Cancelling an exec's ctx kills its whole process group: once Wait
// returns, no process of the group is left in the container.
func TestCancelledExecLeavesNoProcessOfItsGroup(t *testing.T) {
	p := newProvider(t)
	for _, image := range []string{docker.DefaultImage, "boxfs-busybox:latest"} {
		t.Run("image="+image, func(t *testing.T) {
			b := create(t, p, providers.Spec{Image: image})
			ctx, cancel := context.WithCancel(testCtx(t))
			proc, pg := startGroup(t, ctx, b)
			cancel()
			done := make(chan error, 1)
			go func() { _, err := proc.Wait(); done <- err }()
			select {
			case err := <-done:
				if !providers.IsCode(err, providers.Aborted) || !errors.Is(err, context.Canceled) {
					t.Errorf("Wait after cancel: %v, want Aborted", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("Wait did not return within 60s of the cancel")
			}
			if n := countGroup(t, b, pg); n != 0 {
				t.Errorf("%d processes of group %s are alive after the cancelled exec's Wait", n, pg)
			}
		})
	}
}

// A deadline does the same, and Kill too, returning only once the group is gone.
func TestKillConfirmsTheGroupGone(t *testing.T) {
	p := newProvider(t)
	b := create(t, p, providers.Spec{})
	proc, pg := startGroup(t, testCtx(t), b)
	if err := proc.Kill(testCtx(t)); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if n := countGroup(t, b, pg); n != 0 {
		t.Errorf("%d processes of group %s are alive after Kill returned", n, pg)
	}
	if code, err := proc.Wait(); err != nil || code != 137 {
		t.Errorf("Wait after Kill = %d, %v; want 137", code, err)
	}
}

// Bind mounts: a host directory appears in the box, writes go both ways, a
// read-only one refuses writes, a missing source is NotFound.
func TestBindMounts(t *testing.T) {
	p := newProvider(t)
	rw, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(rw, "from-host"), []byte("host bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "ro-file"), []byte("read only"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := create(t, p, providers.Spec{Mounts: []providers.Mount{
		{Source: rw, Target: "/mnt/rw"},
		{Source: ro, Target: "/mnt/ro", ReadOnly: true},
	}})
	ctx := testCtx(t)
	if got := run(t, ctx, b, providers.ExecRequest{Argv: []string{"cat", "/mnt/rw/from-host", "/mnt/ro/ro-file"}}); got != "host bytesread only" {
		t.Errorf("the box read %q from its mounts", got)
	}
	run(t, ctx, b, providers.ExecRequest{Argv: []string{"sh", "-c", `printf 'box bytes' >/mnt/rw/from-box`}})
	if got, err := os.ReadFile(filepath.Join(rw, "from-box")); err != nil || string(got) != "box bytes" {
		t.Errorf("the host reads %q, %v from a file the box wrote", got, err)
	}
	var errb bytes.Buffer
	proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", `echo x >/mnt/ro/new`}, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := proc.Wait(); err != nil || code == 0 {
		t.Errorf("writing to a read-only mount: exit %d, %v; want a failure", code, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a write through a read-only mount reached the host: %v", err)
	}

	missing := filepath.Join(t.TempDir(), "no-such-dir")
	t.Run("missing source", func(t *testing.T) {
		_, err = p.Create(ctx, providers.Spec{Labels: map[string]string{testbox.Label: t.Name()}, Mounts: []providers.Mount{{Source: missing, Target: "/mnt/x"}}})
		wantCode(t, err, providers.NotFound, "Create with a mount source this machine lacks")
		noLeftovers(t, p)
	})
}

// A daemon on another machine cannot bind this machine's directories: the
// provider refuses before it calls the daemon at all.
func TestBindMountsRefusedForARemoteDaemon(t *testing.T) {
	p, err := docker.New(providers.Config{Options: map[string]string{"host": "tcp://192.0.2.1:2375"}}) // TEST-NET-1: never answers
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = p.Create(ctx, providers.Spec{Mounts: []providers.Mount{{Source: t.TempDir(), Target: "/mnt/x"}}})
	wantCode(t, err, providers.Unsupported, "Create with a bind mount on a remote daemon")
}

// Every spec field the provider cannot honour is refused as Unsupported,
// and a refused Create leaves no container behind.
func TestRefusedSpecFields(t *testing.T) {
	p := newProvider(t)
	for name, spec := range map[string]providers.Spec{
		"region":            {Region: "eu"},
		"gpu":               {GPU: "any"},
		"ports":             {Ports: []int{8080}},
		"isolation=gvisor":  {Isolation: providers.IsolationGVisor},
		"isolation=microvm": {Isolation: providers.IsolationMicroVM},
		"isolation=none":    {Isolation: providers.IsolationNone},
		"network=open":      {Network: providers.Network{Mode: providers.NetworkOpen}},
		"network=allowlist": {Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"example.com"}}},
	} {
		t.Run(name, func(t *testing.T) {
			spec.Labels = map[string]string{testbox.Label: t.Name()}
			b, err := p.Create(testCtx(t), spec)
			if b != nil {
				b.Destroy(testCtx(t))
			}
			wantCode(t, err, providers.Unsupported, "Create("+spec.String()+")")
			noLeftovers(t, p)
		})
	}
	_, err := p.Create(testCtx(t), providers.Spec{Image: "boxfs-no-such-image:latest", Labels: map[string]string{testbox.Label: t.Name()}})
	wantCode(t, err, providers.NotFound, "Create with an image the engine lacks")
	noLeftovers(t, p)
	_, err = p.Create(testCtx(t), providers.Spec{Snapshot: docker.DefaultImage, Labels: map[string]string{testbox.Label: t.Name()}})
	wantCode(t, err, providers.NotFound, "Create from an image Snapshot did not make")
	_, err = p.Create(testCtx(t), providers.Spec{Snapshot: "boxfs-snapshot:x", Image: docker.DefaultImage, Labels: map[string]string{testbox.Label: t.Name()}})
	wantCode(t, err, providers.Invalid, "Create with a snapshot and an image")
	noLeftovers(t, p)
}

// The spec's resources hold in the box and Facts reports them as measured.
func TestResourcesAndFacts(t *testing.T) {
	p := newProvider(t)
	b := create(t, p, providers.Spec{CPUs: 0.5, MemoryMB: 256, Workspace: "/srv/work"})
	ctx := testCtx(t)
	f, err := b.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts: %v", err)
	}
	if f.CPUs != 0.5 || f.MemoryMB != 256 {
		t.Errorf("Facts cpus %v, memory %d MB; want 0.5 and 256", f.CPUs, f.MemoryMB)
	}
	if f.Network != providers.NetworkNone || f.Ports == nil || len(f.Ports) != 0 {
		t.Errorf("Facts network %q, ports %v; want none and []", f.Network, f.Ports)
	}
	if f.Workspace != "/srv/work" || f.Arch != runtime.GOARCH || f.OS != "linux" || !strings.HasSuffix(f.Shell, "/bash") {
		t.Errorf("Facts workspace %q arch %q os %q shell %q", f.Workspace, f.Arch, f.OS, f.Shell)
	}
	if f.PtraceScope == nil || f.DiskGB <= 0 || f.StartedAt.IsZero() || !f.HasLiveProcesses() || !f.HasStdin() || f.HasFUSE() {
		t.Errorf("Facts %+v: want ptraceScope, diskGb, startedAt, liveProcesses, stdin set and no FUSE", f)
	}
	limits := run(t, ctx, b, providers.ExecRequest{Argv: []string{"cat", "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"}})
	if want := "4096\n268435456\n"; limits != want {
		t.Errorf("pids.max and memsw limit: %q, want %q", limits, want)
	}
	if got := run(t, ctx, b, providers.ExecRequest{Argv: []string{"ls", "/sys/class/net"}}); got != "lo\n" {
		t.Errorf("network interfaces %q, want only lo", got)
	}
}

// A user box runs as that uid:gid, owns its workspace and the files put
// there; dropped capabilities are gone.
func TestUserAndCapabilities(t *testing.T) {
	p := newProvider(t)
	b := create(t, p, providers.Spec{User: "1000:1001", Capabilities: providers.Capabilities{Drop: []string{"ALL"}}})
	ctx := testCtx(t)
	got := run(t, ctx, b, providers.ExecRequest{Argv: []string{"sh", "-c", `id -u; id -g; touch made-here && stat -c %u:%g . made-here; grep CapEff /proc/self/status; echo "$HOME"`}})
	want := "1000\n1001\n1000:1001\n1000:1001\nCapEff:\t0000000000000000\n/workspace\n"
	if got != want {
		t.Errorf("in a user box: %q, want %q", got, want)
	}
	a := b.(providers.Archiver)
	if err := a.PutArchive(ctx, "/workspace", tarOf(t, map[string]string{"put/file": "x"})); err != nil {
		t.Fatalf("PutArchive: %v", err)
	}
	if got := run(t, ctx, b, providers.ExecRequest{Argv: []string{"stat", "-c", "%u:%g", "put", "put/file"}}); got != "1000:1001\n1000:1001\n" {
		t.Errorf("owners of put files: %q, want the box's user", got)
	}
}

// tarOf makes a tar of files (name -> content); directories come first.
func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	}) {
		for d := filepath.Dir(name); d != "."; d = filepath.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, Uid: 4242, Gid: 4242, ModTime: time.Unix(1700000000, 0)})
			}
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o640, Size: int64(len(files[name])), Uid: 4242, Gid: 4242, ModTime: time.Unix(1700000000, 0)})
		tw.Write([]byte(files[name]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// Archive put and get round-trip contents and modes; stat-path reports
// files, directories and symlinks; missing paths are NotFound, and a
// destroyed box is Gone.
func TestArchiveAndStatPath(t *testing.T) {
	p := newProvider(t)
	b := create(t, p, providers.Spec{})
	ctx := testCtx(t)
	a := b.(providers.Archiver)
	files := map[string]string{"tree/a.txt": "alpha", "tree/sub/b.bin": "\x00\x01beta\xff", "tree/sub/deep/c": strings.Repeat("c", 100000)}
	if err := a.PutArchive(ctx, "/workspace", tarOf(t, files)); err != nil {
		t.Fatalf("PutArchive: %v", err)
	}
	if got := run(t, ctx, b, providers.ExecRequest{Argv: []string{"stat", "-c", "%a %u:%g %n", "tree/a.txt"}}); got != "640 0:0 tree/a.txt\n" {
		t.Errorf("put file: %q, want mode 640 owned by root (the box's user), not the tar's 4242", got)
	}
	rc, err := a.GetArchive(ctx, "/workspace/tree")
	if err != nil {
		t.Fatalf("GetArchive: %v", err)
	}
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			data, _ := io.ReadAll(tr)
			got[h.Name] = string(data)
			if h.Mode&0o777 != 0o640 {
				t.Errorf("%s: mode %o in the archive, want 640", h.Name, h.Mode)
			}
		}
	}
	rc.Close()
	if len(got) != len(files) {
		t.Errorf("GetArchive returned %d files, want %d", len(got), len(files))
	}
	for name, want := range files {
		if got[name] != want {
			t.Errorf("%s: got %d bytes, want %d", name, len(got[name]), len(want))
		}
	}

	run(t, ctx, b, providers.ExecRequest{Argv: []string{"ln", "-s", "tree/a.txt", "link"}})
	st := b.(providers.PathStater)
	fi, err := st.StatPath(ctx, "/workspace/tree/sub/deep/c")
	if err != nil || fi.Name != "c" || fi.Size != 100000 || !fi.IsRegular() || fi.Mode.Perm() != 0o640 || !fi.Mtime.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("StatPath(file) = %+v, %v", fi, err)
	}
	if fi, err := st.StatPath(ctx, "/workspace/tree/sub"); err != nil || !fi.IsDir() {
		t.Errorf("StatPath(dir) = %+v, %v", fi, err)
	}
	if fi, err := st.StatPath(ctx, "/workspace/link"); err != nil || !fi.IsSymlink() || fi.Target != "/workspace/tree/a.txt" {
		t.Errorf("StatPath(symlink) = %+v, %v; want a symlink to /workspace/tree/a.txt", fi, err)
	}
	_, err = st.StatPath(ctx, "/workspace/missing")
	wantCode(t, err, providers.NotFound, "StatPath of a missing path")
	_, err = a.GetArchive(ctx, "/workspace/missing")
	wantCode(t, err, providers.NotFound, "GetArchive of a missing path")
	err = a.PutArchive(ctx, "/workspace/missing", tarOf(t, files))
	wantCode(t, err, providers.NotFound, "PutArchive into a missing directory")
	err = a.PutArchive(ctx, "/workspace", strings.NewReader(strings.Repeat("not a tar ", 100)))
	wantCode(t, err, providers.Invalid, "PutArchive of a malformed tar")

	if err := b.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = st.StatPath(ctx, "/workspace")
	wantCode(t, err, providers.Gone, "StatPath after Destroy")
	_, err = a.GetArchive(ctx, "/workspace")
	wantCode(t, err, providers.Gone, "GetArchive after Destroy")
}

// Attach finds only boxfs's containers.
func TestAttachOnlyBoxes(t *testing.T) {
	p := newProvider(t)
	cli := dockerClient(t)
	ctx := testCtx(t)
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: docker.DefaultImage, Cmd: []string{"true"}, Labels: map[string]string{testbox.Label: t.Name()}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	_, err = p.Attach(ctx, c.ID)
	wantCode(t, err, providers.NotFound, "Attach of a container boxfs did not make")
	_, err = p.Attach(ctx, "0123456789ab-no-such-container")
	wantCode(t, err, providers.NotFound, "Attach of a missing container")

	b := create(t, p, providers.Spec{Labels: map[string]string{"role": "x"}})
	got, err := providers.Open("docker", providers.Config{})
	if err != nil {
		t.Fatalf("providers.Open: %v", err)
	}
	again, err := got.Attach(ctx, b.ID())
	if err != nil || again.Labels()["role"] != "x" || again.Labels()["boxfs"] != "1" {
		t.Fatalf("Attach through the registry: %v, labels %v", err, again.Labels())
	}
}

// The wrapper every command runs under works with busybox's sh as with
// dash: argv byte for byte (non-UTF-8 too), exit codes, stdin to EOF.
func TestBusyboxImage(t *testing.T) {
	p := newProvider(t)
	b := create(t, p, providers.Spec{Image: "boxfs-busybox:latest"})
	ctx := testCtx(t)
	args := []string{"", "two words", `back\slash \0101`, "\xff\xfe non-UTF-8 \x80", "new\nline", "%s", "-n", "$(id)"}
	out := run(t, ctx, b, providers.ExecRequest{Argv: append([]string{"printf", `%s\0`}, args...)})
	if got := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00"); !slices.Equal(got, args) {
		t.Errorf("busybox printf got %q, want %q", got, args)
	}
	proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", "exit 42"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := proc.Wait(); code != 42 || err != nil {
		t.Errorf("exit 42: got %d, %v", code, err)
	}
	if got := run(t, ctx, b, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("in\x00put")}); got != "in\x00put" {
		t.Errorf("cat of stdin: %q", got)
	}
}

// One writer for stdout and stderr: the command's stderr joins its stdout
// in the box, so the order it wrote in is kept; two writers keep them apart.
func TestSameWriterKeepsOrder(t *testing.T) {
	p := newProvider(t)
	b := create(t, p, providers.Spec{})
	script := []string{"sh", "-c", "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done"}
	var both bytes.Buffer
	proc, err := b.Exec(testCtx(t), providers.ExecRequest{Argv: script, Stdout: &both, Stderr: &both})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := proc.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	if want := "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n"; both.String() != want {
		t.Errorf("one writer got %q, want %q", both.String(), want)
	}
	var out, errb bytes.Buffer
	proc, err = b.Exec(testCtx(t), providers.ExecRequest{Argv: script, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	proc.Wait()
	if out.String() != "out1\nout2\nout3\nout4\nout5\n" || errb.String() != "err1\nerr2\nerr3\nerr4\nerr5\n" {
		t.Errorf("two writers got %q and %q", out.String(), errb.String())
	}
}
