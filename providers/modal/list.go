package modal

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// Attach finds a running sandbox by id. A sandbox that Modal does not know,
// that has ended, or that boxfs did not make is NotFound. Attach neither
// fails nor ends a live sandbox: it only reads (SandboxWait with no wait,
// then its tags).
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "modal.Attach"
	if id == "" {
		return nil, providers.Errorf(providers.Invalid, op, "empty box id")
	}
	w, err := p.c.api.SandboxWait(ctx, &pb.SandboxWaitRequest{SandboxId: id, Timeout: 0})
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if r := w.GetResult(); r.GetStatus() != pb.GenericResult_GENERIC_STATUS_UNSPECIFIED {
		return nil, providers.Errorf(providers.NotFound, op, "sandbox has ended (%s)", endReason(r)).WithBox(id)
	}
	tg, err := p.c.api.SandboxTagsGet(ctx, &pb.SandboxTagsGetRequest{SandboxId: id})
	if err != nil {
		return nil, wrap(op, id, err)
	}
	tags := tagMap(tg.GetTags())
	if tags[tagMarker] != "1" {
		return nil, providers.Errorf(providers.NotFound, op, "sandbox %s is not a boxfs box", id).WithBox(id)
	}
	return p.newBox(id, tags), nil
}

// List returns the running boxes that carry every label in labels: one
// SandboxList by tags, paged by creation time.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "modal.List"
	infos, err := p.list(ctx, labels)
	if err != nil {
		return nil, wrap(op, "", err)
	}
	out := make([]providers.Box, 0, len(infos))
	for _, in := range infos {
		tags := tagMap(in.GetTags())
		if _, gone := p.destroyed.Load(in.GetId()); gone || !providers.MatchLabels(tags, labels) {
			continue
		}
		out = append(out, p.newBox(in.GetId(), tags))
	}
	return out, nil
}

// list pages through the app's unfinished sandboxes carrying boxfs=1 and
// labels: each page is asked for with the creation time of the last one
// seen, until a page comes back empty.
func (p *Provider) list(ctx context.Context, labels map[string]string) ([]*pb.SandboxInfo, error) {
	appID, err := p.appID(ctx)
	if err != nil {
		return nil, err
	}
	want := map[string]string{tagMarker: "1"}
	for k, v := range labels {
		want[k] = v
	}
	var out []*pb.SandboxInfo
	seen := map[string]bool{}
	before := 0.0
	for range 10000 {
		resp, err := p.c.api.SandboxList(ctx, &pb.SandboxListRequest{
			AppId: appID, BeforeTimestamp: before, EnvironmentName: p.c.prof.environment, Tags: tagList(want),
		})
		if err != nil {
			return nil, err
		}
		page := resp.GetSandboxes()
		fresh := 0
		for _, in := range page {
			if !seen[in.GetId()] {
				seen[in.GetId()] = true
				out = append(out, in)
				fresh++
			}
		}
		if len(page) == 0 || fresh == 0 {
			return out, nil
		}
		before = page[len(page)-1].GetCreatedAt()
	}
	return out, status.Error(codes.ResourceExhausted, "more than 10000 pages of sandboxes")
}
