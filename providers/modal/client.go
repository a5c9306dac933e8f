package modal

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// What boxfs says it is on every control-plane call, in the headers
// Modal's own Go client (libmodal, modal-go) sends.
//
// boxfs's wire format follows Modal's libmodal clients at release 0.11.1:
// its .proto subset is checked against the protobuf code of modal-js 0.11.1
// (sdkwire.Package), and modal-go v0.11.1, the Go release of the same
// version, sends these headers with these values. They move together, when
// boxfs is checked against a newer release.
const (
	// clientType is CLIENT_TYPE_LIBMODAL_GO: boxfs is a Go client of the
	// protocol modal-go speaks.
	clientType = "9"
	// clientVersion is the protocol level, not a release of boxfs or of an
	// SDK: the version of Modal's Python client whose behaviour the client
	// matches, by which Modal's server judges how old a client is. Every
	// libmodal client sends "1.0.0" (modal-go and modal-js through 0.11.1),
	// so boxfs, whose calls are theirs, sends the same.
	clientVersion = "1.0.0"
	// libmodalVersion is the libmodal release boxfs's wire format follows
	// and was checked against, marked as boxfs's.
	libmodalVersion = "modal-go/0.11.1+boxfs"
)

// Call bounds and retry policy, as Modal's own clients have them.
const (
	maxMessage   = 100 << 20
	unaryRetries = 3
	retryBase    = 100 * time.Millisecond
	retryMax     = time.Second
	authTokenTTL = 20 * time.Minute // assumed when a token has no exp

	// A throttled call (one whose error carries the delay Modal asks
	// for, serverDelay) is sent again after that delay, as often as Modal
	// asks, as Modal's Go client does, unless the wait would take the call
	// past the caller's deadline or past the profile's maxThrottleWait
	// (default throttleBudget) since it started: then it fails at once,
	// Unavailable.
	throttleBudget  = 2 * time.Minute
	authTokenMethod = "/modal.client.ModalClient/AuthTokenGet"
)

// client is a connection to Modal's control plane with its credentials: it
// sends the token id and secret and a short-lived auth token (fetched with
// AuthTokenGet, renewed halfway through its life) on every call, and
// retries what Modal's clients retry under one idempotency key.
type client struct {
	conn      *grpc.ClientConn
	api       pb.ModalClientClient
	prof      profile
	host      string // the server's host name, sent as x-modal-host
	plaintext bool   // the server is on loopback: routers are reached in plaintext too
	log       *slog.Logger
	// sleep waits between attempts of a call, and now reads the clock
	// that judges how long a call has taken; tests replace both.
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time

	mu        sync.Mutex
	token     string
	expires   time.Time
	refreshAt time.Time
}

func dial(op string, prof profile, log *slog.Logger) (*client, error) {
	target, plaintext, err := serverTarget(op, prof.serverURL)
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(target)
	c := &client{prof: prof, host: host, plaintext: plaintext, log: log, sleep: sleep, now: time.Now}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(transportCreds(plaintext)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithUnaryInterceptor(c.unary),
		grpc.WithStreamInterceptor(c.stream),
	)
	if err != nil {
		return nil, wrap(op, "", err)
	}
	c.conn, c.api = conn, pb.NewModalClientClient(conn)
	return c, nil
}

func transportCreds(plaintext bool) credentials.TransportCredentials {
	if plaintext {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(nil)
}

func (c *client) close() error { return c.conn.Close() }

// headers are the metadata of one control-plane call.
func (c *client) headers(ctx context.Context, method string) ([]string, error) {
	md := []string{
		"x-modal-client-type", clientType,
		"x-modal-client-version", clientVersion,
		"x-modal-libmodal-version", libmodalVersion,
		"x-modal-token-id", c.prof.tokenID,
		"x-modal-token-secret", c.prof.tokenSecret,
		"x-modal-host", c.host,
	}
	if method != authTokenMethod {
		tok, err := c.authToken(ctx)
		if err != nil {
			return nil, err
		}
		md = append(md, "x-modal-auth-token", tok)
	}
	return md, nil
}

// unary sends a control-plane call: again, under the same idempotency key,
// after a transient failure (unaryRetries times, backing off from
// retryBase) or after the delay Modal asks for when it throttles the call
// (serverDelay; see throttleBudget). Attempts are counted as Modal's Go
// client counts them, in x-retry-attempt and x-throttle-retry-attempt: a
// throttled attempt does not use up a retry.
func (c *client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	key := newUUID()
	delay := retryBase
	start := c.now()
	retries, throttles := 0, 0
	for {
		md, err := c.headers(ctx, method)
		if err != nil {
			return err
		}
		md = append(md, "x-idempotency-key", key, "x-retry-attempt", strconv.Itoa(retries), "x-throttle-retry-attempt", strconv.Itoa(throttles))
		since := strconv.FormatFloat(c.now().Sub(start).Seconds(), 'f', 3, 64)
		if retries > 0 {
			md = append(md, "x-retry-delay", since)
		}
		if throttles > 0 {
			md = append(md, "x-throttle-retry-delay", since)
		}
		err = invoker(metadata.AppendToOutgoingContext(ctx, md...), method, req, reply, cc, opts...)
		if err == nil || ctx.Err() != nil {
			return err
		}
		wait, throttled := serverDelay(err)
		switch {
		case throttled && c.prof.maxThrottleWait > 0:
			if c.now().Sub(start)+wait >= c.prof.maxThrottleWait || c.pastDeadline(ctx, wait) {
				return err
			}
			throttles++
			c.log.Debug("modal: throttled; waiting as asked", "method", method, "wait", wait, "throttles", throttles)
		case !retryable(err) || retries >= unaryRetries:
			return err
		default:
			retries++
			wait = delay
			delay = min(2*delay, retryMax)
			c.log.Debug("modal: retrying a call", "method", method, "attempt", retries, "err", err)
		}
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// pastDeadline reports whether ctx ends within d.
func (c *client) pastDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Sub(c.now()) < d
}

func (c *client) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	md, err := c.headers(ctx, method)
	if err != nil {
		return nil, err
	}
	return streamer(metadata.AppendToOutgoingContext(ctx, md...), desc, cc, method, opts...)
}

// authToken returns the auth token, fetching one when there is none or it
// is past its refresh point. When a refresh fails for a reason other than
// the credentials, the old token serves while it has not expired.
func (c *client) authToken(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.token != "" && now.Before(c.refreshAt) {
		return c.token, nil
	}
	resp, err := c.api.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
	if err == nil && resp.GetToken() == "" {
		err = status.Error(codes.Internal, "AuthTokenGet answered no token")
	}
	if err != nil {
		denied := status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied
		if c.token != "" && now.Before(c.expires) && !denied {
			c.log.Warn("modal: renewing the auth token failed; using the current one", "err", err)
			return c.token, nil
		}
		return "", err
	}
	c.token = resp.GetToken()
	exp, ok := jwtExpiry(c.token)
	if !ok {
		exp = now.Add(authTokenTTL)
	}
	c.expires = exp
	life := max(exp.Sub(now), 0)
	c.refreshAt = now.Add(time.Duration(float64(life) * (0.5 + 0.1*rand.Float64())))
	return c.token, nil
}

// jwtExpiry reads the exp claim of a JWT without checking its signature (the
// issuer checks it; a client only needs to know when to renew).
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp float64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(claims.Exp), 0), true
}

// newUUID returns a random (version 4) UUID, the form Modal's clients give
// idempotency keys and exec ids.
func newUUID() string {
	var b [16]byte
	crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
