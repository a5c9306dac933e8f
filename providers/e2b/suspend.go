package e2b

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/boxfs/boxfs/providers"
)

var (
	_ providers.Suspender   = (*Provider)(nil)
	_ providers.Snapshotter = (*Provider)(nil)
)

// box returns b as one of this provider's boxes, or Invalid.
func (p *Provider) box(op string, b providers.Box) (*Box, error) {
	eb, ok := b.(*Box)
	if !ok || eb.p != p {
		return nil, providers.Errorf(providers.Invalid, op, "not a box of this e2b provider")
	}
	if err := eb.gone(op); err != nil {
		return nil, err
	}
	return eb, nil
}

// Suspend pauses the sandbox with its memory (E2B's pause): everything in
// it stops where it is, and a resume thaws it; the streams to it are cut
// meanwhile, so a command followed then is lost to the host. The id says
// the sandbox and when its lifetime ends (the timeout it had), which a
// resume gives it again. A sandbox paused already is not an error.
func (p *Provider) Suspend(ctx context.Context, b providers.Box) (string, error) {
	const op = "e2b.Suspend"
	eb, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	sb, err := p.api.get(ctx, eb.id)
	if err != nil {
		return "", goneIfMissing(wrap(op, eb.id, err))
	}
	id := eb.id + "@" + strconv.FormatInt(sb.EndAt.Unix(), 10)
	if sb.State == "paused" {
		return id, nil
	}
	body := struct {
		Memory bool `json:"memory"`
	}{true}
	_, err = p.api.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(eb.id)+"/pause", nil, body, nil)
	if err != nil && errorCode(err) != providers.Refused { // 409: paused already
		return "", goneIfMissing(wrap(op, eb.id, err))
	}
	return id, nil
}

// Resume connects to the paused sandbox (E2B resumes it) with what was
// left of its lifetime, and returns it. An id Suspend did not make, or a
// sandbox E2B does not have, is NotFound; one past its lifetime is Gone,
// and the paused sandbox is killed: E2B runs no timeout while a sandbox
// is paused, so nothing else would end it.
func (p *Provider) Resume(ctx context.Context, id string) (providers.Box, error) {
	const op = "e2b.Resume"
	sid, endText, ok := strings.Cut(id, "@")
	end, err := strconv.ParseInt(endText, 10, 64)
	if !ok || err != nil || sid == "" || strings.ContainsAny(sid, "/?#") {
		return nil, providers.Errorf(providers.NotFound, op, "%q is not an id a suspend gave", id)
	}
	left := time.Unix(end, 0).Sub(p.now())
	if left <= 0 {
		p.killExpired(ctx, sid)
		return nil, providers.Errorf(providers.Gone, op, "sandbox %s's lifetime passed at %s, while it was paused", sid, time.Unix(end, 0).UTC().Format(time.RFC3339)).WithBox(sid)
	}
	body := struct {
		Timeout int32 `json:"timeout"`
	}{int32(math.Ceil(left.Seconds()))}
	var sb sandbox
	if _, err := p.api.do(ctx, http.MethodPost, "/v2/sandboxes/"+url.PathEscape(sid)+"/connect", nil, body, &sb); err != nil {
		return nil, wrap(op, sid, err)
	}
	return p.Attach(ctx, sid)
}

// killExpired kills the sandbox sid, whose lifetime passed while it was
// paused, if it is still a paused boxfs box. One that runs was resumed by
// someone else, with a timeout E2B now counts; one that is not boxfs's is
// not Resume's to end. A failure is logged: Resume answers Gone anyway,
// and a sweep of List's paused boxes finds the sandbox again.
func (p *Provider) killExpired(ctx context.Context, sid string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sb, err := p.api.get(ctx, sid)
	if err != nil {
		if errorCode(err) != providers.NotFound {
			p.log.Warn("e2b: reading a sandbox whose lifetime passed while paused", "box", sid, "err", err)
		}
		return
	}
	if sb.Metadata[labelMarker] != "1" || sb.State != "paused" {
		return
	}
	if err := p.api.kill(ctx, sid); err != nil {
		p.log.Warn("e2b: killing a sandbox whose lifetime passed while paused", "box", sid, "err", err)
	}
}

// goneIfMissing makes a sandbox's NotFound Gone: it was there, and is not
// any more.
func goneIfMissing(e *providers.Error) *providers.Error {
	if e.Code == providers.NotFound {
		e.Code = providers.Gone
	}
	return e
}

// snapshotName is what E2B takes as a snapshot template's name.
var snapshotName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// Snapshot saves the sandbox's disk and memory as a snapshot template
// (E2B pauses the sandbox meanwhile, and resumes it) and returns the
// template's id (team/NAME:default), which a new box's Spec.Snapshot
// takes. NAME must be lowercase letters, digits, '.', '_' and '-'.
func (p *Provider) Snapshot(ctx context.Context, b providers.Box, name string) (string, error) {
	const op = "e2b.Snapshot"
	eb, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	if !snapshotName.MatchString(name) {
		return "", providers.Errorf(providers.Invalid, op, "snapshot name %q: want lowercase letters, digits, '.', '_' and '-'", name)
	}
	body := struct {
		Name string `json:"name"`
	}{name}
	var out struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}
	// A snapshot E2B made is not made again: only a 429 is retried.
	if _, err := p.api.doOnce(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(eb.id)+"/snapshots", nil, body, &out); err != nil {
		return "", goneIfMissing(wrap(op, eb.id, err))
	}
	if out.SnapshotID == "" {
		return "", providers.Errorf(providers.Unknown, op, "the snapshot's answer names no snapshot").WithBox(eb.id)
	}
	return out.SnapshotID, nil
}
