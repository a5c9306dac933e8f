package docker

import (
	"context"
	"regexp"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/boxfs/boxfs/providers"
)

// exitSuspended is the keeper's exit status when it is told to suspend the
// box (SIGUSR1, the stop signal Suspend sends): Status reads a container
// that exited with it as stopped, and Resume starts it again.
const exitSuspended = 75

// labelSnapshot marks an image Snapshot made; its value is the name given.
const labelSnapshot = "boxfs.snapshot"

var (
	_ providers.Suspender   = (*Provider)(nil)
	_ providers.Snapshotter = (*Provider)(nil)
)

// suspendGrace is how long a suspend waits for the keeper to exit.
const suspendGrace = 10 * time.Second

// box returns b as one of this provider's boxes, or Invalid.
func (p *Provider) box(op string, b providers.Box) (*Box, error) {
	db, ok := b.(*Box)
	if !ok || db.p != p {
		return nil, providers.Errorf(providers.Invalid, op, "not a box of this docker provider")
	}
	return db, nil
}

// Suspend stops the container: every process in it ends and its memory is
// freed, its filesystem (the container's layer) is kept. The id it returns
// is the container's. A container that has ended is Gone.
func (p *Provider) Suspend(ctx context.Context, b providers.Box) (string, error) {
	const op = "docker.Suspend"
	db, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	if err := db.gone(op); err != nil {
		return "", err
	}
	c, err := p.cli.ContainerInspect(ctx, db.id)
	if err != nil {
		return "", goneIfMissing(wrap(op, db.id, err))
	}
	if st := statusOf(c.State); st.State != providers.StateRunning {
		if suspended(c.State) {
			return db.id, nil
		}
		return "", providers.Errorf(providers.Gone, op, "box is %s (%s)", st.State, st.Reason).WithBox(db.id)
	}
	if err := p.stopKeeper(ctx, op, db.id); err != nil {
		return "", err
	}
	c, err = p.cli.ContainerInspect(ctx, db.id)
	if err != nil {
		return "", goneIfMissing(wrap(op, db.id, err))
	}
	if !suspended(c.State) {
		// Its lifetime passed meanwhile, or something else ended it.
		st := statusOf(c.State)
		return "", providers.Errorf(providers.Gone, op, "box stopped but did not suspend: %s", st.Reason).WithBox(db.id)
	}
	return db.id, nil
}

// stopKeeper sends the keeper SIGUSR1 and waits, within suspendGrace, for
// the container to stop. A keeper that ignores it (a box made by a boxfs
// whose keeper did not take it) leaves the box running as it was: that is
// Refused.
func (p *Provider) stopKeeper(ctx context.Context, op, id string) error {
	if err := p.cli.ContainerKill(ctx, id, "SIGUSR1"); err != nil {
		return goneIfMissing(wrap(op, id, err))
	}
	wctx, cancel := context.WithTimeout(ctx, suspendGrace)
	defer cancel()
	okc, errc := p.cli.ContainerWait(wctx, id, container.WaitConditionNotRunning)
	select {
	case <-okc:
		return nil
	case err := <-errc:
		if ctx.Err() == nil && wctx.Err() != nil {
			return providers.Errorf(providers.Refused, op, "box did not stop within %v of the suspend signal (made by an older boxfs, whose keeper ignores it?); it runs on", suspendGrace).WithBox(id)
		}
		return goneIfMissing(wrap(op, id, err))
	}
}

// suspended reports whether a container's keeper exited because Suspend
// told it to.
func suspended(s *container.State) bool {
	return s != nil && !s.Running && !s.Paused && !s.Restarting && s.Status == container.StateExited && s.ExitCode == exitSuspended
}

// Resume starts a suspended container again. A container that is not a
// boxfs box, or no longer exists, is NotFound; one past its lifetime, or
// that ended rather than suspended, is Gone. Resuming a running box returns
// it as it is.
func (p *Provider) Resume(ctx context.Context, id string) (providers.Box, error) {
	const op = "docker.Resume"
	if id == "" {
		return nil, providers.Errorf(providers.Invalid, op, "empty id")
	}
	c, err := p.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if c.Config == nil || c.Config.Labels[labelMarker] != "1" {
		return nil, providers.Errorf(providers.NotFound, op, "container %s is not a boxfs box", id).WithBox(id)
	}
	b := p.newBox(c.ID, c.Config.Labels)
	switch {
	case c.State != nil && c.State.Running:
		return b, nil
	case !suspended(c.State):
		st := statusOf(c.State)
		return nil, providers.Errorf(providers.Gone, op, "box is %s (%s), not suspended", st.State, st.Reason).WithBox(c.ID)
	}
	if end, ok := b.deadline(); ok && !time.Now().Before(end) {
		return nil, providers.Errorf(providers.Gone, op, "box's lifetime passed at %s, while it was suspended", end.UTC().Format(time.RFC3339)).WithBox(c.ID)
	}
	if err := p.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return nil, goneIfMissing(wrap(op, c.ID, err))
	}
	st, err := b.Status(ctx)
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	if st.State != providers.StateRunning {
		return nil, providers.Errorf(providers.Gone, op, "box did not run once started: %s (%s)", st.State, st.Reason).WithBox(c.ID)
	}
	return b, nil
}

// deadline is when the box's lifetime ends: its lifetime after it was made.
func (b *Box) deadline() (time.Time, bool) {
	secs, err := strconv.ParseInt(b.labels[labelLifetime], 10, 64)
	created, terr := time.Parse(time.RFC3339Nano, b.labels[labelCreated])
	if err != nil || terr != nil || secs <= 0 {
		return time.Time{}, false
	}
	return created.Add(time.Duration(secs) * time.Second), true
}

// snapshotName is what the engine takes as an image tag.
var snapshotName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)

// Snapshot commits the container's filesystem to an image, tagged
// boxfs-snapshot:NAME, and returns the image's id. The container is not
// paused while the engine copies its layer: an exec started into a paused
// container (the workspace watch reconnecting, a command) joins the frozen
// cgroup, and the engine then never unpauses it. The box manager pushes
// what the host holds first; a command running in the box meanwhile may
// be caught mid-write, as by a copy of a live disk. A box made from the
// snapshot carries the labels of the box it was taken of (the engine keeps
// them in the image) and runs as its user.
func (p *Provider) Snapshot(ctx context.Context, b providers.Box, name string) (string, error) {
	const op = "docker.Snapshot"
	db, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	if err := db.gone(op); err != nil {
		return "", err
	}
	if !snapshotName.MatchString(name) {
		return "", providers.Errorf(providers.Invalid, op, "snapshot name %q: want 1 to 128 of a-z 0-9 _ . - (an image tag)", name)
	}
	resp, err := p.cli.ContainerCommit(ctx, db.id, container.CommitOptions{
		Reference: "boxfs-snapshot:" + name,
		Comment:   "boxfs snapshot of box " + db.id,
		Pause:     false,
		Config:    &container.Config{Labels: map[string]string{labelSnapshot: name}},
	})
	if err != nil {
		return "", goneIfMissing(wrap(op, db.id, err))
	}
	return resp.ID, nil
}

// snapshotImage checks that ref is an image Snapshot made: an image the
// engine lacks, or one boxfs did not make, is NotFound.
func (p *Provider) snapshotImage(ctx context.Context, op, ref string) error {
	img, err := p.cli.ImageInspect(ctx, ref)
	if err != nil {
		return wrap(op, "", err)
	}
	if img.Config == nil || img.Config.Labels[labelSnapshot] == "" {
		return providers.Errorf(providers.NotFound, op, "image %s is not a boxfs snapshot", ref)
	}
	return nil
}

// goneIfMissing makes a missing container's NotFound Gone: the box was
// there, and is not any more.
func goneIfMissing(e *providers.Error) *providers.Error {
	if e.Code == providers.NotFound {
		e.Code = providers.Gone
	}
	return e
}
