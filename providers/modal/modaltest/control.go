package modaltest

import (
	"context"
	crand "crypto/rand"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

func randRead(b []byte) { crand.Read(b) }

// control answers modal.client.ModalClient.
type control struct {
	pb.UnimplementedModalClientServer
	s *Server
}

func (c *control) AuthTokenGet(context.Context, *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	return &pb.AuthTokenGetResponse{Token: c.s.issue("", c.s.opts.AuthTokenTTL)}, nil
}

func (c *control) AppGetOrCreate(_ context.Context, r *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	if r.GetAppName() == "" {
		return nil, status.Error(codes.InvalidArgument, "app name is empty")
	}
	key := r.GetEnvironmentName() + "/" + r.GetAppName()
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	id, ok := c.s.apps[key]
	if !ok {
		if r.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING {
			return nil, status.Errorf(codes.NotFound, "app %q not found", r.GetAppName())
		}
		id = newID("ap-")
		c.s.apps[key] = id
	}
	return &pb.AppGetOrCreateResponse{AppId: id}, nil
}

func (c *control) EnvironmentGetOrCreate(_ context.Context, r *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	name := r.GetDeploymentName()
	if name == "" {
		name = "main"
	}
	return &pb.EnvironmentGetOrCreateResponse{EnvironmentId: "en-" + name, Metadata: &pb.EnvironmentMetadata{
		Name: name, Settings: &pb.EnvironmentSettings{ImageBuilderVersion: "2025.06"},
	}}, nil
}

func (c *control) ImageGetOrCreate(_ context.Context, r *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	cmds := r.GetImage().GetDockerfileCommands()
	if len(cmds) == 0 || !strings.HasPrefix(cmds[0], "FROM ") || strings.TrimSpace(strings.TrimPrefix(cmds[0], "FROM ")) == "" {
		return nil, status.Error(codes.InvalidArgument, "the image's first command must be FROM <image>")
	}
	if r.GetBuilderVersion() == "" {
		return nil, status.Error(codes.InvalidArgument, "no builder version")
	}
	key := strings.Join(cmds, "\n")
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	id, ok := c.s.imageKeys[key]
	if !ok {
		id = newID("im-")
		c.s.imageKeys[key] = id
		img := &image{id: id}
		if len(c.s.opts.BuildLog) == 0 {
			img.result = &pb.GenericResult{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}
		}
		c.s.images[id] = img
	}
	return &pb.ImageGetOrCreateResponse{ImageId: id, Result: c.s.images[id].result}, nil
}

func (c *control) ImageFromId(_ context.Context, r *pb.ImageFromIdRequest) (*pb.ImageFromIdResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.images[r.GetImageId()] == nil {
		// Modal's answer for an image id it does not have; its clients
		// read it as not found by the message.
		return nil, status.Errorf(codes.FailedPrecondition, "Could not find image with ID %s", r.GetImageId())
	}
	return &pb.ImageFromIdResponse{ImageId: r.GetImageId()}, nil
}

// ImageJoinStreaming sends the build's log lines after last_entry_id, then
// its result (the build succeeds).
func (c *control) ImageJoinStreaming(r *pb.ImageJoinStreamingRequest, st grpc.ServerStreamingServer[pb.ImageJoinStreamingResponse]) error {
	c.s.mu.Lock()
	img := c.s.images[r.GetImageId()]
	c.s.mu.Unlock()
	if img == nil {
		return status.Errorf(codes.NotFound, "image %s not found", r.GetImageId())
	}
	for i, line := range c.s.opts.BuildLog {
		entry := "e" + string(rune('a'+i))
		if r.GetLastEntryId() >= entry {
			continue
		}
		if err := st.Send(&pb.ImageJoinStreamingResponse{TaskLogs: []*pb.TaskLogs{{Data: line + "\n", FileDescriptor: 1}}, EntryId: entry}); err != nil {
			return err
		}
	}
	res := &pb.GenericResult{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}
	c.s.mu.Lock()
	img.result = res
	c.s.mu.Unlock()
	return st.Send(&pb.ImageJoinStreamingResponse{Result: res, Eof: true})
}

func (c *control) SecretGetOrCreate(_ context.Context, r *pb.SecretGetOrCreateRequest) (*pb.SecretGetOrCreateResponse, error) {
	if r.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL {
		return nil, status.Error(codes.Unimplemented, "modaltest: only ephemeral secrets")
	}
	id := newID("st-")
	c.s.mu.Lock()
	c.s.secrets[id] = r.GetEnvDict()
	c.s.mu.Unlock()
	return &pb.SecretGetOrCreateResponse{SecretId: id}, nil
}

func (c *control) SandboxCreate(_ context.Context, r *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	return c.s.create(r)
}

func (c *control) SandboxGetTaskId(_ context.Context, r *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[r.GetSandboxId()]
	switch {
	case sb == nil:
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	case sb.result != nil:
		return &pb.SandboxGetTaskIdResponse{TaskResult: sb.result}, nil
	case sb.polls > 0:
		sb.polls--
		return &pb.SandboxGetTaskIdResponse{}, nil
	}
	return &pb.SandboxGetTaskIdResponse{TaskId: &sb.taskID}, nil
}

func (c *control) TaskGetCommandRouterAccess(_ context.Context, r *pb.TaskGetCommandRouterAccessRequest) (*pb.TaskGetCommandRouterAccessResponse, error) {
	c.s.mu.Lock()
	sb := c.s.tasks[r.GetTaskId()]
	c.s.mu.Unlock()
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "task %s not found", r.GetTaskId())
	}
	if sb.finished() {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s has finished", r.GetTaskId())
	}
	return &pb.TaskGetCommandRouterAccessResponse{
		Jwt: c.s.issue(r.GetTaskId(), c.s.opts.RouterTTL),
		Url: "https://" + c.s.lis.Addr().String(),
	}, nil
}

// SandboxWait answers the sandbox's result, waiting up to timeout seconds
// (at most WaitLimit) for one.
func (c *control) SandboxWait(ctx context.Context, r *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	c.s.mu.Lock()
	sb := c.s.sandboxes[r.GetSandboxId()]
	c.s.mu.Unlock()
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	wait := min(time.Duration(float64(r.GetTimeout())*float64(time.Second)), c.s.opts.WaitLimit)
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-sb.done:
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return &pb.SandboxWaitResponse{Result: sb.result}, nil
}

func (c *control) SandboxTerminate(_ context.Context, r *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	c.s.mu.Lock()
	sb := c.s.sandboxes[r.GetSandboxId()]
	var existing *pb.GenericResult
	if sb != nil {
		existing = sb.result
	}
	c.s.mu.Unlock()
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	c.s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, "")
	return &pb.SandboxTerminateResponse{ExistingResult: existing}, nil
}

// SandboxList answers the sandboxes of an app that carry every tag asked
// for, newest first, created before before_timestamp when it is set, one
// page at a time.
func (c *control) SandboxList(_ context.Context, r *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*sandbox
	for _, sb := range s.sandboxes {
		switch {
		case r.GetAppId() != "" && sb.appID != r.GetAppId(),
			sb.env != r.GetEnvironmentName(),
			sb.result != nil && !r.GetIncludeFinished(),
			r.GetBeforeTimestamp() > 0 && sb.createdAt >= r.GetBeforeTimestamp(),
			!hasTags(sb.tags, r.GetTags()):
			continue
		}
		match = append(match, sb)
	}
	slices.SortFunc(match, func(a, b *sandbox) int {
		switch {
		case a.createdAt > b.createdAt:
			return -1
		case a.createdAt < b.createdAt:
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	resp := &pb.SandboxListResponse{}
	for _, sb := range match[:min(len(match), s.opts.PageSize)] {
		resp.Sandboxes = append(resp.Sandboxes, sb.info())
	}
	return resp, nil
}

func hasTags(have map[string]string, want []*pb.SandboxTag) bool {
	for _, t := range want {
		if v, ok := have[t.GetTagName()]; !ok || v != t.GetTagValue() {
			return false
		}
	}
	return true
}

func (c *control) SandboxTagsSet(_ context.Context, r *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	tags, err := tagsOf(r.GetTags())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb := c.s.sandboxes[r.GetSandboxId()]
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	sb.tags = tags
	return &emptypb.Empty{}, nil
}

func (c *control) SandboxTagsGet(_ context.Context, r *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb := c.s.sandboxes[r.GetSandboxId()]
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	return &pb.SandboxTagsGetResponse{Tags: sb.info().GetTags()}, nil
}

// SandboxGetTunnels answers a tunnel per open port: the fake's processes
// listen on this machine, so a tunnel is 127.0.0.1 and the port itself.
func (c *control) SandboxGetTunnels(_ context.Context, r *pb.SandboxGetTunnelsRequest) (*pb.SandboxGetTunnelsResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sb := c.s.sandboxes[r.GetSandboxId()]
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetSandboxId())
	}
	if sb.result != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "sandbox %s has finished", sb.id)
	}
	return &pb.SandboxGetTunnelsResponse{Tunnels: sb.tunnels()}, nil
}

func tagsOf(ts []*pb.SandboxTag) (map[string]string, error) {
	m := map[string]string{}
	for _, t := range ts {
		if t.GetTagName() == "" {
			return nil, status.Error(codes.InvalidArgument, "a tag has an empty name")
		}
		m[t.GetTagName()] = t.GetTagValue()
	}
	return m, nil
}
