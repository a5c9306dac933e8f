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
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
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

// Create makes a sandbox for spec and returns once it is started and a
// listing shows it. The lifetime must be whole minutes (Daytona's
// ttlMinutes). Network none and a domain allowlist are honoured only when
// the sandbox's own read says Daytona applied them; otherwise the sandbox
// is deleted and the create refused with Unsupported, as is an allowlist
// entry that is an address or CIDR. A sandbox that fails (error,
// build_failed) or does not start within the bound is deleted.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "daytona.Create"
	if err := spec.Validate(); err != nil {
		return nil, providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supported...); err != nil {
		return nil, err
	}
	lifetime := spec.LifetimeOrDefault()
	if lifetime%time.Minute != 0 {
		return nil, providers.Errorf(providers.Unsupported, op, "lifetime %v: Daytona's ttl is whole minutes", lifetime)
	}
	ws := DefaultWorkspace
	if spec.Workspace != "" {
		ws = path.Clean(spec.Workspace)
	}
	nonce := randomHex(8)
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelMarker] = "1"
	labels[labelProvider] = Name
	labels[labelCreate] = nonce
	labels[labelWorkspace] = ws
	labels[labelLifetime] = strconv.FormatInt(int64(lifetime/time.Second), 10)
	req := createRequest{
		Name:               "boxfs-" + randomHex(6),
		Snapshot:           p.snapshot,
		Target:             p.target,
		Env:                spec.Env,
		Labels:             labels,
		AutoStopInterval:   autoStopMinutes,
		AutoDeleteInterval: 0,
		TTLMinutes:         int(lifetime / time.Minute),
	}
	if spec.Snapshot != "" {
		req.Snapshot = spec.Snapshot
	}
	if spec.Region != "" {
		req.Target = spec.Region
	}
	if err := networkRequest(op, spec.Network, &req); err != nil {
		return nil, err
	}

	dto, err := p.create(ctx, op, req)
	if err != nil {
		p.removeByName(ctx, req.Name)
		return nil, err
	}
	b, err := p.newBox(dto)
	if err != nil {
		p.remove(ctx, dto.ID, op, err)
		return nil, wrap(op, dto.ID, err)
	}
	fail := func(err error) (providers.Box, error) {
		return nil, p.remove(ctx, dto.ID, op, err)
	}
	if dto, err = p.waitStarted(ctx, op, dto); err != nil {
		return fail(err)
	}
	if err := checkNetwork(op, spec.Network, dto); err != nil {
		return fail(err)
	}
	if err := b.mkdirAll(ctx, ws); err != nil {
		return fail(wrap(op, b.id, err).WithPath(ws))
	}
	if err := p.waitListed(ctx, op, dto); err != nil {
		return fail(err)
	}
	b.setDTO(dto)
	return b, nil
}

// create sends the create. It is retried (the name makes it idempotent): a
// 409 on the name is this create's own sandbox when its labels carry the
// create's nonce, and then it is adopted.
func (p *Provider) create(ctx context.Context, op string, req createRequest) (sandboxDTO, error) {
	body, err := jsonBody(req)
	if err != nil {
		return sandboxDTO{}, providers.E(providers.Invalid, op, err)
	}
	var dto sandboxDTO
	err = p.c.json(ctx, request{method: http.MethodPost, url: p.c.apiURL("/sandbox"), body: body, contentType: "application/json", idempotent: true}, &dto)
	if err == nil {
		if dto.ID == "" {
			return dto, providers.Errorf(providers.Unknown, op, "the create answered without a sandbox id")
		}
		return dto, nil
	}
	if statusOf(err) != http.StatusConflict {
		return dto, wrap(op, "", err)
	}
	got, gerr := p.get(ctx, req.Name)
	if gerr == nil && got.Labels[labelCreate] == req.Labels[labelCreate] {
		p.log.Debug("daytona: adopted the sandbox of a create retried after a lost answer", "box", got.ID)
		return got, nil
	}
	return dto, wrap(op, "", err)
}

// get reads one sandbox by id or name.
func (p *Provider) get(ctx context.Context, idOrName string) (sandboxDTO, error) {
	var dto sandboxDTO
	err := p.c.json(ctx, request{method: http.MethodGet, url: p.c.apiURL("/sandbox/" + url.PathEscape(idOrName)), idempotent: true}, &dto)
	return dto, err
}

// waitStarted polls a sandbox until it is started, within createBound. A
// sandbox that failed, went away or stays too long is an error.
func (p *Provider) waitStarted(ctx context.Context, op string, dto sandboxDTO) (sandboxDTO, error) {
	deadline := time.Now().Add(p.createBound)
	d := 100 * time.Millisecond
	for {
		switch {
		case dto.State == stateStarted:
			return dto, nil
		case failed(dto.State):
			reason := dto.ErrorReason
			if reason == "" {
				reason = "no reason given"
			}
			return dto, providers.Errorf(providers.Refused, op, "sandbox %s went to state %s: %s", dto.ID, dto.State, reason).WithBox(dto.ID)
		case gone(dto.State):
			return dto, providers.Errorf(providers.Gone, op, "sandbox %s is %s", dto.ID, dto.State).WithBox(dto.ID)
		case time.Now().After(deadline):
			return dto, providers.Errorf(providers.Timeout, op, "sandbox %s still %s after %v", dto.ID, dto.State, p.createBound).WithBox(dto.ID)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return dto, wrap(op, dto.ID, ctx.Err())
		case <-t.C:
		}
		d = min(d*3/2, time.Second)
		got, err := p.get(ctx, dto.ID)
		if err != nil {
			if statusOf(err) == http.StatusNotFound {
				return dto, providers.Errorf(providers.Gone, op, "sandbox %s disappeared while %s", dto.ID, dto.State).WithBox(dto.ID)
			}
			return dto, wrap(op, dto.ID, err)
		}
		dto = got
	}
}

// waitListed polls listings until one shows the sandbox: listings are
// eventually consistent, and a box that List does not show is not made
// yet as far as the caller can tell.
func (p *Provider) waitListed(ctx context.Context, op string, dto sandboxDTO) error {
	deadline := time.Now().Add(p.listBound)
	d := 100 * time.Millisecond
	for {
		items, err := p.list(ctx, op, dto.Name)
		if err != nil {
			return err
		}
		for _, it := range items {
			if it.ID == dto.ID {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return providers.Errorf(providers.Unavailable, op, "sandbox %s was not listed within %v", dto.ID, p.listBound).WithBox(dto.ID)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return wrap(op, dto.ID, ctx.Err())
		case <-t.C:
		}
		d = min(d*3/2, 2*time.Second)
	}
}

// remove deletes a sandbox whose create failed with cause, even when ctx
// has ended, and returns cause (saying so when the delete failed too).
func (p *Provider) remove(ctx context.Context, id, op string, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	err := p.delete(rctx, id)
	if err == nil {
		return cause
	}
	p.log.Warn("daytona: deleting a sandbox whose create failed", "box", id, "err", err)
	e := wrap(op, id, cause)
	e.Err = errorWithHint{e.Err, "and deleting the sandbox failed: " + err.Error()}
	return e
}

// removeByName deletes a sandbox a create may have made before its answer
// was lost.
func (p *Provider) removeByName(ctx context.Context, name string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if err := p.delete(rctx, name); err != nil {
		p.log.Warn("daytona: deleting what a failed create may have made", "name", name, "err", err)
	}
}

// delete deletes a sandbox; one that is already gone is not an error.
func (p *Provider) delete(ctx context.Context, idOrName string) error {
	err := p.c.json(ctx, request{method: http.MethodDelete, url: p.c.apiURL("/sandbox/" + url.PathEscape(idOrName)), idempotent: true}, nil)
	if err != nil && statusOf(err) != http.StatusNotFound {
		return err
	}
	return nil
}

// Attach finds a box by sandbox id. A sandbox that is gone, deleted, or
// not made by boxfs is NotFound; a stopped one is started.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "daytona.Attach"
	if id == "" {
		return nil, providers.Errorf(providers.Invalid, op, "empty box id")
	}
	dto, err := p.get(ctx, id)
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if dto.Labels[labelMarker] != "1" || gone(dto.State) {
		return nil, providers.Errorf(providers.NotFound, op, "sandbox %s is not a boxfs box (or is being deleted)", id).WithBox(id)
	}
	b, err := p.newBox(dto)
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if dto, err = p.wake(ctx, op, dto); err != nil {
		if providers.IsCode(err, providers.Gone) {
			return nil, providers.E(providers.NotFound, op, err).WithBox(id)
		}
		return nil, err
	}
	b.setDTO(dto)
	return b, nil
}

// wake brings a sandbox that is stopped, or on its way somewhere, to
// started, within createBound: a stopping one is waited for and then
// started. A failed one is returned as it is (its box reads as ended).
func (p *Provider) wake(ctx context.Context, op string, dto sandboxDTO) (sandboxDTO, error) {
	deadline := time.Now().Add(p.createBound)
	for {
		switch dto.State {
		case stateStarted, stateError, stateBuildFail:
			return dto, nil
		case stateStopped, stateArchived:
			if err := p.c.json(ctx, request{method: http.MethodPost, url: p.c.apiURL("/sandbox/" + url.PathEscape(dto.ID) + "/start"), idempotent: true}, nil); err != nil {
				return dto, wrap(op, dto.ID, err)
			}
			return p.waitStarted(ctx, op, sandboxDTO{ID: dto.ID, Name: dto.Name, State: stateStarting})
		case stateCreating, stateStarting, "restoring", "pending_build", "building_snapshot", "pulling_snapshot", "resuming":
			return p.waitStarted(ctx, op, dto)
		}
		if gone(dto.State) {
			return dto, providers.Errorf(providers.Gone, op, "sandbox %s is %s", dto.ID, dto.State).WithBox(dto.ID)
		}
		if time.Now().After(deadline) {
			return dto, providers.Errorf(providers.Timeout, op, "sandbox %s still %s after %v", dto.ID, dto.State, p.createBound).WithBox(dto.ID)
		}
		t := time.NewTimer(500 * time.Millisecond) // stopping, archiving, ...: wait for it to settle
		select {
		case <-ctx.Done():
			t.Stop()
			return dto, wrap(op, dto.ID, ctx.Err())
		case <-t.C:
		}
		got, err := p.get(ctx, dto.ID)
		if err != nil {
			if statusOf(err) == http.StatusNotFound {
				return dto, providers.Errorf(providers.Gone, op, "sandbox %s disappeared while %s", dto.ID, dto.State).WithBox(dto.ID)
			}
			return dto, wrap(op, dto.ID, err)
		}
		dto = got
	}
}

// List returns the boxes carrying every label in labels. It asks Daytona
// for boxfs's marker label alone and filters the others itself, paging
// through the listing.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "daytona.List"
	items, err := p.list(ctx, op, "")
	if err != nil {
		return nil, err
	}
	var out []providers.Box
	for _, it := range items {
		if !providers.MatchLabels(it.Labels, labels) || gone(it.State) {
			continue
		}
		if _, dead := p.destroyed.Load(it.ID); dead {
			continue
		}
		b, err := p.newBox(it)
		if err != nil {
			p.log.Warn("daytona: leaving a listed sandbox out", "box", it.ID, "err", err)
			continue
		}
		out = append(out, b)
	}
	return out, nil
}

// maxPages bounds a listing, against a server whose cursor never ends.
const maxPages = 10000

// list reads every page of the boxfs sandboxes (whose name starts with
// name, when it is set), in whichever shape the API answers.
func (p *Provider) list(ctx context.Context, op, name string) ([]sandboxDTO, error) {
	marker, _ := json.Marshal(map[string]string{labelMarker: "1"})
	var out []sandboxDTO
	seen := map[string]bool{}
	cursor, page := "", 0
	for range maxPages {
		q := url.Values{"labels": {string(marker)}, "limit": {"100"}}
		if name != "" {
			q.Set("name", name)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if page > 0 {
			q.Set("page", strconv.Itoa(page))
		}
		resp, err := p.c.do(ctx, request{method: http.MethodGet, url: p.c.apiURL("/sandbox"), query: q, idempotent: true})
		if err != nil {
			return nil, wrap(op, "", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, providers.E(providers.TransportLost, op, err)
		}
		pg, err := parseListPage(b)
		if err != nil {
			return nil, providers.Errorf(providers.Unknown, op, "a listing page is not in any shape known: %v", err)
		}
		out = append(out, pg.items...)
		switch {
		case pg.nextCursor != "":
			if seen[pg.nextCursor] {
				return nil, providers.Errorf(providers.Unknown, op, "the listing's cursor repeats")
			}
			seen[pg.nextCursor] = true
			cursor = pg.nextCursor
		case pg.totalPages > 0 && pg.page > 0 && pg.page < pg.totalPages:
			page = pg.page + 1
		default:
			return dedup(out), nil
		}
	}
	return nil, providers.Errorf(providers.TooLarge, op, "the listing goes on past %d pages", maxPages)
}

// dedup drops repeated ids (a row can move between pages as others come
// and go).
func dedup(items []sandboxDTO) []sandboxDTO {
	seen := map[string]bool{}
	out := items[:0]
	for _, it := range items {
		if !seen[it.ID] {
			seen[it.ID] = true
			out = append(out, it)
		}
	}
	return out
}

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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = io.ReadFull(rand.Reader, b)
	return hex.EncodeToString(b)
}
