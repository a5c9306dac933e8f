package modal

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// Create makes a sandbox for spec and returns once it is scheduled, its
// workspace exists and it has measured itself. Spec fields: image (a
// registry reference, built by Modal, or an image id "im-..."), region,
// lifetime (rounded up to whole seconds, at most 24 h), cpus and memoryMb
// (Modal's reservations), gpu (gvisor boxes only), isolation (gvisor, the
// default, or microvm: a VM of its own), network (open, none, or an
// allowlist of domains and CIDRs), ports (tunnels), env (an ephemeral
// Modal secret: the values never appear in an argv), labels (tags) and
// workspace; a snapshot is the image id Snapshot returned. Anything else is
// Unsupported. A box that asked for a GPU and
// sees none is ended and the create fails. A create whose answer was lost
// is OutcomeUnknown, and the sandbox it may have made is ended.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "modal.Create"
	pl, err := p.check(op, spec)
	if err != nil {
		return nil, err
	}
	appID, err := p.appID(ctx)
	if err != nil {
		return nil, wrap(op, "", err)
	}
	imageID, err := p.imageID(ctx, appID, first(spec.Snapshot, spec.Image, p.image))
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	def := &pb.Sandbox{
		ImageId:        imageID,
		TimeoutSecs:    pl.lifetimeSecs,
		Workdir:        pl.workspace,
		NetworkAccess:  pl.network,
		Runtime:        pl.runtime,
		Resources:      &pb.Resources{GpuConfig: pl.gpu},
		EntrypointArgs: []string{},
	}
	if spec.CPUs > 0 {
		def.Resources.MilliCpu = uint32(spec.CPUs * 1000)
	}
	if spec.MemoryMB > 0 {
		def.Resources.MemoryMb = uint32(spec.MemoryMB)
	}
	if len(pl.ports) > 0 {
		def.OpenPorts = &pb.PortSpecs{Ports: pl.ports}
	}
	if spec.Region != "" {
		def.SchedulerPlacement = &pb.SchedulerPlacement{Regions: strings.Split(spec.Region, ",")}
	}
	if len(spec.Env) > 0 {
		id, err := p.envSecret(ctx, appID, spec.Env)
		if err != nil {
			return nil, wrap(op, "", err)
		}
		def.SecretIds = []string{id}
	}
	nonce := providers.NewID(8)
	tags := p.tags(spec, pl, nonce)
	resp, err := p.c.api.SandboxCreate(ctx, &pb.SandboxCreateRequest{
		AppId: appID, Definition: def, EnvironmentName: p.c.prof.environment, Tags: tagList(tags),
	})
	if err != nil {
		return nil, p.createFailed(ctx, op, nonce, err)
	}
	b := p.newBox(resp.GetSandboxId(), tags)
	b.created = &pl
	p.remember(b.id, def)
	if err := p.start(ctx, b, spec); err != nil {
		return nil, p.terminateAfter(ctx, op, b.id, err)
	}
	return b, nil
}

// createFailed classifies a failed SandboxCreate. When the answer was lost
// (the call may have reached Modal), the sandbox it may have made is found
// by the create's nonce and ended, and the error says the outcome is
// unknown.
func (p *Provider) createFailed(ctx context.Context, op, nonce string, err error) error {
	e := wrap(op, "", err)
	if !retryable(err) && status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return e
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	infos, lerr := p.list(cctx, map[string]string{tagCreate: nonce})
	for _, in := range infos {
		p.terminate(cctx, in.GetId())
	}
	if lerr != nil {
		p.log.Warn("modal: a create's answer was lost and its sandbox could not be looked for", "nonce", nonce, "err", lerr)
	}
	e.Code = providers.OutcomeUnknown
	return e
}

// terminateAfter ends a sandbox whose create failed after Modal made it,
// even when ctx is what failed, and returns err for op.
func (p *Provider) terminateAfter(ctx context.Context, op, id string, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if terr := p.terminate(cctx, id); terr != nil {
		p.log.Warn("modal: ending a sandbox whose create failed", "box", id, "err", terr)
	}
	return providers.E(0, op, err).WithBox(id)
}

func (p *Provider) terminate(ctx context.Context, id string) error {
	_, err := p.c.api.SandboxTerminate(ctx, &pb.SandboxTerminateRequest{SandboxId: id})
	if err != nil && status.Code(err) != codes.NotFound {
		return err
	}
	p.destroyed.Store(id, true)
	return nil
}

// start waits for the sandbox to be scheduled, makes its workspace,
// measures it, checks a GPU it asked for, and keeps what it measured in a
// tag of its own.
func (p *Provider) start(ctx context.Context, b *Box, spec providers.Spec) error {
	const op = "modal.Create"
	if _, err := b.task(ctx); err != nil {
		return err
	}
	f, err := b.measure(ctx, true)
	if err != nil {
		return err
	}
	if spec.GPU != "" && f.GPU == "" {
		return providers.Errorf(providers.Unavailable, op, "the sandbox asked for gpu %q and nvidia-smi in it reports none", spec.GPU).WithBox(b.id)
	}
	tags := maps.Clone(b.Labels())
	tags[tagHardware] = encodeHardware(f)
	if _, err := p.c.api.SandboxTagsSet(ctx, &pb.SandboxTagsSetRequest{EnvironmentName: p.c.prof.environment, SandboxId: b.id, Tags: tagList(tags)}); err != nil {
		return wrap(op, b.id, err)
	}
	b.mu.Lock()
	b.labels = tags
	b.mu.Unlock()
	return nil
}

// appID returns the id of the provider's app, made if missing.
func (p *Provider) appID(ctx context.Context) (string, error) {
	p.mu.Lock()
	id := p.appid
	p.mu.Unlock()
	if id != "" {
		return id, nil
	}
	resp, err := p.c.api.AppGetOrCreate(ctx, &pb.AppGetOrCreateRequest{
		AppName: p.app, EnvironmentName: p.c.prof.environment,
		ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING,
	})
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	p.appid = resp.GetAppId()
	p.mu.Unlock()
	return resp.GetAppId(), nil
}

// imageID returns the id of an image: an id ("im-...") is looked up, a
// registry reference is built by Modal (ImageGetOrCreate, then following
// the build's log until it ends; its lines go to the log as progress).
func (p *Provider) imageID(ctx context.Context, appID, ref string) (string, error) {
	const op = "modal.image"
	if strings.HasPrefix(ref, "im-") {
		resp, err := p.c.api.ImageFromId(ctx, &pb.ImageFromIdRequest{ImageId: ref})
		if err != nil {
			return "", wrap(op, "", err)
		}
		return resp.GetImageId(), nil
	}
	if strings.ContainsAny(ref, " \t\r\n") {
		return "", providers.Errorf(providers.Invalid, op, "image %q is not a registry reference", ref)
	}
	p.mu.Lock()
	id := p.images[ref]
	p.mu.Unlock()
	if id != "" {
		return id, nil
	}
	builder, err := p.builderVersion(ctx)
	if err != nil {
		return "", wrap(op, "", err)
	}
	resp, err := p.c.api.ImageGetOrCreate(ctx, &pb.ImageGetOrCreateRequest{
		AppId: appID, Image: &pb.Image{DockerfileCommands: []string{"FROM " + ref}}, BuilderVersion: builder,
	})
	if err != nil {
		return "", wrap(op, "", err)
	}
	result := resp.GetResult()
	if result.GetStatus() == pb.GenericResult_GENERIC_STATUS_UNSPECIFIED {
		if result, err = p.joinBuild(ctx, resp.GetImageId(), ref); err != nil {
			return "", wrap(op, "", err)
		}
	}
	if result.GetStatus() != pb.GenericResult_GENERIC_STATUS_SUCCESS {
		return "", providers.Errorf(providers.Refused, op, "building image %s (%s) ended %v: %s", ref, resp.GetImageId(), result.GetStatus(), result.GetException())
	}
	p.mu.Lock()
	p.images[ref] = resp.GetImageId()
	p.mu.Unlock()
	return resp.GetImageId(), nil
}

// joinBuild follows an image build until it has a result, resuming after
// the last log entry it saw each time the stream ends.
func (p *Provider) joinBuild(ctx context.Context, imageID, ref string) (*pb.GenericResult, error) {
	last := ""
	for {
		st, err := p.c.api.ImageJoinStreaming(ctx, &pb.ImageJoinStreamingRequest{ImageId: imageID, Timeout: 55, LastEntryId: last})
		if err != nil {
			return nil, err
		}
		for {
			item, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				if retryable(err) && ctx.Err() == nil {
					break
				}
				return nil, err
			}
			if item.GetEntryId() != "" {
				last = item.GetEntryId()
			}
			for _, l := range item.GetTaskLogs() {
				if s := strings.TrimRight(l.GetData(), "\n"); s != "" {
					p.log.Info("modal: building image", "image", ref, "log", s)
				}
			}
			if item.GetResult().GetStatus() != pb.GenericResult_GENERIC_STATUS_UNSPECIFIED {
				return item.GetResult(), nil
			}
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// builderVersion is the environment's image builder version, unless
// MODAL_IMAGE_BUILDER_VERSION or the profile names one.
func (p *Provider) builderVersion(ctx context.Context) (string, error) {
	if v := p.c.prof.imageBuilderVersion; v != "" {
		return v, nil
	}
	p.mu.Lock()
	v := p.builder
	p.mu.Unlock()
	if v != "" {
		return v, nil
	}
	resp, err := p.c.api.EnvironmentGetOrCreate(ctx, &pb.EnvironmentGetOrCreateRequest{DeploymentName: p.c.prof.environment})
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	p.builder = resp.GetMetadata().GetSettings().GetImageBuilderVersion()
	p.mu.Unlock()
	return resp.GetMetadata().GetSettings().GetImageBuilderVersion(), nil
}

// envSecret makes the ephemeral secret that carries a box's environment,
// as Modal's clients ship a sandbox's env.
func (p *Provider) envSecret(ctx context.Context, appID string, env map[string]string) (string, error) {
	resp, err := p.c.api.SecretGetOrCreate(ctx, &pb.SecretGetOrCreateRequest{
		EnvironmentName: p.c.prof.environment, AppId: appID, EnvDict: env,
		ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL,
	})
	if err != nil {
		return "", err
	}
	return resp.GetSecretId(), nil
}
