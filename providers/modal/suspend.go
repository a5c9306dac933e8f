package modal

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

var (
	_ providers.Suspender   = (*Provider)(nil)
	_ providers.Snapshotter = (*Provider)(nil)
)

// snapshotTTL is how long Modal keeps a filesystem snapshot's image (the
// SDK's default): longer than any box's lifetime.
const snapshotTTL = 30 * 24 * time.Hour

// suspendPrefix starts the ids Suspend returns.
const suspendPrefix = "modal-suspend:"

// suspended is what a suspend id carries: the image of the box's
// filesystem, and the definition and tags of the sandbox to make from it.
type suspended struct {
	Image string            `json:"image"`
	Def   []byte            `json:"def"` // a pb.Sandbox, without its image
	Tags  map[string]string `json:"tags"`
}

// box returns b as one of this provider's boxes, or Invalid.
func (p *Provider) box(op string, b providers.Box) (*Box, error) {
	mb, ok := b.(*Box)
	if !ok || mb.p != p {
		return nil, providers.Errorf(providers.Invalid, op, "not a box of this modal provider")
	}
	if err := mb.gone(op); err != nil {
		return nil, err
	}
	return mb, nil
}

// snapshotFS has the task's command router save the sandbox's filesystem
// as an image, and returns the image's id.
func (b *Box) snapshotFS(ctx context.Context, op string) (string, error) {
	rt, taskID, err := b.router(ctx)
	if err != nil {
		return "", providers.E(0, op, err).WithBox(b.id)
	}
	req := &pb.TaskSnapshotFilesystemRequest{TaskId: taskID, SnapshotId: newUUID(), TtlSeconds: int64(snapshotTTL / time.Second)}
	var image string
	if err := rt.call(ctx, func(cctx context.Context, api pb.TaskCommandRouterClient) error {
		resp, err := api.TaskSnapshotFilesystem(cctx, req)
		image = resp.GetImageId()
		return err
	}); err != nil {
		return "", b.classify(ctx, op, err)
	}
	if image == "" {
		return "", providers.Errorf(providers.Unknown, op, "the snapshot's answer names no image").WithBox(b.id)
	}
	return image, nil
}

// Snapshot saves the sandbox's filesystem as a Modal image (kept 30 days)
// and returns the image's id, which a new box's Spec.Snapshot (or Image)
// takes. name is not kept: Modal's images have ids, not names.
func (p *Provider) Snapshot(ctx context.Context, b providers.Box, name string) (string, error) {
	const op = "modal.Snapshot"
	mb, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n/") {
		return "", providers.Errorf(providers.Invalid, op, "snapshot name %q", name).WithBox(mb.id)
	}
	return mb.snapshotFS(ctx, op)
}

// Suspend saves the sandbox's filesystem as an image and terminates the
// sandbox: what runs in it ends, its memory goes. The id it returns makes
// a new sandbox from that image, with the definition (network, resources,
// environment, workspace) and tags of this one; so the box must be one
// this provider made, or made by a provider of the same state directory.
func (p *Provider) Suspend(ctx context.Context, b providers.Box) (string, error) {
	const op = "modal.Suspend"
	mb, err := p.box(op, b)
	if err != nil {
		return "", err
	}
	def := p.definition(mb.id)
	if def == nil {
		return "", providers.Errorf(providers.Unsupported, op, "the definition sandbox %s was made from is not known here (made by another host?): it cannot be made again from a snapshot", mb.id).WithBox(mb.id)
	}
	image, err := mb.snapshotFS(ctx, op)
	if err != nil {
		return "", err
	}
	def = proto.Clone(def).(*pb.Sandbox)
	def.ImageId = ""
	raw, err := proto.Marshal(def)
	if err != nil {
		return "", providers.E(providers.Unknown, op, err).WithBox(mb.id)
	}
	js, err := json.Marshal(suspended{Image: image, Def: raw, Tags: mb.Labels()})
	if err != nil {
		return "", providers.E(providers.Unknown, op, err).WithBox(mb.id)
	}
	if err := mb.Destroy(ctx); err != nil {
		return "", providers.E(0, op, err).WithBox(mb.id)
	}
	return suspendPrefix + base64.RawURLEncoding.EncodeToString(js), nil
}

// Resume makes a new sandbox from the image a suspend saved, with the
// suspended sandbox's definition and tags and what is left of its
// lifetime, and returns it once it runs. An id no suspend gave, or an
// image Modal no longer has, is NotFound; a box past its lifetime is Gone.
func (p *Provider) Resume(ctx context.Context, id string) (providers.Box, error) {
	const op = "modal.Resume"
	s, def, err := decodeSuspended(id)
	if err != nil {
		return nil, providers.E(providers.NotFound, op, err)
	}
	created, _ := time.Parse(time.RFC3339Nano, s.Tags[tagCreated])
	secs, _ := strconv.ParseInt(s.Tags[tagLifetime], 10, 64)
	left := time.Until(created.Add(time.Duration(secs) * time.Second))
	if created.IsZero() || secs <= 0 {
		return nil, providers.Errorf(providers.NotFound, op, "the suspended box's tags say no lifetime")
	}
	if left <= 0 {
		return nil, providers.Errorf(providers.Gone, op, "the box's lifetime passed at %s, while it was suspended", created.Add(time.Duration(secs)*time.Second).UTC().Format(time.RFC3339))
	}
	appID, err := p.appID(ctx)
	if err != nil {
		return nil, wrap(op, "", err)
	}
	if _, err := p.imageID(ctx, appID, s.Image); err != nil {
		return nil, providers.E(0, op, err)
	}
	def.ImageId = s.Image
	def.TimeoutSecs = uint32(math.Ceil(left.Seconds()))
	tags := s.Tags
	tags[tagCreate] = providers.NewID(8)
	resp, err := p.c.api.SandboxCreate(ctx, &pb.SandboxCreateRequest{
		AppId: appID, Definition: def, EnvironmentName: p.c.prof.environment, Tags: tagList(tags),
	})
	if err != nil {
		return nil, p.createFailed(ctx, op, tags[tagCreate], err)
	}
	b := p.newBox(resp.GetSandboxId(), tags)
	p.remember(b.id, def)
	if _, err := b.task(ctx); err != nil {
		return nil, p.terminateAfter(ctx, op, b.id, err)
	}
	return b, nil
}

// decodeSuspended reads a suspend id.
func decodeSuspended(id string) (suspended, *pb.Sandbox, error) {
	var s suspended
	rest, ok := strings.CutPrefix(id, suspendPrefix)
	if !ok {
		return s, nil, providers.Errorf(providers.NotFound, "modal.Resume", "%q is not an id a suspend gave", id)
	}
	js, err := base64.RawURLEncoding.DecodeString(rest)
	if err == nil {
		err = json.Unmarshal(js, &s)
	}
	def := &pb.Sandbox{}
	if err == nil {
		err = proto.Unmarshal(s.Def, def)
	}
	if err != nil || !strings.HasPrefix(s.Image, "im-") || s.Tags == nil {
		return s, nil, providers.Errorf(providers.NotFound, "modal.Resume", "the suspend id does not read: %v", err)
	}
	return s, def, nil
}

// remember keeps the definition a sandbox was made from, in memory and,
// with a state directory, on disk, for a suspend to make it again.
func (p *Provider) remember(id string, def *pb.Sandbox) {
	p.defs.Store(id, def)
	if p.stateDir == "" {
		return
	}
	raw, err := proto.Marshal(def)
	if err == nil {
		err = os.MkdirAll(filepath.Join(p.stateDir, "defs"), 0o700)
	}
	if err == nil {
		err = os.WriteFile(p.defPath(id), raw, 0o600)
	}
	if err != nil {
		p.log.Warn("modal: a sandbox's definition not kept: another process cannot suspend it", "box", id, "err", err)
	}
}

// definition returns the definition sandbox id was made from, or nil.
func (p *Provider) definition(id string) *pb.Sandbox {
	if d, ok := p.defs.Load(id); ok {
		return d.(*pb.Sandbox)
	}
	if p.stateDir == "" {
		return nil
	}
	raw, err := os.ReadFile(p.defPath(id))
	if err != nil {
		return nil
	}
	def := &pb.Sandbox{}
	if proto.Unmarshal(raw, def) != nil {
		return nil
	}
	p.defs.Store(id, def)
	return def
}

// forgetDef drops what remember kept of sandbox id.
func (p *Provider) forgetDef(id string) {
	p.defs.Delete(id)
	if p.stateDir != "" {
		os.Remove(p.defPath(id))
	}
}

func (p *Provider) defPath(id string) string {
	return filepath.Join(p.stateDir, "defs", strings.NewReplacer("/", "_", "\x00", "_").Replace(id)+".pb")
}
