package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// peer is one way of presenting a box's workspace on the host.
type peer struct {
	name  string
	about string // one line for the report: what it is and how it is set up
	// inBox: the files live in the bench container, and the latency
	// injection applies to the peer.
	inBox bool
	// noMount: the peer has no mount (raw docker exec); only the exec
	// workloads run on it.
	noMount bool
	// slow: runs in the first -slow-reps repetitions only.
	slow bool

	root    string // the workspace as the workloads see it (a host path)
	boxRoot string // the same directory as the box sees it
	probe   *probe // a shell in the box
	// facts is the box's facts.json in a boxfs mount, whose watchReports
	// count the watch's reports taken and dropped as echoes; "" for the
	// peers that are not boxfs.
	facts string
	// seedTar extracts a tar into a box directory, for a box that is
	// neither the bench container nor on the host (a pod); nil otherwise.
	seedTar func(ctx context.Context, data []byte, dir string) error

	mount   func(ctx context.Context, r *run) error
	unmount func(ctx context.Context, r *run) error
	// coldPrep runs between an unmount and a cold mount: it drops the
	// peer's own on-disk cache.
	coldPrep func(r *run) error
	// exec runs a shell line in the box through the peer's own command
	// channel (boxfs's exec file) and returns its output; nil for peers
	// that have none.
	exec func(ctx context.Context, line string) (string, error)
	// shell is the command an agent host's bash tool runs on this peer,
	// SHELL -c line, in the workspace directory rel ("" the workspace):
	// boxfs sh with the cwd in the mount, docker exec -w, bash on the
	// host for native; nil for peers with no shell in the box.
	shell func(ctx context.Context, r *run, rel, line string) *exec.Cmd
	// kill ends the peer's daemon at once and detaches its mount: the
	// watchdog's way out of a hung file system.
	kill func()
	// reset forgets what the peer set up in the box, for a new delay;
	// finish ends what it made, at the end of the run.
	reset  func()
	finish func(r *run)

	d *daemon
}

// daemon is a long-lived process the harness started (a FUSE server, the
// ssh gate, the delay proxy), logged to a file and stopped by its pid.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startDaemon(logDir, name string, env []string, argv ...string) (*daemon, error) {
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== %s start: %q\n", time.Now().Format(time.RFC3339Nano), argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		fmt.Fprintf(logf, "=== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), d.err)
		logf.Close()
		close(d.done)
	}()
	return d, nil
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits up to wait for the exit, then SIGKILL.
func (d *daemon) stop(sig syscall.Signal, wait time.Duration) error {
	if d == nil {
		return nil
	}
	if !d.exited() {
		d.cmd.Process.Signal(sig)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(wait):
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.done
		return fmt.Errorf("%s did not end within %v of %v; killed", d.name, wait, sig)
	}
}

// waitExit waits for the daemon to end by itself.
func (d *daemon) waitExit(wait time.Duration) bool {
	select {
	case <-d.done:
		return true
	case <-time.After(wait):
		return false
	}
}

// mountType returns the file system type mounted exactly at mnt.
func mountType(mnt string) (string, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || unescapeMount(fields[4]) != mnt {
			continue
		}
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) {
				return fields[i+1], true
			}
		}
	}
	return "", false
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// waitMounted waits until a FUSE file system is mounted at mnt, failing if
// d ends first.
func waitMounted(ctx context.Context, mnt string, d *daemon) error {
	for {
		if t, ok := mountType(mnt); ok && strings.HasPrefix(t, "fuse") {
			return nil
		}
		if d != nil && d.exited() {
			return fmt.Errorf("%s ended before mounting (%v); see logs/%s.log", d.name, d.err, d.name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not mounted at %s: %w", d.name, mnt, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fuseUnmount unmounts mnt, retrying while it is busy.
func fuseUnmount(ctx context.Context, mnt string) error {
	var last []byte
	for range 50 {
		if _, ok := mountType(mnt); !ok {
			return nil
		}
		out, err := exec.CommandContext(ctx, "fusermount3", "-u", mnt).CombinedOutput()
		if err == nil {
			return nil
		}
		last = out
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("fusermount3 -u %s: %s", mnt, strings.TrimSpace(string(last)))
}

// lazyUnmount detaches mnt even when busy or its daemon is gone.
func lazyUnmount(mnt string) {
	if _, ok := mountType(mnt); ok {
		exec.Command("fusermount3", "-u", "-z", mnt).Run()
	}
}

// dropCaches writes dirty pages and drops the kernel's page, dentry and
// inode caches: the host's and, on this one kernel, the container's too.
func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// fusePeer fills in the daemon handling shared by the FUSE peers: start
// argv, wait for the mount, and unmount with fusermount3.
func (p *peer) startFUSE(ctx context.Context, r *run, mnt string, env []string, argv ...string) error {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	d, err := startDaemon(r.logDir, p.name, env, argv...)
	if err != nil {
		return err
	}
	p.d = d
	mctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitMounted(mctx, mnt, d); err != nil {
		d.stop(syscall.SIGTERM, 5*time.Second)
		lazyUnmount(mnt)
		return err
	}
	return nil
}

func (p *peer) stopFUSE(ctx context.Context, mnt string) error {
	err := fuseUnmount(ctx, mnt)
	if p.d != nil {
		if !p.d.waitExit(15 * time.Second) {
			p.d.stop(syscall.SIGTERM, 10*time.Second)
		}
		p.d = nil
	}
	if err != nil {
		lazyUnmount(mnt)
	}
	return err
}

func (p *peer) killFUSE(mnt string) {
	if p.d != nil {
		p.d.cmd.Process.Signal(syscall.SIGKILL)
	}
	lazyUnmount(mnt)
}

// --- the peers ---

func nativePeer(r *run) *peer {
	dir := filepath.Join(r.work, "box", "native")
	return &peer{
		name:    "native",
		about:   "the host directory itself, no FUSE (ext4 on the VM's disk)",
		root:    dir,
		boxRoot: dir,
		probe:   r.hostProbe,
		mount:   func(context.Context, *run) error { return os.MkdirAll(dir, 0o755) },
		unmount: func(context.Context, *run) error { return nil },
		kill:    func() {},
		shell: func(ctx context.Context, _ *run, rel, line string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, "bash", "-c", line)
			cmd.Dir = filepath.Join(dir, rel)
			cmd.Env = toolEnv(cmd.Dir)
			return cmd
		},
	}
}

func loopbackPeer(r *run) *peer {
	back := filepath.Join(r.work, "box", "loopback")
	mnt := filepath.Join(r.work, "mnt", "loopback")
	p := &peer{
		name:    "loopback",
		about:   "go-fuse v2 fs.NewLoopbackRoot over a host directory (bench/loopback; 1 s entry/attr timeouts): the FUSE ceiling",
		root:    mnt,
		boxRoot: back,
		probe:   r.hostProbe,
	}
	p.mount = func(ctx context.Context, r *run) error {
		if err := os.MkdirAll(back, 0o755); err != nil {
			return err
		}
		return p.startFUSE(ctx, r, mnt, toolEnv("/"), r.loopbackBin, back, mnt)
	}
	p.unmount = func(ctx context.Context, r *run) error { return p.stopFUSE(ctx, mnt) }
	p.kill = func() { p.killFUSE(mnt) }
	return p
}

func sshfsPeer(r *run) *peer {
	mnt := filepath.Join(r.work, "mnt", "sshfs")
	p := &peer{
		name:    "sshfs",
		about:   "sshfs defaults, -o ssh_command='boxbench sftp-wrapper CTR DELAY' (docker exec -i CTR sftp-server; no sshd, no network)",
		inBox:   true,
		root:    mnt,
		boxRoot: boxWorkspace,
		probe:   r.boxProbe,
	}
	p.mount = func(ctx context.Context, r *run) error {
		wrapper := fmt.Sprintf("ssh_command=%s sftp-wrapper %s %s", r.self, r.ctr, r.delay)
		return p.startFUSE(ctx, r, mnt, toolEnv("/"), "sshfs", "-f", "-o", wrapper, "box:"+boxWorkspace, mnt)
	}
	p.unmount = func(ctx context.Context, r *run) error { return p.stopFUSE(ctx, mnt) }
	p.kill = func() { p.killFUSE(mnt) }
	return p
}

func rclonePeer(r *run, mode string, rcPort int) *peer {
	name := "rclone-" + mode
	mnt := filepath.Join(r.work, "mnt", name)
	cache := filepath.Join(r.work, "rclone-cache", name)
	p := &peer{
		name: name,
		about: fmt.Sprintf("rclone mount, sftp backend, --vfs-cache-mode %s, other VFS options default; "+
			"reaches sftp-server through the ssh gate, which runs the same wrapper (--sftp-shell-type none, --sftp-disable-hashcheck: no md5sum commands)", mode),
		inBox:   true,
		root:    mnt,
		boxRoot: boxWorkspace,
		probe:   r.boxProbe,
	}
	rc := fmt.Sprintf("127.0.0.1:%d", rcPort)
	p.mount = func(ctx context.Context, r *run) error {
		return p.startFUSE(ctx, r, mnt, toolEnv("/"), "rclone", "mount", ":sftp:"+boxWorkspace, mnt,
			"--config", r.rcloneConf,
			"--sftp-host", "127.0.0.1", "--sftp-port", strconv.Itoa(r.gatePort), "--sftp-user", "root",
			"--sftp-key-file", r.gateKey, "--sftp-shell-type", "none", "--sftp-disable-hashcheck",
			"--vfs-cache-mode", mode, "--cache-dir", cache,
			"--rc", "--rc-addr", rc, "--rc-no-auth")
	}
	p.unmount = func(ctx context.Context, r *run) error {
		var qerr error
		if mode != "off" {
			qerr = rcloneDrain(ctx, rc, 5*time.Minute)
		}
		err := p.stopFUSE(ctx, mnt)
		return errors.Join(qerr, err)
	}
	p.coldPrep = func(*run) error { return os.RemoveAll(cache) }
	p.kill = func() { p.killFUSE(mnt) }
	return p
}

// rcloneDrain waits until rclone's VFS has no upload queued or running.
func rcloneDrain(ctx context.Context, addr string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		var st struct {
			DiskCache struct {
				UploadsInProgress int `json:"uploadsInProgress"`
				UploadsQueued     int `json:"uploadsQueued"`
			} `json:"diskCache"`
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/vfs/stats", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if err == nil && st.DiskCache.UploadsInProgress == 0 && st.DiskCache.UploadsQueued == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rclone upload queue not empty after %v (%+v, %v)", bound, st.DiskCache, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// boxfsPeer mounts boxfs with the real CLI. docker: the bench container,
// attached by id; kubernetes: the bench pod (r.k8sBox), attached by name;
// local: a local-provider box, made by the first mount. write is the
// mount's -o write= ("" for the default).
func boxfsPeer(r *run, provider, write string) *peer {
	name := "boxfs"
	box := "b"
	switch provider {
	case "local":
		name, box = "boxfs-local", "bl"
	case "kubernetes":
		name, box = k8sPeer, "bk"
	}
	if write != "" {
		name += "-" + write
	}
	mnt := filepath.Join(r.work, "mnt", name)
	state := filepath.Join(r.work, "state", name)
	p := &peer{
		name:  name,
		inBox: provider == "docker",
		root:  filepath.Join(mnt, box, "work"),
		facts: filepath.Join(mnt, box, "facts.json"),
	}
	switch {
	case provider == "docker" && write != "":
		p.about = "boxfs mount -o write=" + write + " (CLI), `attach b provider=docker id=CTR`; with a delay, the Docker API through the delay proxy and the agent's direct channel off"
		p.boxRoot = boxWorkspace
		p.probe = r.boxProbe
	case provider == "docker":
		p.about = "boxfs mount (CLI, defaults), `attach b provider=docker id=CTR`; with a delay, the Docker API through the delay proxy and the agent's direct channel off"
		p.boxRoot = boxWorkspace
		p.probe = r.boxProbe
	case provider == "kubernetes":
		p.about = "boxfs mount (CLI, defaults), `attach bk provider=kubernetes id=POD` on the scripts/k8s-up cluster; no delay runs"
		p.boxRoot = boxWorkspace // the probe is set when the pod is made
	default:
		p.about = "boxfs mount (CLI, defaults), `new bl provider=local`: boxfs's own cost over a host directory"
		p.probe = r.hostProbe
	}
	recorded := false
	p.mount = func(ctx context.Context, r *run) error {
		if !recorded {
			os.RemoveAll(state)
		}
		env := toolEnv("/")
		conf := r.emptyConf
		delayed := provider == "docker" && r.proxySock != ""
		if delayed {
			// Every agent request crosses the delayed Docker API, as
			// with a remote daemon: the direct channel would bypass it.
			env = append(env, "DOCKER_HOST=unix://"+r.proxySock)
			conf = r.noDirectConf
		}
		if provider == "kubernetes" {
			env = append(env, "KUBECONFIG="+r.kubeconfig)
		}
		argv := []string{r.boxfsBin, "--state", state, "--config", conf, "--log-level", "info", "mount"}
		if write != "" {
			argv = append(argv, "-o", "write="+write)
		}
		if err := p.startFUSE(ctx, r, mnt, env, append(argv, mnt)...); err != nil {
			return err
		}
		if !recorded {
			msg := fmt.Sprintf("attach %s provider=docker id=%s\n", box, r.ctr)
			if provider == "kubernetes" {
				msg = fmt.Sprintf("attach %s provider=kubernetes id=%s\n", box, r.pod)
			}
			if provider == "local" {
				msg = fmt.Sprintf("new %s provider=local lifetime=3h\n", box)
			}
			if err := os.WriteFile(filepath.Join(mnt, "ctl"), []byte(msg), 0); err != nil {
				e, _ := os.ReadFile(filepath.Join(mnt, "err"))
				return fmt.Errorf("ctl %q: %v (%s)", strings.TrimSpace(msg), err, strings.TrimSpace(string(e)))
			}
			recorded = true
		}
		if provider == "local" && p.boxRoot == "" {
			b, err := os.ReadFile(filepath.Join(mnt, box, "facts.json"))
			if err != nil {
				return err
			}
			var f struct {
				Workspace string `json:"workspace"`
			}
			if err := json.Unmarshal(b, &f); err != nil || f.Workspace == "" {
				return fmt.Errorf("facts.json of the local box names no workspace: %v %s", err, clip(string(b), 200))
			}
			p.boxRoot = f.Workspace
		}
		if _, err := os.Stat(p.root); err != nil {
			return fmt.Errorf("the box's work/ after mounting: %v", err)
		}
		if delayed {
			return checkNoDirect(p.facts)
		}
		return nil
	}
	p.unmount = func(ctx context.Context, r *run) error {
		// SIGTERM: the daemon pushes dirty files, then unmounts.
		var err error
		if p.d != nil {
			err = p.d.stop(syscall.SIGTERM, 2*time.Minute)
			p.d = nil
		}
		if t, ok := mountType(mnt); ok {
			lazyUnmount(mnt)
			err = errors.Join(err, fmt.Errorf("%s still mounted (%s) after its daemon ended", mnt, t))
		}
		return err
	}
	// The box record stays; its content cache goes.
	p.coldPrep = func(*run) error { return os.RemoveAll(filepath.Join(state, "cache")) }
	p.kill = func() { p.killFUSE(mnt) }
	p.exec = func(ctx context.Context, line string) (string, error) {
		return execFile(ctx, filepath.Join(mnt, box, "exec"), line)
	}
	p.shell = func(ctx context.Context, r *run, rel, line string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, r.boxfsBin, "sh", "-c", line)
		cmd.Dir = filepath.Join(p.root, rel)
		cmd.Env = toolEnv(cmd.Dir)
		return cmd
	}
	// A local box made by boxfs is destroyed through the CLI (it has a
	// watchdog process of its own); the docker box is the bench's, which
	// destroys it.
	p.finish = func(r *run) {
		if recorded && provider == "local" {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, r.boxfsBin, "--state", state, "--config", r.emptyConf, "rm", box)
			cmd.Env = toolEnv("/")
			if out, err := cmd.CombinedOutput(); err != nil {
				log.Printf("%s: boxfs rm %s: %v: %s", name, box, err, out)
			}
			// The next box is another directory.
			p.boxRoot = ""
		}
		recorded = false
	}
	// A new group (another delay) starts from a new state directory.
	p.reset = func() { p.finish(r) }
	return p
}

// noDirectConfig is boxfs's config at an added delay: the Docker
// provider's option that keeps the agent's requests on the exec.
const noDirectConfig = "[providers.docker]\ndirect = \"off\"\n"

// checkNoDirect fails when the box's facts.json says the agent's requests
// take a direct channel, which the delay proxy would not see.
func checkNoDirect(facts string) error {
	var f struct {
		Agent struct {
			Direct string `json:"direct"`
		} `json:"agent"`
	}
	if err := readFacts(facts, &f); err != nil {
		return err
	}
	if f.Agent.Direct != "" {
		return fmt.Errorf("%s: the agent's requests take the direct channel %q, which bypasses the delay", facts, f.Agent.Direct)
	}
	return nil
}

// execFile runs line through a boxfs exec file: write the line, read the
// output to EOF on the same open file.
func execFile(ctx context.Context, path, line string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	if _, err := f.Write([]byte(line + "\n")); err != nil {
		return "", fmt.Errorf("write %s: %v", path, err)
	}
	out, err := io.ReadAll(f)
	if err != nil {
		return string(out), fmt.Errorf("read %s: %v", path, err)
	}
	return string(out), nil
}

// dockerExecPeer is no mount: every file operation is its own `docker
// exec` (the per-operation floor of exec-per-op designs).
func dockerExecPeer(r *run) *peer {
	return &peer{
		name:    "docker-exec",
		about:   "no mount: one `docker exec` (CLI) per operation, through the delay proxy when a delay is set",
		inBox:   true,
		noMount: true,
		boxRoot: boxWorkspace,
		probe:   r.boxProbe,
		mount:   func(context.Context, *run) error { return nil },
		unmount: func(context.Context, *run) error { return nil },
		kill:    func() {},
		// What a host would name as its shell without boxfs: a wrapper
		// that runs each command by docker exec, stdin attached.
		shell: func(ctx context.Context, r *run, rel, line string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, "docker", "exec", "-i", "-w", path.Join(boxWorkspace, rel), r.ctr, "bash", "-c", line)
			cmd.Env = toolEnv("/")
			if r.proxySock != "" {
				cmd.Env = append(cmd.Env, "DOCKER_HOST=unix://"+r.proxySock)
			}
			return cmd
		},
	}
}

// docker runs the docker CLI and returns its stdout: against the daemon
// the peers see (the delay proxy when a delay is set) when viaProxy, else
// against the daemon itself.
func (r *run) docker(ctx context.Context, viaProxy bool, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = toolEnv("/")
	if viaProxy && r.proxySock != "" {
		cmd.Env = append(cmd.Env, "DOCKER_HOST=unix://"+r.proxySock)
	}
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 5 * time.Second
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, clip(stderr.String(), 300))
	}
	return out, nil
}
