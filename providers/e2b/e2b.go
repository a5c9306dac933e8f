// Package e2b runs boxes as E2B sandboxes (Firecracker microVMs), through
// E2B's REST control plane and envd, the daemon in every sandbox, spoken
// to over Connect.
//
// A box is a sandbox made from a template (the spec's image; the template
// fixes CPUs, memory and disk), labelled boxfs=1 plus the provider's own
// labels under "boxfs." as E2B metadata, with the spec's lifetime (an hour
// when it sets none) as its timeout: E2B kills it then, whatever happens to
// the host. Commands run through envd's process service, each as its own
// process group (a fixed wrapper puts it in a session of its own), with
// output streamed on the Start call and stdin sent with SendInput; so one
// long-lived process can carry the agent channel. Whole-file reads go
// through envd's /files endpoint; Watch reports changes under a directory
// from envd's WatchDir.
//
// The API key comes from the "api_key" option or E2B_API_KEY. It is sent
// in the X-API-KEY header to the control plane and nowhere else; envd is
// reached with the sandbox's own access token.
package e2b

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Name is the provider's registry name.
const Name = "e2b"

const (
	// DefaultDomain is E2B's domain when neither the "domain" option nor
	// E2B_DOMAIN names one.
	DefaultDomain = "e2b.app"
	// DefaultTemplate is the template of a box whose spec names no image.
	DefaultTemplate = "base"
	// DefaultUser is the sandbox user commands and file calls run as.
	DefaultUser = "user"
	// DefaultLifetime is the lifetime of a box whose spec sets none: an
	// hour, the longest timeout E2B's Hobby tier grants, so a spec without
	// a lifetime works on every tier (providers.DefaultLifetime, 2 h, is
	// refused there with a 400).
	DefaultLifetime = time.Hour
	// DefaultMaxLifetime is the longest sandbox timeout E2B grants (its Pro
	// tier's; the Hobby tier's is an hour).
	DefaultMaxLifetime = 24 * time.Hour
	// envdPort is envd's port in every sandbox.
	envdPort  = 49983
	userAgent = "boxfs-e2b"
)

// Labels the provider sets on every sandbox, as E2B metadata. Callers may
// not set labels under "boxfs" (providers.ReservedLabel).
const (
	labelMarker    = "boxfs" // "1": a boxfs box; listings ask for it
	labelProvider  = "boxfs.provider"
	labelCreate    = "boxfs.create" // a nonce of the create that made it
	labelWorkspace = "boxfs.workspace"
	labelNetwork   = "boxfs.network"
)

// supportedDomains are E2B's own domains, where envd is reached through
// one host (sandbox.DOMAIN) and the E2b-Sandbox-Id header, as the SDK does.
var supportedDomains = []string{"e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev"}

func init() {
	providers.Register(Name, func(cfg providers.Config) (providers.Provider, error) { return New(cfg) })
}

// Provider makes boxes as sandboxes of one E2B team.
type Provider struct {
	api         *apiClient
	hc          *http.Client // for envd
	domain      string
	sandboxURL  *url.URL // every sandbox's envd, when set
	template    string
	user        string
	maxLifetime time.Duration
	log         *slog.Logger
	now         func() time.Time // the clock a resume reads a lifetime's end by

	keepalive time.Duration // envd's keepalive interval on streams
}

var _ providers.Provider = (*Provider)(nil)

// New opens the provider. Options (each defaulting to the SDK's
// environment variable where it has one):
//
//	api_key       the API key (E2B_API_KEY)
//	domain        E2B's domain (E2B_DOMAIN, default e2b.app)
//	api_url       the control plane (E2B_API_URL, default https://api.DOMAIN)
//	sandbox_url   one envd URL for every sandbox (E2B_SANDBOX_URL), as for a
//	              proxy or a fake; default per sandbox, from the domain
//	template      the template of a box whose spec names no image (base)
//	user          the sandbox user commands run as (user; or root)
//	max_lifetime  the longest lifetime granted (24h; 1h on E2B's Hobby tier)
//
// A missing key is Auth. New does not contact E2B.
func New(cfg providers.Config) (*Provider, error) {
	const op = "e2b.New"
	if err := providers.CheckOptions(op, cfg.Options, "api_key", "domain", "api_url", "sandbox_url", "template", "user", "max_lifetime"); err != nil {
		return nil, err
	}
	opt := func(k, env string) string {
		if v := cfg.Options[k]; v != "" {
			return v
		}
		if env != "" {
			return os.Getenv(env)
		}
		return ""
	}
	key := opt("api_key", "E2B_API_KEY")
	if key == "" {
		return nil, providers.Errorf(providers.Auth, op, "no API key: set the api_key option or E2B_API_KEY")
	}
	p := &Provider{
		domain: opt("domain", "E2B_DOMAIN"), template: opt("template", ""), user: opt("user", ""),
		maxLifetime: DefaultMaxLifetime, log: cfg.Logger, keepalive: 50 * time.Second, now: time.Now,
	}
	if p.domain == "" {
		p.domain = DefaultDomain
	}
	if p.template == "" {
		p.template = DefaultTemplate
	}
	if p.user == "" {
		p.user = DefaultUser
	}
	if p.user != "user" && p.user != "root" {
		return nil, providers.Errorf(providers.Invalid, op, "option user=%q: E2B sandboxes have the users user and root", p.user)
	}
	if v := cfg.Options["max_lifetime"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, providers.Errorf(providers.Invalid, op, "option max_lifetime=%q is not a positive duration", v)
		}
		p.maxLifetime = d
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	apiURL := opt("api_url", "E2B_API_URL")
	if apiURL == "" {
		apiURL = "https://api." + p.domain
	}
	base, err := parseURL(op, "api_url", apiURL)
	if err != nil {
		return nil, err
	}
	if v := opt("sandbox_url", "E2B_SANDBOX_URL"); v != "" {
		if p.sandboxURL, err = parseURL(op, "sandbox_url", v); err != nil {
			return nil, err
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	p.hc = &http.Client{Transport: tr}
	p.api = &apiClient{hc: &http.Client{Transport: tr}, base: base, key: key}
	return p, nil
}

// parseURL checks an http(s) URL option; plain http only to this machine,
// where nothing secret crosses a network.
func parseURL(op, name, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" {
		return nil, providers.Errorf(providers.Invalid, op, "option %s=%q is not an http(s) URL", name, raw)
	}
	if u.Scheme == "http" {
		ip := net.ParseIP(u.Hostname())
		if u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, providers.Errorf(providers.Invalid, op, "option %s=%q: keys would travel unencrypted; use https", name, raw)
		}
	}
	return u, nil
}

// Name returns "e2b".
func (p *Provider) Name() string { return Name }

// supported are the spec fields Create honours; the others are refused.
var supported = []string{"image", "snapshot", "lifetime", "cpus", "memoryMb", "isolation", "network", "env", "labels", "workspace"}

// Create makes a sandbox from the spec's template and returns once it
// runs. The template fixes CPUs and memory: a spec asking for other values
// is Unsupported (found once E2B has answered, and the sandbox killed).
// A snapshot (Snapshot's id) is the template a box is made from.
// Isolation other than microvm, region, gpu, ports, mounts, user and
// capabilities are Unsupported, as is a lifetime over max_lifetime. A
// spec without a lifetime gets DefaultLifetime, which every E2B tier
// grants.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "e2b.Create"
	if err := spec.Validate(); err != nil {
		return nil, providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supported...); err != nil {
		return nil, err
	}
	if spec.Isolation != "" && spec.Isolation != providers.IsolationMicroVM {
		return nil, providers.Errorf(providers.Unsupported, op, "isolation %q: E2B sandboxes are microVMs", spec.Isolation)
	}
	lifetime := spec.Lifetime
	if lifetime == 0 {
		lifetime = min(DefaultLifetime, p.maxLifetime)
	}
	if lifetime > p.maxLifetime {
		return nil, providers.Errorf(providers.Unsupported, op, "lifetime %v is over the %v E2B grants (option max_lifetime)", lifetime, p.maxLifetime)
	}
	if spec.Image != "" && spec.Snapshot != "" {
		return nil, providers.Errorf(providers.Invalid, op, "a snapshot is a template: give snapshot or image, not both")
	}
	body := newSandbox{
		TemplateID: spec.Image + spec.Snapshot,
		Timeout:    int32(math.Ceil(lifetime.Seconds())),
		EnvVars:    spec.Env,
	}
	if body.TemplateID == "" {
		body.TemplateID = p.template
	}
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelMarker] = "1"
	labels[labelProvider] = Name
	labels[labelCreate] = providers.NewID(8)
	ws := ""
	if spec.Workspace != "" {
		ws = path.Clean(spec.Workspace)
		labels[labelWorkspace] = ws
	}
	switch spec.Network.Mode {
	case providers.NetworkOpen:
		body.AllowInternetAccess = providers.Bool(true)
	case providers.NetworkNone:
		body.AllowInternetAccess = providers.Bool(false)
	case providers.NetworkAllowlist:
		body.Network = &networkConfig{AllowOut: spec.Network.Allow, DenyOut: []string{"0.0.0.0/0"}}
	}
	if spec.Network.Mode != "" {
		labels[labelNetwork] = string(spec.Network.Mode)
	}
	body.Metadata = labels

	sb, err := p.create(ctx, body, labels[labelCreate])
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status >= 500 {
			// The create may have been acted on although its answer was
			// lost: leave no sandbox behind.
			p.cleanupCreate(ctx, labels[labelCreate])
		}
		return nil, wrap(op, "", err)
	}
	b := p.newBox(sb, labels)
	if err := p.settle(ctx, b, spec, ws); err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if kerr := p.api.kill(kctx, b.id); kerr != nil {
			p.log.Warn("e2b: killing a sandbox whose create failed", "box", b.id, "err", kerr)
		}
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	return b, nil
}

// maxCreates bounds how many times a Create asks E2B for a sandbox when
// the answers are lost.
const maxCreates = 3

// create asks E2B for the sandbox body describes, labelled with the create
// nonce. A create is not safe to repeat, so after a failure that E2B may
// have carried out (ambiguous: a gateway's 502 or 504, a connection lost
// once the request was sent) it looks the sandbox up by its nonce and
// takes the one found; only when there is none does it ask again. If a
// sandbox made by an earlier ask shows up beside the one taken, it is
// killed.
func (p *Provider) create(ctx context.Context, body newSandbox, nonce string) (sandbox, error) {
	mine := map[string]string{labelMarker: "1", labelCreate: nonce}
	var (
		sb     sandbox
		err    error
		unsure bool // an earlier ask may have made a sandbox
	)
	for n := 0; n < maxCreates; n++ {
		if n > 0 {
			if berr := backoff(ctx, n-1, err); berr != nil {
				return sandbox{}, err
			}
		}
		sb, err = p.api.create(ctx, body)
		if err == nil || !ambiguous(err) || ctx.Err() != nil {
			break
		}
		unsure = true
		found, lerr := p.api.list(ctx, mine)
		if lerr != nil {
			// Whether E2B made it cannot be told: asking again could make
			// a second one.
			return sandbox{}, err
		}
		if len(found) > 0 {
			sb, err = found[0], nil
			p.log.Info("e2b: a create's answer was lost; found the sandbox it made", "box", sb.SandboxID)
			break
		}
	}
	if err != nil || !unsure {
		return sb, err
	}
	if found, lerr := p.api.list(ctx, mine); lerr == nil {
		for _, other := range found {
			if other.SandboxID == sb.SandboxID {
				continue
			}
			if kerr := p.api.kill(ctx, other.SandboxID); kerr != nil {
				p.log.Warn("e2b: killing a second sandbox of one create", "box", other.SandboxID, "err", kerr)
			}
		}
	}
	return sb, nil
}

// settle checks what only the running sandbox tells (its template's size)
// and makes the workspace.
func (p *Provider) settle(ctx context.Context, b *Box, spec providers.Spec, ws string) error {
	const op = "e2b.Create"
	if spec.CPUs != 0 || spec.MemoryMB != 0 {
		d, err := p.api.get(ctx, b.id)
		if err != nil {
			return wrap(op, b.id, err)
		}
		if spec.CPUs != 0 && spec.CPUs != float64(d.CPUCount) || spec.MemoryMB != 0 && spec.MemoryMB != d.MemoryMB {
			return providers.Errorf(providers.Unsupported, op, "template %s has %d CPUs and %d MB; a sandbox cannot have other sizes (the spec asks %v CPUs, %d MB)",
				d.TemplateID, d.CPUCount, d.MemoryMB, spec.CPUs, spec.MemoryMB)
		}
	}
	if ws != "" {
		if err := b.envd.makeDir(ctx, ws); err != nil && !providers.IsCode(err, providers.Exists) {
			return err
		}
	}
	return nil
}

// cleanupCreate kills what a create whose answer was lost may have made.
func (p *Provider) cleanupCreate(ctx context.Context, nonce string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sbs, err := p.api.list(ctx, map[string]string{labelMarker: "1", labelCreate: nonce})
	if err != nil {
		return
	}
	for _, sb := range sbs {
		if err := p.api.kill(ctx, sb.SandboxID); err != nil {
			p.log.Warn("e2b: killing a sandbox of a failed create", "box", sb.SandboxID, "err", err)
		}
	}
}

// Attach finds a running sandbox by id. One that has ended, or that boxfs
// did not make, is NotFound.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "e2b.Attach"
	if id == "" || strings.ContainsAny(id, "/?#") {
		return nil, providers.Errorf(providers.Invalid, op, "box id %q is not a sandbox id", id)
	}
	sb, err := p.api.get(ctx, id)
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if sb.Metadata[labelMarker] != "1" {
		return nil, providers.Errorf(providers.NotFound, op, "sandbox %s is not a boxfs box", id).WithBox(id)
	}
	return p.newBox(sb, sb.Metadata), nil
}

// List returns the running and the paused sandboxes carrying every label
// in labels. Paused ones are listed so that a sweep finds them: E2B runs
// no timeout while a sandbox is paused, so one nobody resumes stays until
// it is killed. A listed sandbox's envd token is read when the box is
// first used.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "e2b.List"
	want := maps.Clone(labels)
	if want == nil {
		want = map[string]string{}
	}
	want[labelMarker] = "1"
	sbs, err := p.api.list(ctx, want)
	if err != nil {
		return nil, wrap(op, "", err)
	}
	out := make([]providers.Box, 0, len(sbs))
	for _, sb := range sbs {
		if providers.MatchLabels(sb.Metadata, want) {
			out = append(out, p.newBox(sb, sb.Metadata))
		}
	}
	return out, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
