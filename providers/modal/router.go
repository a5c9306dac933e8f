package modal

import (
	"context"
	"net"
	"net/url"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// Router call policy, as Modal's clients have it.
const (
	routerRetries    = 10
	routerRetryBase  = 10 * time.Millisecond
	jwtRenewMargin   = 30 * time.Second // renew a router JWT this long before it expires
	waitCallDeadline = 60 * time.Second // one TaskExecWait call; the wait loops across it
	deadBound        = 2 * time.Minute  // of nothing but failures before a command is lost
)

// router is a connection to one task's command router (the worker that runs
// the sandbox), with the short-lived JWT the control plane hands out for
// it. The JWT is renewed before it expires and after an Unauthenticated
// answer; the router's URL may change with it.
type router struct {
	c      *client
	taskID string

	mu   sync.Mutex
	conn *grpc.ClientConn
	api  pb.TaskCommandRouterClient
	url  string
	jwt  string
	exp  time.Time // zero: unknown
}

// newRouter asks the control plane for the task's router access and dials it.
func newRouter(ctx context.Context, c *client, taskID string) (*router, error) {
	r := &router{c: c, taskID: taskID}
	if err := r.renew(ctx, ""); err != nil {
		return nil, err
	}
	return r, nil
}

// renew fetches new access unless another caller already replaced stale
// (the JWT the caller saw fail, or "" for the first).
func (r *router) renew(ctx context.Context, stale string) error {
	const op = "modal.router"
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jwt != stale && r.jwt != "" && (r.exp.IsZero() || time.Until(r.exp) > jwtRenewMargin) {
		return nil
	}
	resp, err := r.c.api.TaskGetCommandRouterAccess(ctx, &pb.TaskGetCommandRouterAccessRequest{TaskId: r.taskID})
	if err != nil {
		return err
	}
	if resp.GetUrl() != r.url || r.conn == nil {
		conn, err := r.dial(op, resp.GetUrl())
		if err != nil {
			return err
		}
		if r.conn != nil {
			r.c.log.Warn("modal: the task's command router moved", "task", r.taskID, "url", resp.GetUrl())
			old := r.conn
			time.AfterFunc(time.Minute, func() { old.Close() }) // let calls on it end
		}
		r.conn, r.api, r.url = conn, pb.NewTaskCommandRouterClient(conn), resp.GetUrl()
	}
	r.jwt = resp.GetJwt()
	r.exp, _ = jwtExpiry(r.jwt)
	return nil
}

// dial connects to a router URL. It must be https; the connection is
// plaintext only when the control plane itself is on loopback and so is
// the router (a local fake), as Modal's clients do.
func (r *router) dial(op, raw string) (*grpc.ClientConn, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, providers.Errorf(providers.Unknown, op, "the command router URL %q is not https", raw)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	plaintext := r.c.plaintext && isLoopback(u.Hostname())
	conn, err := grpc.NewClient(net.JoinHostPort(u.Hostname(), port),
		grpc.WithTransportCredentials(transportCreds(plaintext)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	if err != nil {
		return nil, wrap(op, "", err)
	}
	return conn, nil
}

// access returns the stub and a context carrying the JWT, renewing a JWT
// that is about to expire first.
func (r *router) access(ctx context.Context) (pb.TaskCommandRouterClient, context.Context, string, error) {
	r.mu.Lock()
	api, jwt, exp := r.api, r.jwt, r.exp
	r.mu.Unlock()
	if !exp.IsZero() && time.Until(exp) < jwtRenewMargin {
		if err := r.renew(ctx, jwt); err != nil {
			return nil, nil, "", err
		}
		r.mu.Lock()
		api, jwt = r.api, r.jwt
		r.mu.Unlock()
	}
	return api, metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+jwt), jwt, nil
}

// call runs one unary router call: after Unauthenticated it renews the JWT
// and tries once more, and it retries transient failures (10 times, from
// 10 ms, doubling). Calls are idempotent: exec ids and stdin offsets make
// them so.
func (r *router) call(ctx context.Context, fn func(ctx context.Context, api pb.TaskCommandRouterClient) error) error {
	delay := routerRetryBase
	authRetried := false
	for attempt := 0; ; attempt++ {
		api, cctx, jwt, err := r.access(ctx)
		if err != nil {
			return err
		}
		err = fn(cctx, api)
		switch {
		case err == nil:
			return nil
		case status.Code(err) == codes.Unauthenticated && !authRetried:
			authRetried = true
			if rerr := r.renew(ctx, jwt); rerr != nil {
				return rerr
			}
			continue
		case !retryable(err) || attempt >= routerRetries || ctx.Err() != nil:
			return err
		}
		if err := sleep(ctx, delay); err != nil {
			return err
		}
		delay *= 2
	}
}

func (r *router) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}
