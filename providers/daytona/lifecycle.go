package daytona

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Create makes a sandbox for spec and returns once it is started and a
// listing shows it. The lifetime must be whole minutes (Daytona's
// ttlMinutes). Network none and a domain allowlist are honoured only when
// the sandbox's own read says Daytona applied them; otherwise the sandbox
// is deleted and the create refused with Unsupported, as is an allowlist
// entry that is an address or CIDR. A sandbox that fails (error,
// build_failed), before the create answers or after, or that does not
// start within the bound is deleted, and the create fails naming its
// state.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "daytona.Create"
	req, ws, err := p.createRequest(op, spec)
	if err != nil {
		return nil, err
	}
	dto, err := p.create(ctx, op, req)
	if err != nil {
		if dto.ID != "" {
			return nil, p.remove(ctx, dto.ID, op, err)
		}
		p.removeByName(ctx, req.Name)
		return nil, err
	}
	b, err := p.newBox(dto)
	if err != nil {
		return nil, p.remove(ctx, dto.ID, op, wrap(op, dto.ID, err))
	}
	if dto, err = p.ready(ctx, op, b, dto, spec.Network, ws); err != nil {
		return nil, p.remove(ctx, dto.ID, op, err)
	}
	b.setDTO(dto)
	return b, nil
}

// createRequest checks spec and makes the CreateSandbox body for it, and
// returns the box's workspace.
func (p *Provider) createRequest(op string, spec providers.Spec) (createRequest, string, error) {
	if err := spec.Validate(); err != nil {
		return createRequest{}, "", providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supported...); err != nil {
		return createRequest{}, "", err
	}
	lifetime := spec.LifetimeOrDefault()
	if lifetime%time.Minute != 0 {
		return createRequest{}, "", providers.Errorf(providers.Unsupported, op, "lifetime %v: Daytona's ttl is whole minutes", lifetime)
	}
	ws := DefaultWorkspace
	if spec.Workspace != "" {
		ws = path.Clean(spec.Workspace)
	}
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelMarker] = "1"
	labels[labelProvider] = Name
	labels[labelCreate] = providers.NewID(8)
	labels[labelWorkspace] = ws
	labels[labelLifetime] = strconv.FormatInt(int64(lifetime/time.Second), 10)
	req := createRequest{
		Name:               "boxfs-" + providers.NewID(6),
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
		return createRequest{}, "", err
	}
	return req, ws, nil
}

// ready waits for a new sandbox to start, checks its network, makes its
// workspace and waits for a listing to show it.
func (p *Provider) ready(ctx context.Context, op string, b *Box, dto sandboxDTO, n providers.Network, ws string) (sandboxDTO, error) {
	dto, err := p.waitStarted(ctx, op, dto)
	if err != nil {
		return dto, err
	}
	if err := checkNetwork(op, n, dto); err != nil {
		return dto, err
	}
	if err := b.mkdirAll(ctx, ws); err != nil {
		return dto, wrap(op, b.id, err).WithPath(ws)
	}
	return dto, p.waitListed(ctx, op, dto)
}

// create sends the create. It is retried (the name makes it idempotent): a
// 409 on the name is this create's own sandbox when its labels carry the
// create's nonce, and then it is adopted. A 400 after which a sandbox of
// this create's exists, failed, is a sandbox that failed before the create
// answered: Refused, and the sandbox is returned so that it is deleted.
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
	st := statusOf(err)
	if st != http.StatusConflict && st != http.StatusBadRequest {
		return sandboxDTO{}, wrap(op, "", err)
	}
	got, gerr := p.get(ctx, req.Name)
	if gerr != nil || got.Labels[labelCreate] != req.Labels[labelCreate] {
		return sandboxDTO{}, wrap(op, "", err)
	}
	if st == http.StatusBadRequest {
		if failed(got.State) {
			return got, failure(op, got)
		}
		return got, wrap(op, got.ID, err)
	}
	p.log.Debug("daytona: adopted the sandbox of a create retried after a lost answer", "box", got.ID)
	return got, nil
}

// failure is the error of a sandbox that went to a failed state.
func failure(op string, dto sandboxDTO) error {
	reason := dto.ErrorReason
	if reason == "" {
		reason = "no reason given"
	}
	return providers.Errorf(providers.Refused, op, "sandbox %s went to state %s: %s", dto.ID, dto.State, reason).WithBox(dto.ID)
}

// get reads one sandbox by id or name.
func (p *Provider) get(ctx context.Context, idOrName string) (sandboxDTO, error) {
	var dto sandboxDTO
	err := p.c.json(ctx, request{method: http.MethodGet, url: p.c.apiURL("/sandbox/" + url.PathEscape(idOrName)), idempotent: true}, &dto)
	return dto, err
}

// sleep waits d, or returns ctx's error wrapped for op.
func sleep(ctx context.Context, op, box string, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return wrap(op, box, ctx.Err())
	case <-t.C:
		return nil
	}
}

// reread reads a sandbox a wait loop is polling; one that is no longer
// there is Gone.
func (p *Provider) reread(ctx context.Context, op string, dto sandboxDTO) (sandboxDTO, error) {
	got, err := p.get(ctx, dto.ID)
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return dto, providers.Errorf(providers.Gone, op, "sandbox %s disappeared while %s", dto.ID, dto.State).WithBox(dto.ID)
		}
		return dto, wrap(op, dto.ID, err)
	}
	return got, nil
}

// waitStarted polls a sandbox until it is started, within createBound. A
// sandbox that failed, is deleted, went away or stays too long is an
// error.
func (p *Provider) waitStarted(ctx context.Context, op string, dto sandboxDTO) (sandboxDTO, error) {
	deadline := time.Now().Add(p.createBound)
	d := 100 * time.Millisecond
	for {
		switch {
		case dto.deleted():
			return dto, providers.Errorf(providers.Gone, op, "sandbox %s is deleted (state %s)", dto.ID, dto.State).WithBox(dto.ID)
		case dto.State == stateStarted:
			return dto, nil
		case failed(dto.State):
			return dto, failure(op, dto)
		case time.Now().After(deadline):
			return dto, providers.Errorf(providers.Timeout, op, "sandbox %s still %s after %v", dto.ID, dto.State, p.createBound).WithBox(dto.ID)
		}
		if err := sleep(ctx, op, dto.ID, d); err != nil {
			return dto, err
		}
		d = min(d*3/2, time.Second)
		var err error
		if dto, err = p.reread(ctx, op, dto); err != nil {
			return dto, err
		}
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
		if err := sleep(ctx, op, dto.ID, d); err != nil {
			return err
		}
		d = min(d*3/2, 2*time.Second)
	}
}

// cleanupBound is how long the delete of a sandbox whose create failed may
// take: at least the create's own bound, since Daytona refuses to delete
// a sandbox until it has finished starting.
func (p *Provider) cleanupBound() time.Duration {
	return p.createBound + removeTimeout
}

// remove deletes a sandbox whose create failed with cause, even when ctx
// has ended, and returns cause (saying so when the delete failed too).
func (p *Provider) remove(ctx context.Context, id, op string, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cleanupBound())
	defer cancel()
	err := p.delete(rctx, op, id)
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
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cleanupBound())
	defer cancel()
	if err := p.delete(rctx, "daytona.Create", name); err != nil {
		p.log.Warn("daytona: deleting what a failed create may have made", "name", name, "err", err)
	}
}

// delete deletes a sandbox; one that is gone or being deleted already is
// not an error. Daytona refuses (409) to delete a sandbox whose state is
// changing (creating, starting, stopping, ...): then the sandbox is read
// until its state has settled, and the delete sent again, until ctx ends.
func (p *Provider) delete(ctx context.Context, op, idOrName string) error {
	d := 100 * time.Millisecond
	for {
		err := p.c.json(ctx, request{method: http.MethodDelete, url: p.c.apiURL("/sandbox/" + url.PathEscape(idOrName)), idempotent: true}, nil)
		switch statusOf(err) {
		case http.StatusNotFound:
			return nil
		case http.StatusConflict:
		default:
			return err
		}
		done, err := p.awaitSettled(ctx, op, idOrName, &d)
		if done || err != nil {
			return err
		}
	}
}

// awaitSettled reads a sandbox whose delete was refused until its state
// settles (then done is false: delete again), or it turns out deleted or
// gone (done).
func (p *Provider) awaitSettled(ctx context.Context, op, idOrName string, d *time.Duration) (done bool, err error) {
	for {
		dto, err := p.get(ctx, idOrName)
		switch {
		case statusOf(err) == http.StatusNotFound:
			return true, nil
		case err != nil:
			return false, err
		case dto.deleted():
			return true, nil
		case dto.settled():
			return false, nil
		}
		p.log.Debug("daytona: waiting for a sandbox's state to settle before deleting it", "box", dto.ID, "state", dto.State, "desired", dto.DesiredState)
		if err := sleep(ctx, op, dto.ID, *d); err != nil {
			return false, err
		}
		*d = min(*d*3/2, 2*time.Second)
	}
}

// Attach finds a box by sandbox id. A sandbox that is gone, deleted, or
// not made by boxfs is NotFound; a stopped or paused one is started.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "daytona.Attach"
	if id == "" {
		return nil, providers.Errorf(providers.Invalid, op, "empty box id")
	}
	dto, err := p.get(ctx, id)
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if dto.Labels[labelMarker] != "1" || dto.deleted() {
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

// wake brings a sandbox that is stopped, paused, or on its way somewhere,
// to started, within createBound: a stopping one is waited for and then
// started. A failed one is returned as it is (its box reads as ended).
func (p *Provider) wake(ctx context.Context, op string, dto sandboxDTO) (sandboxDTO, error) {
	deadline := time.Now().Add(p.createBound)
	for {
		if dto.deleted() {
			return dto, providers.Errorf(providers.Gone, op, "sandbox %s is deleted (state %s)", dto.ID, dto.State).WithBox(dto.ID)
		}
		switch dto.State {
		case stateStarted, stateError, stateBuildFail:
			return dto, nil
		case stateStopped, stateArchived, statePaused:
			if err := p.c.json(ctx, request{method: http.MethodPost, url: p.c.apiURL("/sandbox/" + url.PathEscape(dto.ID) + "/start"), idempotent: true}, nil); err != nil {
				return dto, wrap(op, dto.ID, err)
			}
			return p.waitStarted(ctx, op, sandboxDTO{ID: dto.ID, Name: dto.Name, State: stateStarting})
		case stateCreating, stateStarting, "restoring", "pending_build", "building_snapshot", "pulling_snapshot", "resuming":
			return p.waitStarted(ctx, op, dto)
		}
		if time.Now().After(deadline) {
			return dto, providers.Errorf(providers.Timeout, op, "sandbox %s still %s after %v", dto.ID, dto.State, p.createBound).WithBox(dto.ID)
		}
		// stopping, pausing, archiving, ...: wait for it to settle
		if err := sleep(ctx, op, dto.ID, 500*time.Millisecond); err != nil {
			return dto, err
		}
		var err error
		if dto, err = p.reread(ctx, op, dto); err != nil {
			return dto, err
		}
	}
}

// List returns the boxes carrying every label in labels. It asks Daytona
// for boxfs's marker label alone and filters the others itself, paging
// through the listing; sandboxes being deleted are left out.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "daytona.List"
	items, err := p.list(ctx, op, "")
	if err != nil {
		return nil, err
	}
	var out []providers.Box
	for _, it := range items {
		if !providers.MatchLabels(it.Labels, labels) || it.deleted() {
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
// name, when it is set).
func (p *Provider) list(ctx context.Context, op, name string) ([]sandboxDTO, error) {
	marker, _ := json.Marshal(map[string]string{labelMarker: "1"})
	var out []sandboxDTO
	seen := map[string]bool{}
	cursor := ""
	for range maxPages {
		q := url.Values{"labels": {string(marker)}, "limit": {"100"}}
		if name != "" {
			q.Set("name", name)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		pg, err := p.listPage(ctx, op, q)
		if err != nil {
			return nil, err
		}
		out = append(out, pg.items...)
		switch {
		case pg.morePages:
			return nil, providers.Errorf(providers.Unsupported, op, "the listing answered in the older API's page shape, with more pages than the first; this API is not supported")
		case pg.nextCursor == "":
			return dedup(out), nil
		case seen[pg.nextCursor]:
			return nil, providers.Errorf(providers.Unknown, op, "the listing's cursor repeats")
		}
		seen[pg.nextCursor] = true
		cursor = pg.nextCursor
	}
	return nil, providers.Errorf(providers.TooLarge, op, "the listing goes on past %d pages", maxPages)
}

// listPage reads one page of a listing.
func (p *Provider) listPage(ctx context.Context, op string, q url.Values) (listPage, error) {
	resp, err := p.c.do(ctx, request{method: http.MethodGet, url: p.c.apiURL("/sandbox"), query: q, idempotent: true})
	if err != nil {
		return listPage{}, wrap(op, "", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return listPage{}, providers.E(providers.TransportLost, op, err)
	}
	pg, err := parseListPage(b)
	if err != nil {
		return listPage{}, providers.Errorf(providers.Unknown, op, "a listing page is not in any shape known: %v", err)
	}
	return pg, nil
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
