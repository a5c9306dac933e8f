// Package daytona runs boxes as Daytona sandboxes, through Daytona's REST
// API: the control plane for the sandboxes' lives and the per-sandbox
// toolbox for commands and files.
//
// A box is a sandbox made from a snapshot (which sets its size), labelled
// boxfs=1 plus the provider's own labels under "boxfs.", with Daytona's
// ttlMinutes as its lifetime, an idle auto-stop and an auto-delete of 0,
// so a box that stops is deleted. Commands run through a toolbox session,
// each as its own process group, with their stdout and stderr streamed over
// the session's log WebSocket; stdin is uploaded as a file first. Files
// move through the toolbox's file API where it answers exactly, and through
// one fixed script over process/execute where it does not (see Box).
//
// The API key comes from the "api_key" option or DAYTONA_API_KEY in the
// host's environment. It is sent in the Authorization header of requests
// to the control plane and to its toolbox proxy, and nowhere else: never
// into a box, an argv, a log line or an error.
package daytona

import (
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Name is the provider's registry name.
const Name = "daytona"

const (
	// DefaultAPIURL is Daytona's control plane.
	DefaultAPIURL = "https://app.daytona.io/api"
	// DefaultWorkspace is the box-side workspace when the spec names none.
	DefaultWorkspace = "/tmp/workspace"
	// tmpDir is where boxfs keeps its own files in a box.
	tmpDir = "/tmp"
	// autoStopMinutes is the idle time after which Daytona stops (and,
	// with autoDeleteInterval 0, deletes) a box: Daytona's own default.
	// Every call boxfs makes, and a running command, counts as activity.
	autoStopMinutes = 15
)

// Labels the provider sets on every sandbox. Callers may not set labels
// under "boxfs" (providers.ReservedLabel).
const (
	labelMarker    = "boxfs" // "1": a boxfs box; listings ask for this label alone
	labelProvider  = "boxfs.provider"
	labelCreate    = "boxfs.create" // a nonce of the create that made it
	labelWorkspace = "boxfs.workspace"
	labelLifetime  = "boxfs.lifetime" // seconds
)

// Bounds the provider waits for.
const (
	defaultCreateBound = 3 * time.Minute  // for a new sandbox to start
	defaultListBound   = time.Minute      // for a new sandbox to be listed
	defaultLiveness    = 30 * time.Second // for a sign of life from a call or a stream
	removeTimeout      = 30 * time.Second // for a cleanup delete
)

func init() {
	providers.Register(Name, func(cfg providers.Config) (providers.Provider, error) { return New(cfg) })
}

// Provider makes boxes as sandboxes of one Daytona organization.
type Provider struct {
	c        *client
	target   string
	snapshot string
	log      *slog.Logger

	createBound time.Duration
	listBound   time.Duration
	liveness    time.Duration

	destroyed sync.Map // ids destroyed through this provider, left out of listings that still show them
}

var _ providers.Provider = (*Provider)(nil)

// New opens the provider. Options:
//
//	api_url   the control plane (default https://app.daytona.io/api)
//	api_key   the API key (default: DAYTONA_API_KEY from the environment)
//	target    the region boxes are made in (default: the organization's)
//	snapshot  the snapshot a box is made from when the spec names none
//
// A missing key is Auth. New does not contact Daytona.
func New(cfg providers.Config) (*Provider, error) {
	const op = "daytona.New"
	if err := providers.CheckOptions(op, cfg.Options, "api_url", "api_key", "target", "snapshot"); err != nil {
		return nil, err
	}
	key := cfg.Options["api_key"]
	if key == "" {
		key = os.Getenv("DAYTONA_API_KEY")
	}
	if key == "" {
		return nil, providers.Errorf(providers.Auth, op, "no API key: set the api_key option or DAYTONA_API_KEY")
	}
	raw := cfg.Options["api_url"]
	if raw == "" {
		raw = DefaultAPIURL
	}
	api, err := url.Parse(raw)
	if err != nil || api.Host == "" || api.Scheme != "https" && api.Scheme != "http" {
		return nil, providers.Errorf(providers.Invalid, op, "option api_url=%q is not an http(s) URL", raw)
	}
	if api.Scheme == "http" && !loopback(api.Host) {
		return nil, providers.Errorf(providers.Invalid, op, "option api_url=%q: the key would travel unencrypted; use https", raw)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	p := &Provider{
		c:           &client{hc: &http.Client{Transport: tr}, api: api, key: key, log: log},
		target:      cfg.Options["target"],
		snapshot:    cfg.Options["snapshot"],
		log:         log,
		createBound: defaultCreateBound,
		listBound:   defaultListBound,
		liveness:    defaultLiveness,
	}
	return p, nil
}

func loopback(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport
	}
	ip := net.ParseIP(h)
	return h == "localhost" || ip != nil && ip.IsLoopback()
}

// Name returns "daytona".
func (p *Provider) Name() string { return Name }

// supported are the spec fields Create honours; the others are refused.
// The snapshot sets a sandbox's size, so cpus, memoryMb and gpu are
// refused; images, ports, mounts, users, capabilities and isolation
// choices are not offered through this provider.
var supported = []string{"snapshot", "region", "lifetime", "network", "env", "labels", "workspace"}

// networkRequest sets the create's network fields for n.
func networkRequest(op string, n providers.Network, req *createRequest) error {
	switch n.Mode {
	case "":
	case providers.NetworkOpen:
		f := false
		req.NetworkBlockAll = &f
	case providers.NetworkNone:
		t := true
		req.NetworkBlockAll = &t
	case providers.NetworkAllowlist:
		for _, a := range n.Allow {
			if _, _, err := net.ParseCIDR(a); err == nil || net.ParseIP(a) != nil {
				return providers.Errorf(providers.Unsupported, op, "network allow %q: only domains are taken (Daytona's domain allowlist), not addresses or CIDRs", a)
			}
			if a == "" || strings.ContainsAny(a, ", \t\n/:") {
				return providers.Errorf(providers.Invalid, op, "network allow %q is not a domain", a)
			}
		}
		s := strings.Join(n.Allow, ",")
		req.DomainAllowList = &s
	}
	return nil
}

// checkNetwork checks that the sandbox, as Daytona reads it back, has the
// network the spec asked for; Unsupported when it does not.
func checkNetwork(op string, n providers.Network, dto sandboxDTO) error {
	got := networkOf(dto)
	switch n.Mode {
	case providers.NetworkNone:
		if got != providers.NetworkNone {
			return providers.Errorf(providers.Unsupported, op, "network none: Daytona did not apply networkBlockAll to sandbox %s (it reads back %q)", dto.ID, got).WithBox(dto.ID)
		}
	case providers.NetworkAllowlist:
		if got != providers.NetworkAllowlist || dto.DomainAllowList != strings.Join(n.Allow, ",") {
			return providers.Errorf(providers.Unsupported, op, "network allowlist: Daytona did not apply the domain allowlist to sandbox %s (it reads back %q)", dto.ID, dto.DomainAllowList).WithBox(dto.ID)
		}
	case providers.NetworkOpen:
		if got != providers.NetworkOpen {
			return providers.Errorf(providers.Unsupported, op, "network open: sandbox %s reads back %q", dto.ID, got).WithBox(dto.ID)
		}
	}
	return nil
}

// networkOf is a sandbox's network as Daytona reads it back.
func networkOf(dto sandboxDTO) providers.NetworkMode {
	switch {
	case dto.NetworkBlockAll:
		return providers.NetworkNone
	case dto.DomainAllowList != "" || dto.NetworkAllowList != "":
		return providers.NetworkAllowlist
	}
	return providers.NetworkOpen
}

// errorWithHint adds a sentence to an error and keeps it as the cause.
type errorWithHint struct {
	err  error
	hint string
}

func (e errorWithHint) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e errorWithHint) Unwrap() error { return e.err }
