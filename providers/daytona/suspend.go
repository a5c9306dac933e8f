package daytona

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/boxfs/boxfs/providers"
)

var (
	_ providers.Suspender   = (*Provider)(nil)
	_ providers.Snapshotter = (*Provider)(nil)
)

// stateSnapshotting is a sandbox's state while a snapshot is taken of it.
const stateSnapshotting = "snapshotting"

// box returns b as one of this provider's boxes, or Invalid.
func (p *Provider) box(op string, b providers.Box) (*Box, error) {
	db, ok := b.(*Box)
	if !ok || db.p != p {
		return nil, providers.Errorf(providers.Invalid, op, "not a box of this daytona provider")
	}
	if db.destroyed.Load() {
		return nil, providers.Errorf(providers.Gone, op, "box was destroyed").WithBox(db.id)
	}
	return db, nil
}

// current reads a box's sandbox: one that is gone or being deleted is
// Gone.
func (p *Provider) current(ctx context.Context, op string, db *Box) (sandboxDTO, error) {
	dto, err := p.get(ctx, db.id)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return dto, providers.Errorf(providers.Gone, op, "sandbox %s is gone", db.id).WithBox(db.id)
	case err != nil:
		return dto, wrap(op, db.id, err)
	case dto.deleted():
		return dto, providers.Errorf(providers.Gone, op, "sandbox %s is being deleted", db.id).WithBox(db.id)
	}
	return dto, nil
}

// Suspend stops the sandbox: its processes end and its memory is freed,
// its filesystem is kept (Daytona keeps a stopped sandbox's disk; it may
// archive it later, which start brings back too), until its ttl. The id is
// the sandbox's. A sandbox already stopped or archived is left as it is.
func (p *Provider) Suspend(ctx context.Context, b providers.Box) (string, error) {
	const op = "daytona.Suspend"
	db, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	dto, err := p.current(ctx, op, db)
	if err != nil {
		return "", err
	}
	switch {
	case dto.State == stateStopped || dto.State == stateArchived:
		return db.id, nil
	case failed(dto.State):
		return "", failure(op, dto)
	case dto.State != stateStarted:
		return "", providers.Errorf(providers.Refused, op, "sandbox %s is %s; only a started one can be suspended", db.id, dto.State).WithBox(db.id)
	}
	// A box is made to be deleted when it stops (autoDeleteInterval 0: an
	// idle box ends); a suspended one is kept until its ttl.
	if err := p.autoDelete(ctx, op, db, -1); err != nil {
		return "", err
	}
	err = p.c.json(ctx, request{method: http.MethodPost, url: p.c.apiURL("/sandbox/" + url.PathEscape(db.id) + "/stop"), idempotent: true}, nil)
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return "", providers.Errorf(providers.Gone, op, "sandbox %s is gone", db.id).WithBox(db.id)
		}
		if rerr := p.autoDelete(context.WithoutCancel(ctx), op, db, 0); rerr != nil {
			p.log.Warn("daytona: a sandbox whose stop failed keeps no auto-delete", "box", db.id, "err", rerr)
		}
		return "", wrap(op, db.id, err)
	}
	return db.id, p.waitSettled(ctx, op, db, func(d sandboxDTO) bool { return d.State == stateStopped || d.State == stateArchived })
}

// autoDelete sets the sandbox's autoDeleteInterval: 0 deletes it when it
// stops, -1 never.
func (p *Provider) autoDelete(ctx context.Context, op string, db *Box, minutes int) error {
	err := p.c.json(ctx, request{method: http.MethodPost, url: p.c.apiURL("/sandbox/" + url.PathEscape(db.id) + "/autodelete/" + strconv.Itoa(minutes)), idempotent: true}, nil)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return providers.Errorf(providers.Gone, op, "sandbox %s is gone", db.id).WithBox(db.id)
	case err != nil:
		return wrap(op, db.id, err)
	}
	return nil
}

// waitSettled polls the sandbox until done says it has arrived, within
// createBound. A sandbox that failed or went away is an error.
func (p *Provider) waitSettled(ctx context.Context, op string, db *Box, done func(sandboxDTO) bool) error {
	deadline := time.Now().Add(p.createBound)
	d := 100 * time.Millisecond
	for {
		dto, err := p.current(ctx, op, db)
		switch {
		case err != nil:
			return err
		case done(dto):
			db.setDTO(dto)
			return nil
		case failed(dto.State):
			return failure(op, dto)
		case time.Now().After(deadline):
			return providers.Errorf(providers.Timeout, op, "sandbox %s still %s after %v", db.id, dto.State, p.createBound).WithBox(db.id)
		}
		if err := sleep(ctx, op, db.id, d); err != nil {
			return err
		}
		d = min(d*3/2, time.Second)
	}
}

// Resume starts a stopped (or archived, or paused) sandbox again and
// returns it once started, to be deleted again when it stops (idle). A
// sandbox Daytona no longer has (its ttl ended it while it was stopped) is
// NotFound.
func (p *Provider) Resume(ctx context.Context, id string) (providers.Box, error) {
	const op = "daytona.Resume"
	b, err := p.Attach(ctx, id) // Attach starts a stopped sandbox
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	db := b.(*Box)
	db.mu.Lock()
	dto := db.dto
	db.mu.Unlock()
	if dto.State != stateStarted {
		return nil, providers.E(providers.Gone, op, failure(op, dto)).WithBox(id)
	}
	if err := p.autoDelete(ctx, op, db, 0); err != nil {
		return nil, err
	}
	return db, nil
}

// Snapshot saves the sandbox's filesystem as a Daytona snapshot named
// boxfs-NAME-XXXX (snapshot names are the organization's: the suffix keeps
// two boxes' snapshots of one name apart), waits until the sandbox has
// left the snapshotting state, and returns the snapshot's name, which a
// new box's Spec.Snapshot takes.
func (p *Provider) Snapshot(ctx context.Context, b providers.Box, name string) (string, error) {
	const op = "daytona.Snapshot"
	db, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	if !validSnapshotName(name) {
		return "", providers.Errorf(providers.Invalid, op, "snapshot name %q: want 1 to 63 of A-Z a-z 0-9 . _ -", name)
	}
	snap := "boxfs-" + name + "-" + providers.NewID(2)
	body, err := jsonBody(struct {
		Name string `json:"name"`
	}{snap})
	if err != nil {
		return "", providers.E(providers.Invalid, op, err)
	}
	// Idempotent by its name, which is this call's own (the suffix): a
	// retry after a lost answer (no answer, or a 5xx after Daytona took
	// the snapshot) finds the name taken, or the sandbox snapshotting
	// still, and either 409 is this call's snapshot. Not retried, a lost
	// answer would fail a snapshot that was taken and leave it behind.
	err = p.c.json(ctx, request{method: http.MethodPost, url: p.c.apiURL("/sandbox/" + url.PathEscape(db.id) + "/snapshot"), body: body, contentType: "application/json", idempotent: true}, nil)
	if statusOf(err) == http.StatusConflict && tries(err) > 1 {
		p.log.Debug("daytona: a snapshot retried after a lost answer was taken by the first attempt", "box", db.id, "snapshot", snap)
		err = nil
	}
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return "", providers.Errorf(providers.Gone, op, "sandbox %s is gone", db.id).WithBox(db.id)
		}
		return "", wrap(op, db.id, err)
	}
	if err := p.waitSettled(ctx, op, db, func(d sandboxDTO) bool { return d.State != stateSnapshotting }); err != nil {
		return "", err
	}
	return snap, nil
}

func validSnapshotName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
