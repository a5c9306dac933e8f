// Package modaltest serves a fake of Modal's gRPC API in process: the
// control plane (modal.client.ModalClient) and the command router
// (modal.task_command_router.TaskCommandRouter) on one grpc.Server on
// 127.0.0.1, with the vendor's service, method and message names and field
// numbers (boxfs's subset of them, checked against Modal's published SDK).
//
// # What it models
//
// Auth as Modal's clients meet it: every control-plane call carries
// x-modal-token-id and x-modal-token-secret; AuthTokenGet hands out a JWT
// with an exp claim, which every other unary call must carry as
// x-modal-auth-token until it expires (a stream, such as
// ImageJoinStreaming, may come without one, as Modal's Go client sends
// it); a router call carries
// "authorization: Bearer <jwt>" with the JWT TaskGetCommandRouterAccess
// gave for its task. A retried call with the same x-idempotency-key is
// answered as the first one was. Apps, environments, images (a build
// followed through ImageJoinStreaming when Options.BuildLog is set),
// ephemeral secrets, and sandboxes: created (timeout_secs, default 300,
// ends them with TIMEOUT), scheduled after Options.TaskIDPolls reads of
// SandboxGetTaskId, waited on, terminated (TERMINATED), listed by tags
// (all must match) newest first in pages of Options.PageSize paged by
// before_timestamp, tagged, tunnelled (a port's tunnel is 127.0.0.1 and
// the port itself). The router snapshots a task's filesystem (its
// sandbox's own directory, copied) into an image that new sandboxes start
// from, starts execs, streams stdout and stderr
// from any offset (stderr may be joined to stdout or discarded), takes
// stdin writes at an offset (a byte already written is not written again;
// a gap is refused) with an explicit EOF, answers waits (a wait longer than
// Options.WaitLimit is DeadlineExceeded) and polls, and ends an exec at its
// timeout_secs with exit 124.
//
// # What is real
//
// An exec's argv runs for real on this machine, as the test's user, in the
// sandbox's working directory (the definition's workdir when it exists,
// else a temporary directory of its own, also its HOME), with a fixed PATH,
// the sandbox's secrets, the exec's env and no variable of the host's.
// There is no isolation: a sandbox's paths are this machine's. Every
// process carries MODAL_SANDBOX_ID; when a sandbox ends, each process that
// does is killed.
//
// # Knobs
//
// Options inject the vendor's awkward moments: a task id not ready for N
// polls, stdio streams that drop after some bytes (once per stream), waits
// that time out, the router answering Unauthenticated once per task, short
// token lives, ResourceExhausted creates, throttled calls (answered
// ResourceExhausted with the delay to wait in Modal's RPCRetryPolicy
// detail, where Modal puts it and its clients read it),
// creates whose answers are lost, and Unavailable answers on every nth
// control-plane call, before or after it is handled.
package modaltest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// Options configure a fake.
type Options struct {
	// TokenID and TokenSecret are the only credentials the fake accepts.
	// Defaults "ak-modaltest" and "as-modaltest".
	TokenID, TokenSecret string
	// AuthTokenTTL and RouterTTL are the lives of the JWTs the fake hands
	// out. Default an hour each.
	AuthTokenTTL, RouterTTL time.Duration
	// TaskIDPolls is how many SandboxGetTaskId calls of a new sandbox
	// answer no task id yet.
	TaskIDPolls int
	// PageSize is the most sandboxes a SandboxList page holds. Default 3.
	PageSize int
	// WaitLimit is how long TaskExecWait and SandboxWait block before
	// TaskExecWait answers DeadlineExceeded (SandboxWait: no result).
	// Default 55s.
	WaitLimit time.Duration
	// DropStreamAfter breaks a stdio stream with Unavailable once it has
	// sent this many bytes, once per exec and stream; 0 never.
	DropStreamAfter int
	// RouterUnauthenticatedOnce answers the first router call of every
	// task with Unauthenticated, as a router whose JWT key rotated would.
	RouterUnauthenticatedOnce bool
	// ExhaustedCreates answers the first this many SandboxCreate calls
	// with ResourceExhausted.
	ExhaustedCreates int
	// LostCreates handles the first this many SandboxCreate calls and then
	// answers Unavailable, as if the answer were lost, the same key or not:
	// a create whose every retry is lost.
	LostCreates int
	// ThrottledCalls answers the first this many control-plane calls
	// (AuthTokenGet left out) with ResourceExhausted carrying a
	// modal.client.RPCRetryPolicy detail whose retry_after_secs is
	// ThrottleDelay, the time after which the call may come again: Modal's
	// throttling answer, as its own clients read it.
	ThrottledCalls int
	ThrottleDelay  time.Duration
	// FaultEvery answers every nth control-plane call (AuthTokenGet and
	// streams left out) with Unavailable: alternately before the call is
	// handled and after (its answer lost). 0: never.
	FaultEvery int
	// BuildLog makes a new image's build run: ImageGetOrCreate answers
	// without a result and ImageJoinStreaming sends these lines, then the
	// result.
	BuildLog []string
}

// Request is one call the fake answered.
type Request struct {
	Method string
	MD     metadata.MD
	Code   codes.Code
}

// Server is a running fake.
type Server struct {
	opts Options
	lis  net.Listener
	srv  *grpc.Server

	mu        sync.Mutex
	apps      map[string]string // name -> id
	images    map[string]*image // id ->
	snapshots map[string]string // snapshot_id of a TaskSnapshotFilesystem -> its image id
	imageKeys map[string]string // dockerfile -> id
	secrets   map[string]map[string]string
	sandboxes map[string]*sandbox
	tasks     map[string]*sandbox
	tokens    map[string]token
	idem      map[string]any // idempotency key -> answer
	calls     int
	throttled int // calls answered ResourceExhausted with an RPCRetryPolicy
	creates   int
	lost      int
	unauthed  map[string]bool // tasks that had their Unauthenticated
	requests  []Request
	closed    bool
}

type token struct {
	exp  time.Time
	task string // "" for an auth token
}

type image struct {
	id     string
	result *pb.GenericResult
	dir    string // a filesystem snapshot's copy of the sandbox's directory; "" for a registry image
}

// New starts a fake on a free port of 127.0.0.1.
func New(opts Options) (*Server, error) {
	if opts.TokenID == "" {
		opts.TokenID = "ak-modaltest"
	}
	if opts.TokenSecret == "" {
		opts.TokenSecret = "as-modaltest"
	}
	if opts.AuthTokenTTL == 0 {
		opts.AuthTokenTTL = time.Hour
	}
	if opts.RouterTTL == 0 {
		opts.RouterTTL = time.Hour
	}
	if opts.PageSize == 0 {
		opts.PageSize = 3
	}
	if opts.WaitLimit == 0 {
		opts.WaitLimit = 55 * time.Second
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts, lis: lis,
		apps: map[string]string{}, images: map[string]*image{}, imageKeys: map[string]string{}, snapshots: map[string]string{},
		secrets: map[string]map[string]string{}, sandboxes: map[string]*sandbox{}, tasks: map[string]*sandbox{},
		tokens: map[string]token{}, idem: map[string]any{}, unauthed: map[string]bool{},
	}
	s.srv = grpc.NewServer(
		grpc.MaxRecvMsgSize(100<<20), grpc.MaxSendMsgSize(100<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.stream),
	)
	pb.RegisterModalClientServer(s.srv, &control{s: s})
	pb.RegisterTaskCommandRouterServer(s.srv, &routerService{s: s})
	go s.srv.Serve(lis)
	return s, nil
}

// URL is the control plane's address, as MODAL_SERVER_URL takes it.
func (s *Server) URL() string { return "http://" + s.lis.Addr().String() }

// TokenID returns the token id the fake accepts.
func (s *Server) TokenID() string { return s.opts.TokenID }

// TokenSecret returns the token secret the fake accepts.
func (s *Server) TokenSecret() string { return s.opts.TokenSecret }

// Close ends every sandbox (killing its processes) and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	var all []*sandbox
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	for _, sb := range all {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, "the fake closed")
		os.RemoveAll(sb.dir)
	}
	s.srv.Stop()
}

// Unreachable stops answering, as when the network to Modal fails: the
// listener and every connection close, while the sandboxes and their
// processes stay until Close.
func (s *Server) Unreachable() { s.srv.Stop() }

// SandboxIDs returns the ids of the sandboxes that run, sorted.
func (s *Server) SandboxIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, sb := range s.sandboxes {
		if sb.result == nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Definition returns a copy of the sandbox definition a SandboxCreate of
// sandbox id sent, or nil for an id the fake did not make.
func (s *Server) Definition(id string) *pb.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return nil
	}
	return proto.Clone(sb.def).(*pb.Sandbox)
}

// Expire ends a sandbox now as its timeout would (result TIMEOUT).
func (s *Server) Expire(id string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb != nil {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, "")
	}
}

// Requests returns the calls answered so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Leaks returns the calls whose metadata or method carried secret
// anywhere but where Modal's clients send credentials.
func (s *Server) Leaks(secret string) []string {
	var out []string
	for _, r := range s.Requests() {
		for k, vs := range r.MD {
			if k == "x-modal-token-secret" || k == "x-modal-token-id" {
				continue
			}
			for _, v := range vs {
				if strings.Contains(v, secret) {
					out = append(out, r.Method+" "+k)
				}
			}
		}
	}
	return out
}

func (s *Server) record(method string, md metadata.MD, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) < 100000 {
		s.requests = append(s.requests, Request{Method: method, MD: md.Copy(), Code: status.Code(err)})
	}
}

const (
	controlPrefix = "/modal.client.ModalClient/"
	routerPrefix  = "/modal.task_command_router.TaskCommandRouter/"
	authTokenGet  = controlPrefix + "AuthTokenGet"
)

// unary checks credentials, injects the control plane's faults, and
// answers a retried call (same idempotency key) as it answered the first.
func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	defer func() { s.record(info.FullMethod, md, err) }()
	if err := s.authorize(info.FullMethod, md, req, false); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(info.FullMethod, controlPrefix) || info.FullMethod == authTokenGet {
		return handler(ctx, req)
	}
	key := first(md.Get("x-idempotency-key"))
	if err := s.throttle(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	lose := info.FullMethod == controlPrefix+"SandboxCreate" && s.lost < s.opts.LostCreates
	if lose {
		s.lost++
		s.mu.Unlock()
		if _, err := handler(ctx, req); err != nil {
			return nil, err
		}
		return nil, status.Error(codes.Unavailable, "modaltest: the create's answer was lost (injected)")
	}
	s.calls++
	n := s.calls
	prev, seen := s.idem[key]
	s.mu.Unlock()
	if seen && key != "" {
		return prev, nil
	}
	fault := s.opts.FaultEvery > 0 && n%s.opts.FaultEvery == 0
	if fault && (n/s.opts.FaultEvery)%2 == 1 {
		return nil, status.Error(codes.Unavailable, "modaltest: injected fault before the call")
	}
	resp, err = handler(ctx, req)
	if err == nil && key != "" {
		s.mu.Lock()
		s.idem[key] = resp
		s.mu.Unlock()
	}
	if fault {
		return nil, status.Error(codes.Unavailable, "modaltest: injected fault after the call (its answer lost)")
	}
	return resp, err
}

// throttle answers ResourceExhausted with an RPCRetryPolicy while
// Options.ThrottledCalls lasts.
func (s *Server) throttle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.throttled >= s.opts.ThrottledCalls {
		return nil
	}
	s.throttled++
	st, err := status.New(codes.ResourceExhausted, "modaltest: rate limited (injected)").
		WithDetails(&pb.RPCRetryPolicy{RetryAfterSecs: float32(s.opts.ThrottleDelay.Seconds())})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return st.Err()
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	md, _ := metadata.FromIncomingContext(ss.Context())
	defer func() { s.record(info.FullMethod, md, err) }()
	// A stream's request arrives with its first message: authorize there.
	return handler(srv, &authStream{ServerStream: ss, s: s, method: info.FullMethod, md: md})
}

type authStream struct {
	grpc.ServerStream
	s      *Server
	method string
	md     metadata.MD
	done   bool
}

func (a *authStream) RecvMsg(m any) error {
	if err := a.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !a.done {
		a.done = true
		return a.s.authorize(a.method, a.md, m, true)
	}
	return nil
}

// authorize checks a call's credentials: the token pair and an auth token
// on the control plane, the task's JWT on the router. A streaming
// control-plane call (ImageJoinStreaming) may come with the token pair
// alone: Modal's own Go client sends its auth token on unary calls only,
// and Modal serves its image builds all the same. An auth token that is
// sent must be valid.
func (s *Server) authorize(method string, md metadata.MD, req any, stream bool) error {
	if strings.HasPrefix(method, routerPrefix) {
		task := taskOf(req)
		jwt, ok := strings.CutPrefix(first(md.Get("authorization")), "Bearer ")
		s.mu.Lock()
		defer s.mu.Unlock()
		t, known := s.tokens[jwt]
		switch {
		case !ok || !known || t.task != task:
			return status.Error(codes.Unauthenticated, "modaltest: no valid router token for this task")
		case time.Now().After(t.exp):
			return status.Error(codes.Unauthenticated, "modaltest: router token expired")
		case s.opts.RouterUnauthenticatedOnce && !s.unauthed[task]:
			s.unauthed[task] = true
			return status.Error(codes.Unauthenticated, "modaltest: router token rejected once (injected)")
		}
		return nil
	}
	if first(md.Get("x-modal-token-id")) != s.opts.TokenID || first(md.Get("x-modal-token-secret")) != s.opts.TokenSecret {
		return status.Error(codes.Unauthenticated, "modaltest: invalid token id or secret")
	}
	if first(md.Get("x-modal-client-type")) == "" || first(md.Get("x-modal-client-version")) == "" {
		return status.Error(codes.InvalidArgument, "modaltest: no x-modal-client-type or x-modal-client-version")
	}
	if method == authTokenGet {
		return nil
	}
	tok := md.Get("x-modal-auth-token")
	if stream && len(tok) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, known := s.tokens[first(tok)]
	if !known || t.task != "" || time.Now().After(t.exp) {
		return status.Error(codes.Unauthenticated, "modaltest: missing or expired x-modal-auth-token")
	}
	return nil
}

// taskOf returns the task id a router request names.
func taskOf(req any) string {
	if r, ok := req.(interface{ GetTaskId() string }); ok {
		return r.GetTaskId()
	}
	return ""
}

// issue makes a JWT (unsigned, as clients never check it) with an exp
// claim, and remembers it.
func (s *Server) issue(task string, ttl time.Duration) string {
	exp := time.Now().Add(ttl)
	claims, _ := json.Marshal(map[string]any{"exp": exp.Unix(), "sub": first([]string{task, "auth"}), "jti": newID("")})
	enc := base64.RawURLEncoding
	tok := enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString(claims) + ".modaltest"
	s.mu.Lock()
	s.tokens[tok] = token{exp: exp, task: task}
	s.mu.Unlock()
	return tok
}

func first(vs []string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// newID returns prefix and 22 random letters and digits, the shape of
// Modal's object ids.
func newID(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	var b [22]byte
	randRead(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b[:])
}

var errNotRunning = fmt.Errorf("modaltest: the sandbox is not running")
