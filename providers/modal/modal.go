// Package modal runs boxes as Modal sandboxes, speaking Modal's gRPC API:
// the control plane (modal.client.ModalClient) for the sandboxes' lives and
// each sandbox's command router (modal.task_command_router) for commands.
//
// A box is a sandbox of one Modal app ("boxfs" by default), made from a
// registry image (built through ImageGetOrCreate) or an existing image id,
// with Modal's timeout_secs as its lifetime: Modal ends it whatever
// happens to the host. It carries the tag boxfs=1 and the provider's own
// tags under "boxfs."; the caller's labels are tags too. Commands run
// through the command router, each as its own process group behind a small
// sh wrapper, with stdout and stderr read as offset-resumed streams and
// stdin written in offset-stamped chunks ending in an explicit EOF: a real
// byte stream, so hands' agent channel runs over one long-lived exec.
// Archives move as tar over exec.
//
// Credentials are a token id and secret (options, MODAL_TOKEN_ID and
// MODAL_TOKEN_SECRET, or a profile of ~/.modal.toml), exchanged for a
// short-lived auth token; they go to the control plane and nowhere else.
package modal

import (
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// Name is the provider's registry name.
const Name = "modal"

const (
	// DefaultApp is the Modal app boxes are made in.
	DefaultApp = "boxfs"
	// DefaultImage is the registry image of a box whose spec names none.
	DefaultImage = "debian:bookworm-slim"
	// DefaultWorkspace is the box-side workspace when the spec names none.
	DefaultWorkspace = "/workspace"
	// MaxLifetime is the longest timeout Modal gives a sandbox.
	MaxLifetime = 24 * time.Hour
	// tmpDir is where boxfs keeps its own files in a box.
	tmpDir = "/tmp"
)

// Tags the provider sets on every sandbox. Callers may not set labels
// under "boxfs" (providers.ReservedLabel).
const (
	tagMarker    = "boxfs" // "1": a boxfs box
	tagProvider  = "boxfs.provider"
	tagCreate    = "boxfs.create" // a nonce of the create that made it
	tagWorkspace = "boxfs.workspace"
	tagLifetime  = "boxfs.lifetime"  // seconds
	tagCreated   = "boxfs.created"   // RFC 3339, UTC
	tagIsolation = "boxfs.isolation" // gvisor or microvm
	tagHardware  = "boxfs.hw"        // what the box measured of itself at create
)

// Modal's names for a sandbox's runtime (Sandbox.runtime): gVisor, and a
// microVM of the sandbox's own. A gVisor box names its runtime too, rather
// than leaving it unset for Modal's default: the default of an unset
// runtime is Modal's to change (its newer sandbox backend), and a box must
// run the isolation its spec and tags say.
const (
	runtimeGVisor = "gvisor"
	runtimeVM     = "vm"
)

// Bounds the provider waits for.
const (
	defaultCreateBound = 5 * time.Minute  // for a new sandbox to be scheduled
	cleanupTimeout     = 30 * time.Second // for a terminate after a failed create
	listPage           = 100              // sandboxes Modal answers per page, at most
)

func init() {
	providers.Register(Name, func(cfg providers.Config) (providers.Provider, error) { return New(cfg) })
}

// Provider makes boxes as sandboxes of one Modal app.
type Provider struct {
	c         *client
	app       string
	image     string
	tunnels   string // "tls" or "tcp"
	log       *slog.Logger
	bound     time.Duration // for a new sandbox to be scheduled
	pollBase  time.Duration // the first pause between task id polls
	deadBound time.Duration // of nothing but failures before a command is lost

	mu        sync.Mutex
	appid     string
	builder   string            // the image builder version
	images    map[string]string // image reference -> id, of this process's builds
	destroyed sync.Map          // ids terminated through this provider
	defs      sync.Map          // sandbox id -> the *pb.Sandbox it was made from (remember)
	stateDir  string            // where definitions are kept for other processes; "" none

	rtMu    sync.Mutex         // held while a router connects, so a sandbox gets one
	routers map[string]*router // sandbox id -> its task's command router
}

var _ providers.Provider = (*Provider)(nil)

// New opens the provider. Options:
//
//	token_id, token_secret  credentials (default: MODAL_TOKEN_ID, MODAL_TOKEN_SECRET, the profile)
//	profile                 the ~/.modal.toml profile (default: MODAL_PROFILE, else the active one)
//	server_url              the control plane (default: MODAL_SERVER_URL, the profile's, https://api.modal.com:443)
//	environment             the Modal environment (default: MODAL_ENVIRONMENT, the profile's)
//	app                     the app boxes are made in (default boxfs)
//	image                   the image of a box whose spec names none (default debian:bookworm-slim)
//	tunnels                 how spec ports are reached: tls (default) or tcp
//
// Missing credentials are Auth. New does not contact Modal.
func New(cfg providers.Config) (*Provider, error) {
	const op = "modal.New"
	if err := providers.CheckOptions(op, cfg.Options, "token_id", "token_secret", "profile", "server_url", "environment", "app", "image", "tunnels"); err != nil {
		return nil, err
	}
	prof, err := resolveProfile(op, cfg.Options)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c, err := dial(op, prof, log)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		c: c, app: first(cfg.Options["app"], DefaultApp), image: first(cfg.Options["image"], DefaultImage),
		tunnels: first(cfg.Options["tunnels"], "tls"), log: log, stateDir: cfg.StateDir,
		bound: defaultCreateBound, pollBase: 50 * time.Millisecond, deadBound: deadBound, images: map[string]string{},
		routers: map[string]*router{},
	}
	if p.tunnels != "tls" && p.tunnels != "tcp" {
		return nil, providers.Errorf(providers.Invalid, op, "option tunnels=%q: want tls or tcp", p.tunnels)
	}
	return p, nil
}

// Name returns "modal".
func (p *Provider) Name() string { return Name }

// Close releases the provider's connections: to the control plane and to
// every command router.
func (p *Provider) Close() error {
	p.rtMu.Lock()
	for id, rt := range p.routers {
		rt.close()
		delete(p.routers, id)
	}
	p.rtMu.Unlock()
	return p.c.close()
}

// supported are the spec fields Create honours; the others are refused.
// A sandbox runs the image's user as root in Modal's file system: mounts of
// the host, a user and dropped capabilities are not offered. A snapshot is
// an image id.
var supported = []string{
	"image", "snapshot", "region", "lifetime", "cpus", "memoryMb", "gpu", "isolation",
	"network", "ports", "env", "labels", "workspace",
}

// plan is a spec checked and turned into Modal's terms.
type plan struct {
	lifetimeSecs uint32
	workspace    string
	isolation    providers.Isolation
	runtime      string
	gpu          *pb.GPUConfig
	network      *pb.NetworkAccess
	ports        []*pb.PortSpec
}

// check refuses what Modal cannot honour and maps the rest.
func (p *Provider) check(op string, spec providers.Spec) (plan, error) {
	if err := spec.Validate(); err != nil {
		return plan{}, providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supported...); err != nil {
		return plan{}, err
	}
	switch {
	case spec.Image != "" && spec.Snapshot != "":
		return plan{}, providers.Errorf(providers.Invalid, op, "a snapshot is an image: give snapshot or image, not both")
	case spec.Snapshot != "" && !strings.HasPrefix(spec.Snapshot, "im-"):
		return plan{}, providers.Errorf(providers.NotFound, op, "snapshot %q is not a Modal image id (im-...)", spec.Snapshot)
	}
	var pl plan
	lifetime := spec.LifetimeOrDefault()
	if lifetime > MaxLifetime {
		return plan{}, providers.Errorf(providers.Unsupported, op, "lifetime %v: a Modal sandbox lives at most %v", lifetime, MaxLifetime)
	}
	pl.lifetimeSecs = uint32(math.Ceil(lifetime.Seconds()))
	if spec.CPUs > 0 && spec.CPUs < 0.001 {
		return plan{}, providers.Errorf(providers.Invalid, op, "cpus %g: Modal reserves whole thousandths of a CPU", spec.CPUs)
	}
	pl.workspace = DefaultWorkspace
	if spec.Workspace != "" {
		pl.workspace = path.Clean(spec.Workspace)
	}
	switch spec.Isolation {
	case "", providers.IsolationGVisor:
		pl.isolation, pl.runtime = providers.IsolationGVisor, runtimeGVisor
	case providers.IsolationMicroVM:
		pl.isolation, pl.runtime = providers.IsolationMicroVM, runtimeVM
	default:
		return plan{}, providers.Errorf(providers.Unsupported, op, "isolation %q: Modal sandboxes are gvisor (the default) or microvm", spec.Isolation)
	}
	if spec.GPU != "" {
		if pl.runtime == runtimeVM {
			return plan{}, providers.Errorf(providers.Invalid, op, "gpu %q with isolation microvm: Modal's VM sandboxes have no GPUs", spec.GPU)
		}
		g, err := gpuConfig(op, spec.GPU)
		if err != nil {
			return plan{}, err
		}
		pl.gpu = g
	}
	n, err := networkAccess(op, spec.Network)
	if err != nil {
		return plan{}, err
	}
	pl.network = n
	for _, port := range spec.Ports {
		pl.ports = append(pl.ports, &pb.PortSpec{Port: uint32(port), Unencrypted: p.tunnels == "tcp"})
	}
	return pl, nil
}

// gpuConfig reads a GPU request: "any" (Modal's smallest, a T4), a model
// ("A100", "h100"), or a model and count ("T4:2").
func gpuConfig(op, s string) (*pb.GPUConfig, error) {
	model, count := s, uint64(1)
	if m, c, ok := strings.Cut(s, ":"); ok {
		n, err := strconv.ParseUint(c, 10, 32)
		if err != nil || n < 1 {
			return nil, providers.Errorf(providers.Invalid, op, "gpu %q: the count after ':' must be a positive number", s)
		}
		model, count = m, n
	}
	if strings.EqualFold(model, "any") {
		model = "T4"
	}
	if model == "" || strings.ContainsAny(model, " \t\n") {
		return nil, providers.Errorf(providers.Invalid, op, "gpu %q is not a GPU model", s)
	}
	return &pb.GPUConfig{GpuType: strings.ToUpper(model), Count: uint32(count)}, nil
}

// networkAccess maps the spec's network: none blocks every connection, open
// (the default) allows them, an allowlist lets out only its domains and
// CIDRs (a bare address is a /32 or /128).
func networkAccess(op string, n providers.Network) (*pb.NetworkAccess, error) {
	switch n.Mode {
	case providers.NetworkNone:
		return &pb.NetworkAccess{NetworkAccessType: pb.NetworkAccess_BLOCKED}, nil
	case "", providers.NetworkOpen:
		return &pb.NetworkAccess{NetworkAccessType: pb.NetworkAccess_OPEN}, nil
	}
	na := &pb.NetworkAccess{NetworkAccessType: pb.NetworkAccess_ALLOWLIST}
	for _, a := range n.Allow {
		if pfx, err := netip.ParsePrefix(a); err == nil {
			na.AllowedCidrs = append(na.AllowedCidrs, pfx.Masked().String())
			continue
		}
		if ip, err := netip.ParseAddr(a); err == nil {
			na.AllowedCidrs = append(na.AllowedCidrs, netip.PrefixFrom(ip, ip.BitLen()).String())
			continue
		}
		if !validDomain(a) {
			return nil, providers.Errorf(providers.Invalid, op, "network allow %q is neither a CIDR, an address nor a domain", a)
		}
		na.AllowedDomains = append(na.AllowedDomains, strings.ToLower(a))
	}
	return na, nil
}

func validDomain(d string) bool {
	d = strings.TrimPrefix(d, "*.")
	if d == "" || len(d) > 253 {
		return false
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// tags returns the sandbox's tags for spec: the caller's labels and the
// provider's own.
func (p *Provider) tags(spec providers.Spec, pl plan, nonce string) map[string]string {
	t := maps.Clone(spec.Labels)
	if t == nil {
		t = map[string]string{}
	}
	t[tagMarker] = "1"
	t[tagProvider] = Name
	t[tagCreate] = nonce
	t[tagWorkspace] = pl.workspace
	t[tagLifetime] = strconv.FormatUint(uint64(pl.lifetimeSecs), 10)
	t[tagCreated] = time.Now().UTC().Format(time.RFC3339Nano)
	t[tagIsolation] = string(pl.isolation)
	return t
}

func tagList(m map[string]string) []*pb.SandboxTag {
	out := make([]*pb.SandboxTag, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, &pb.SandboxTag{TagName: k, TagValue: m[k]})
	}
	return out
}

func tagMap(ts []*pb.SandboxTag) map[string]string {
	m := make(map[string]string, len(ts))
	for _, t := range ts {
		m[t.GetTagName()] = t.GetTagValue()
	}
	return m
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
