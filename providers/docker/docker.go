// Package docker runs boxes as Docker containers, through the Docker Engine
// API.
//
// A box is a container whose command sleeps out its lifetime (the image's
// entrypoint is replaced): Docker itself ends the box when its lifetime
// passes, whatever happens to the host. The sleeper is PID 1 (keeperScript),
// the one process a program in the box cannot signal, so `kill -9 -1` or
// `pkill sleep` in the box ends what it ran, never the box; it reaps the
// orphans handed to it, as docker-init would. A suspend stops the container
// (the keeper exits on SIGUSR1): its
// processes end, its filesystem stays, and a resume starts it again with
// what is left of its lifetime. A snapshot commits it to an image. Every container
// carries the label boxfs=1 and the provider's own labels under "boxfs.".
// Commands run through the exec API, each as its own process group; bulk
// files move through the archive API.
//
// The daemon is the one DOCKER_HOST (or the "host" option) names, else the
// default socket. scripts/docker-up starts one and builds the default image,
// boxfs-base:latest.
package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/boxfs/boxfs/providers"
)

// Name is the provider's registry name.
const Name = "docker"

const (
	// DefaultImage is the image a box runs when the spec names none: the
	// offline Debian image scripts/docker-up builds.
	DefaultImage = "boxfs-base:latest"
	// DefaultWorkspace is the box-side workspace when the spec names none.
	DefaultWorkspace = "/workspace"
	// DefaultPidsLimit caps the number of processes in a box.
	DefaultPidsLimit = 4096
	// basePath is the PATH every box process starts with.
	basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	tmpDir   = "/tmp"
)

// Labels the provider sets on every container. Callers may not set labels
// under "boxfs" (providers.ReservedLabel).
const (
	labelMarker    = "boxfs" // "1": a boxfs box
	labelProvider  = "boxfs.provider"
	labelLifetime  = "boxfs.lifetime" // seconds
	labelCreated   = "boxfs.created"  // RFC 3339, UTC
	labelWorkspace = "boxfs.workspace"
	labelUser      = "boxfs.user" // "uid:gid", absent for the image's user
)

func init() {
	providers.Register(Name, func(cfg providers.Config) (providers.Provider, error) { return New(cfg) })
}

// Provider makes boxes as containers of one Docker engine.
type Provider struct {
	cli   *client.Client
	image string
	pids  int64
	local bool // the daemon runs on this machine: bind mounts are possible
	// noDirect: the agent's requests stay on the exec (option direct=off)
	noDirect bool
	log      *slog.Logger
}

var _ providers.Provider = (*Provider)(nil)

// New opens the provider. Options:
//
//	host   the daemon's address (overrides DOCKER_HOST), e.g. unix:///var/run/docker.sock
//	image  the image of a box whose spec names none (default boxfs-base:latest)
//	pids   the pids limit of every box (default 4096)
//	direct "auto" (the default): the agent channel dials the box when the
//	       daemon is on this machine (Box.DirectRoutes); "off": its
//	       requests always go over the exec, as with a remote daemon
//
// New does not contact the daemon; the first call that needs it does.
func New(cfg providers.Config) (*Provider, error) {
	const op = "docker.New"
	if err := providers.CheckOptions(op, cfg.Options, "host", "image", "pids", "direct"); err != nil {
		return nil, err
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if h := cfg.Options["host"]; h != "" {
		opts = append(opts, client.WithHost(h))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, providers.E(providers.Invalid, op, err)
	}
	p := &Provider{cli: cli, image: DefaultImage, pids: DefaultPidsLimit, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.Default()
	}
	if v := cfg.Options["image"]; v != "" {
		p.image = v
	}
	if v := cfg.Options["pids"]; v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return nil, providers.Errorf(providers.Invalid, op, "option pids=%q is not a positive number", v)
		}
		p.pids = n
	}
	switch v := cfg.Options["direct"]; v {
	case "", "auto":
	case "off":
		p.noDirect = true
	default:
		return nil, providers.Errorf(providers.Invalid, op, "option direct=%q: want auto or off", v)
	}
	p.local = isLocalHost(cli.DaemonHost())
	return p, nil
}

// isLocalHost reports whether a daemon address is on this machine: a unix
// socket or named pipe, or TCP to a loopback address.
func isLocalHost(host string) bool {
	u, err := url.Parse(host)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "unix", "npipe":
		return true
	case "tcp", "http", "https":
		h := u.Hostname()
		if h == "localhost" {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return false
}

// Name returns "docker".
func (p *Provider) Name() string { return Name }

// Ping checks that the daemon answers; Unavailable when it does not.
func (p *Provider) Ping(ctx context.Context) error {
	if _, err := p.cli.Ping(ctx); err != nil {
		return wrap("docker.Ping", "", err)
	}
	return nil
}

// Close releases the provider's connections to the daemon.
func (p *Provider) Close() error { return p.cli.Close() }

// supported are the spec fields Create honours; the others are refused.
var supported = []string{
	"image", "snapshot", "lifetime", "cpus", "memoryMb", "isolation", "network", "env",
	"labels", "mounts", "workspace", "user", "capabilities",
}

// Create makes and starts a container for spec; a snapshot (an image
// Snapshot made, by id or boxfs-snapshot:NAME) is its image. Region, gpu and
// ports are Unsupported, as are isolation other than "container", an open
// network where the daemon has no bridge, and an allowlist; bind mounts are
// Unsupported when the daemon is not on this machine, and a mount source this
// machine lacks is NotFound.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "docker.Create"
	if err := spec.Validate(); err != nil {
		return nil, providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supported...); err != nil {
		return nil, err
	}
	if spec.Isolation != "" && spec.Isolation != providers.IsolationContainer {
		return nil, providers.Errorf(providers.Unsupported, op, "isolation %q: docker boxes are containers", spec.Isolation)
	}
	mounts, err := p.mounts(op, spec.Mounts)
	if err != nil {
		return nil, err
	}
	netMode, err := p.networkMode(ctx, op, spec.Network)
	if err != nil {
		return nil, err
	}
	ws := DefaultWorkspace
	if spec.Workspace != "" {
		ws = path.Clean(spec.Workspace)
	}
	image, err := p.imageOf(ctx, op, spec)
	if err != nil {
		return nil, err
	}
	lifetime := spec.LifetimeOrDefault()
	secs := int64(math.Ceil(lifetime.Seconds()))
	madeAt := time.Now().UTC()

	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelMarker] = "1"
	labels[labelProvider] = Name
	labels[labelLifetime] = strconv.FormatInt(secs, 10)
	labels[labelCreated] = madeAt.Format(time.RFC3339Nano)
	labels[labelWorkspace] = ws
	if spec.User != "" {
		labels[labelUser] = spec.User
	}

	cfg := &container.Config{
		Image:      image,
		Entrypoint: []string{"sh", "-c", keeperScript, "boxfs-keeper"},
		Cmd:        []string{strconv.FormatInt(secs, 10), strconv.FormatInt(madeAt.Add(time.Duration(secs)*time.Second).Unix()+keeperSlack, 10)},
		Env:        boxEnv(spec.Env, spec.User, ws),
		Labels:     labels,
		WorkingDir: ws, // Docker creates it, owned by root
		User:       spec.User,
	}
	noInit := false
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(netMode),
		Init:          &noInit, // the keeper is PID 1 (keeperScript)
		Mounts:        mounts,
		CapDrop:       spec.Capabilities.Drop,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Resources:     container.Resources{PidsLimit: &p.pids},
	}
	if spec.CPUs > 0 {
		hc.CPUPeriod = 100000
		hc.CPUQuota = int64(math.Round(spec.CPUs * 100000))
	}
	if spec.MemoryMB > 0 {
		hc.Memory = int64(spec.MemoryMB) << 20
		hc.MemorySwap = hc.Memory // no swap beyond the limit
	}

	created, err := p.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "boxfs-"+providers.NewID(6))
	if err != nil {
		e := wrap(op, "", err)
		if e.Code == providers.NotFound {
			e.Err = errorWithHint{err, "image " + image + " is missing; scripts/docker-up builds " + DefaultImage}
		}
		return nil, e
	}
	b := p.newBox(created.ID, labels)
	if err := p.start(ctx, b, spec.User, ws); err != nil {
		// Leave nothing behind, even when ctx is what failed.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := p.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil && errorCode(rerr) != providers.NotFound {
			p.log.Warn("docker: removing a box whose start failed", "box", created.ID, "err", rerr)
			return nil, wrap(op, created.ID, errorWithHint{err, "and removing the container failed: " + rerr.Error()})
		}
		return nil, wrap(op, created.ID, err)
	}
	return b, nil
}

// imageOf is the image a box of spec runs: its snapshot, its image, or the
// provider's default. A snapshot and an image together are Invalid.
func (p *Provider) imageOf(ctx context.Context, op string, spec providers.Spec) (string, error) {
	switch {
	case spec.Snapshot != "" && spec.Image != "":
		return "", providers.Errorf(providers.Invalid, op, "a snapshot is an image: give snapshot or image, not both")
	case spec.Snapshot != "":
		return spec.Snapshot, p.snapshotImage(ctx, op, spec.Snapshot)
	case spec.Image != "":
		return spec.Image, nil
	}
	return p.image, nil
}

// start gives a non-root user its workspace, then starts the container.
func (p *Provider) start(ctx context.Context, b *Box, user, ws string) error {
	if user != "" && ws != "/" {
		// Docker made the workspace owned by root; hand it to the user through
		// the archive API, which needs no capability in the box (CapDrop ALL
		// would stop a chown there).
		uid, gid, _ := providers.ParseUser(user)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path.Base(ws) + "/", Mode: 0o755, Uid: uid, Gid: gid, ModTime: time.Now()}); err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		if err := p.cli.CopyToContainer(ctx, b.id, path.Dir(ws), &buf, container.CopyToContainerOptions{}); err != nil {
			return err
		}
	}
	return p.cli.ContainerStart(ctx, b.id, container.StartOptions{})
}

// boxEnv is the environment every process of a box starts with: the fixed
// base, then the spec's. Nothing of the host's.
func boxEnv(spec map[string]string, user, ws string) []string {
	env := map[string]string{"PATH": basePath, "HOME": "/root", "TMPDIR": tmpDir}
	if user != "" {
		if uid, _, _ := providers.ParseUser(user); uid != 0 {
			env["HOME"] = ws // /root is not the user's
		}
	}
	maps.Copy(env, spec)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// mounts turns spec mounts into bind mounts. Checked before any call to the
// daemon: the source must exist here, and the daemon must run here.
func (p *Provider) mounts(op string, ms []providers.Mount) ([]mount.Mount, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	if !p.local {
		return nil, providers.Errorf(providers.Unsupported, op, "bind mounts need a daemon on this machine; %s is not", p.cli.DaemonHost())
	}
	out := make([]mount.Mount, 0, len(ms))
	for _, m := range ms {
		src, err := filepath.Abs(m.Source)
		if err != nil {
			return nil, providers.E(providers.Invalid, op, err).WithPath(m.Source)
		}
		if _, err := os.Stat(src); err != nil {
			return nil, providers.E(0, op, err).WithPath(src)
		}
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: src, Target: path.Clean(m.Target), ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// networkMode maps the spec's network to a Docker network mode. "open" needs
// the daemon's default bridge, which scripts/docker-up does not create.
func (p *Provider) networkMode(ctx context.Context, op string, n providers.Network) (string, error) {
	switch n.Mode {
	case "", providers.NetworkNone:
		return "none", nil
	case providers.NetworkOpen:
		if _, err := p.cli.NetworkInspect(ctx, "bridge", network.InspectOptions{}); err != nil {
			if errorCode(err) == providers.NotFound {
				return "", providers.Errorf(providers.Unsupported, op, "network open: the daemon has no bridge network (it runs with --bridge=none)")
			}
			return "", wrap(op, "", err)
		}
		return "bridge", nil
	}
	return "", providers.Errorf(providers.Unsupported, op, "network mode %q: docker boxes have no egress allowlist", n.Mode)
}

// Attach finds a box by container id (or name). A container that is gone,
// or that boxfs did not make, is NotFound.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "docker.Attach"
	if id == "" {
		return nil, providers.Errorf(providers.Invalid, op, "empty box id")
	}
	c, err := p.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if c.Config == nil || c.Config.Labels[labelMarker] != "1" {
		return nil, providers.Errorf(providers.NotFound, op, "container %s is not a boxfs box", id).WithBox(id)
	}
	return p.newBox(c.ID, c.Config.Labels), nil
}

// List returns the boxes carrying every label in labels, ended ones included
// until they are destroyed.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "docker.List"
	f := filters.NewArgs(filters.Arg("label", labelMarker+"=1"))
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	cs, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, wrap(op, "", err)
	}
	out := make([]providers.Box, 0, len(cs))
	for _, c := range cs {
		if !providers.MatchLabels(c.Labels, labels) {
			continue
		}
		out = append(out, p.newBox(c.ID, c.Labels))
	}
	return out, nil
}

// errorWithHint adds a sentence to an error and keeps it as the cause.
type errorWithHint struct {
	err  error
	hint string
}

func (e errorWithHint) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e errorWithHint) Unwrap() error { return e.err }

// keeperSlack is what the keeper's cap ($2) adds to the box's end. A box's
// first start comes after the host made it, by more than a moment on a busy
// engine: the cap must not cut its lifetime short. A box started again
// after a suspend (Resume refuses one past its lifetime) ends at the latest
// this long after its lifetime.
const keeperSlack = 60

// keeperScript is a box's PID 1: it sleeps until SECONDS ($1) have passed
// since it started, or until $2 (Unix seconds: when the host made the box
// plus its lifetime, and keeperSlack) if that is sooner, then exits 0
// (Status reads that as "lifetime passed"); so a box started again after a
// suspend ends when it would have. PID 1 of a PID namespace gets no signal from inside it
// that it has no handler for, SIGKILL included, so nothing a box runs can
// end the box early; a sleep killed from inside (kill -9 -1, pkill sleep)
// is started again for what is left. SIGUSR1 (Suspend's signal) makes
// it exit exitSuspended: the box stops and can start again (a program in
// the box that sends it suspends its own box). Its wait reaps every child,
// the orphans that commands leave included. Without date(1) it sleeps
// once, as `sleep SECONDS` would.
const keeperScript = `trap '' HUP INT QUIT TERM USR2 PIPE
trap 'exit 75' USR1
command -v date >/dev/null 2>&1 || { sleep "$1" & wait $!; exit 0; }
end=$(( $(date +%s) + $1 ))
[ -n "$2" ] && [ "$2" -lt "$end" ] && end=$2
while :; do
	left=$(( end - $(date +%s) ))
	[ "$left" -gt 0 ] || exit 0
	sleep "$left" &
	wait $!
done
`
