package e2b

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem/filesystemconnect"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/process/processconnect"
)

// The largest message the provider takes from envd, which runs in the
// box and is as untrusted as the box: envd sends output in chunks of at
// most 32 KiB, and a directory listing of a large tree stays well under
// the second bound.
const (
	maxProcessMessage    = 4 << 20
	maxFilesystemMessage = 64 << 20
)

// envdClient speaks to one sandbox's envd: Connect (binary protobuf, which
// envd's connect-go server takes as well as the SDK's JSON) and its HTTP
// endpoints.
type envdClient struct {
	b    *Box
	hc   *http.Client
	base string
	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
}

// envdURL is envd's address for sandbox id on domain (nil or "": the
// provider's): the sandbox_url option's when set; on E2B's own domains
// one host for every sandbox, told apart by the E2b-Sandbox-Id header, as
// the SDK does; else the sandbox's own host.
func (p *Provider) envdURL(id string, domain *string) *url.URL {
	d := p.domain
	if domain != nil && *domain != "" {
		d = *domain
	}
	switch {
	case p.sandboxURL != nil:
		return p.sandboxURL
	case slices.Contains(supportedDomains, d):
		return &url.URL{Scheme: "https", Host: "sandbox." + d}
	}
	return &url.URL{Scheme: "https", Host: strconv.Itoa(envdPort) + "-" + id + "." + d}
}

// newEnvd makes b's envd client. Its requests are built on the address
// the provider's domain gives; envdTransport sends each to the sandbox's
// own address, known only once the token is (a listed box's domain).
func (p *Provider) newEnvd(b *Box) *envdClient {
	base := p.envdURL(b.id, nil).String()
	hc := &http.Client{Transport: envdTransport{b: b, user: p.user, rt: p.hc.Transport}}
	return &envdClient{
		b: b, hc: hc, base: base,
		proc: processconnect.NewProcessClient(hc, base, connect.WithReadMaxBytes(maxProcessMessage)),
		fs:   filesystemconnect.NewFilesystemClient(hc, base, connect.WithReadMaxBytes(maxFilesystemMessage)),
	}
}

// envdTransport adds what every envd request carries: the sandbox's
// access token, the routing headers of E2B's proxy and the user.
type envdTransport struct {
	b    *Box
	user string
	rt   http.RoundTripper
}

func (t envdTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, u, err := t.b.envdAccess(req.Context())
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	req = req.Clone(req.Context())
	// The sandbox's own address: its path is the one the client was built
	// on (the sandbox_url option's, or none), so only the host changes.
	req.URL.Scheme, req.URL.Host, req.Host = u.Scheme, u.Host, u.Host
	req.Header.Set("X-Access-Token", tok)
	req.Header.Set("E2b-Sandbox-Id", t.b.id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(envdPort))
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(t.user+":")))
	req.Header.Set("User-Agent", userAgent)
	resp, err := t.rt.RoundTrip(req)
	if pr, ok := req.Context().Value(probeKey{}).(*statusProbe); ok && err == nil {
		pr.status.Store(int32(resp.StatusCode))
	}
	return resp, err
}

// statusProbe records the HTTP status a call was answered with, for the
// calls that may be sent again only when E2B said it did not act on them.
type statusProbe struct{ status atomic.Int32 }

type probeKey struct{}

func withProbe(ctx context.Context) (context.Context, *statusProbe) {
	pr := &statusProbe{}
	return context.WithValue(ctx, probeKey{}, pr), pr
}

// unhandled reports whether the answer says the request was not acted
// on: rate limited, or E2B's proxy could not reach the sandbox or had no
// room. No answer, or a timeout, leaves it open.
func (pr *statusProbe) unhandled() bool {
	switch pr.status.Load() {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// unary makes one envd call, again while E2B answers busy; an answer that
// the sandbox is not there becomes Gone.
func unary[Req, Res any](ctx context.Context, b *Box, op string, fn func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req) (*Res, error) {
	if err := b.gone(op); err != nil {
		return nil, err
	}
	for n := 0; ; n++ {
		resp, err := fn(ctx, connect.NewRequest(msg))
		if err == nil {
			return resp.Msg, nil
		}
		if !retryable(err) || n+1 >= maxAttempts || b.away(ctx) {
			return nil, b.envdError(ctx, op, err)
		}
		if berr := backoff(ctx, n, err); berr != nil {
			return nil, b.envdError(ctx, op, err)
		}
	}
}

// envdError classifies a failed envd call that E2B's proxy may have
// answered for a sandbox it could not reach: one the control plane no
// longer knows is Gone; one that is paused is Refused, for it runs again
// once resumed (as every provider's suspended box answers).
func (b *Box) envdError(ctx context.Context, op string, err error) *providers.Error {
	e := wrap(op, b.id, err)
	e.Err = b.scrubbed(e.Err)
	switch e.Code {
	case providers.Unavailable, providers.TransportLost, providers.Unknown:
		switch b.life(context.WithoutCancel(ctx)) {
		case lifeEnded:
			e.Code = providers.Gone
		case lifePaused:
			e.Code = providers.Refused
			e.Err = fmt.Errorf("box is paused (resume it): %w", e.Err)
		}
	}
	return e
}

// makeDir makes a directory and its parents; one that exists is Exists.
func (c *envdClient) makeDir(ctx context.Context, p string) error {
	_, err := unary(ctx, c.b, "e2b.MakeDir", c.fs.MakeDir, &filesystem.MakeDirRequest{Path: p})
	if err != nil {
		return providers.E(0, "e2b.MakeDir", err).WithPath(p)
	}
	return nil
}
