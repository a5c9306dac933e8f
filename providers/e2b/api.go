package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/boxfs/boxfs/providers"
)

// apiError is a failed answer of the control plane or of envd's HTTP
// endpoints: the status and E2B's {code, message} body.
type apiError struct {
	Status     int
	Message    string
	retryAfter time.Duration
}

func (e *apiError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// readAPIError reads a failed answer; the body is E2B's {code, message}
// when it parses, else its first bytes, scrubbed of secrets and of what
// looks like a credential (see scrub).
func readAPIError(resp *http.Response, secrets ...string) *apiError {
	e := &apiError{Status: resp.StatusCode}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var msg struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &msg) == nil && msg.Message != "" {
		e.Message = msg.Message
	} else {
		e.Message = string(bytes.TrimSpace(body))
	}
	e.Message = scrub(e.Message, secrets...)
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.retryAfter = time.Duration(s) * time.Second
	}
	return e
}

// errorCode classifies a failure of E2B (its REST answers, envd's Connect
// codes, the transport). It is the one place vendor errors become codes;
// it never looks at error text.
func errorCode(err error) providers.Code {
	var ae *apiError
	var ce *connect.Error
	var ne net.Error
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		return providers.Aborted
	case errors.Is(err, context.DeadlineExceeded):
		return providers.Timeout
	case errors.As(err, &ae):
		switch ae.Status {
		case http.StatusBadRequest:
			return providers.Invalid
		case http.StatusUnauthorized:
			return providers.Auth
		case http.StatusForbidden:
			return providers.Permission
		case http.StatusNotFound:
			return providers.NotFound
		case http.StatusConflict:
			return providers.Refused
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return providers.Unavailable
		case http.StatusInsufficientStorage:
			return providers.TooLarge
		}
		return providers.Unknown
	case errors.As(err, &ce):
		return connectCode(ce.Code())
	case errors.Is(err, syscall.ECONNREFUSED):
		return providers.Unavailable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return providers.TransportLost
	case errors.As(err, &ne) && ne.Timeout():
		return providers.Timeout
	case errors.As(err, &ne):
		return providers.Unavailable
	}
	return providers.Unknown
}

func connectCode(c connect.Code) providers.Code {
	switch c {
	case connect.CodeCanceled:
		return providers.Aborted
	case connect.CodeDeadlineExceeded:
		return providers.Timeout
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return providers.Invalid
	case connect.CodeNotFound:
		return providers.NotFound
	case connect.CodeAlreadyExists:
		return providers.Exists
	case connect.CodePermissionDenied:
		return providers.Permission
	case connect.CodeUnauthenticated:
		return providers.Auth
	case connect.CodeResourceExhausted, connect.CodeUnavailable:
		return providers.Unavailable
	case connect.CodeFailedPrecondition, connect.CodeAborted:
		return providers.Refused
	case connect.CodeUnimplemented:
		return providers.Unsupported
	}
	return providers.Unknown
}

// wrap makes err a *providers.Error of op, classified by errorCode; an
// error that already is one keeps its code.
func wrap(op, box string, err error) *providers.Error {
	return providers.Classify(op, box, err, errorCode)
}

// retryable reports whether a failed call that is safe to repeat may be
// sent again: E2B or its proxy said it is busy or rate limited, or could
// not be reached.
func retryable(err error) bool { return errorCode(err) == providers.Unavailable }

// retryableOnce reports whether a failed call that is not safe to repeat
// (a create, a snapshot) may be sent again: only when E2B was not asked
// at all, because it refused the request for its rate limit (429, which
// E2B's SDK retries and nothing else) or the connection was never made.
// A 502 or 504 comes from a gateway, possibly after E2B acted.
func retryableOnce(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusTooManyRequests
	}
	return notSent(err)
}

// notSent reports whether err is a failure to connect, before anything
// of the request was sent.
func notSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// ambiguous reports whether a failed call may have been carried out
// though its answer was lost: a 5xx (E2B's gateway answers 502 or 504
// when the call outlives it), or a transport failure once the request was
// sent. The caller's own cancellation is not ambiguous: it says nothing
// of E2B.
func ambiguous(err error) bool {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.Status >= 500
	case errors.Is(err, context.Canceled), notSent(err):
		return false
	}
	return true
}

// Bounds of retrying a busy E2B.
const (
	maxAttempts = 8
	firstDelay  = 50 * time.Millisecond
	maxDelay    = 5 * time.Second
)

// backoff waits before attempt n+1 (Retry-After when E2B gave one), or
// returns ctx's error.
func backoff(ctx context.Context, n int, err error) error {
	d := firstDelay << min(n, 10)
	var ae *apiError
	if errors.As(err, &ae) && ae.retryAfter > 0 {
		d = ae.retryAfter
	}
	t := time.NewTimer(min(d, maxDelay))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// apiTimeout bounds one control-plane request, answer read included,
// whatever the caller's ctx allows: a create takes E2B a few seconds.
const apiTimeout = 2 * time.Minute

// apiClient calls the control plane.
type apiClient struct {
	hc   *http.Client
	base *url.URL
	key  string
}

// do sends a request that is safe to repeat, again while E2B answers
// busy, and decodes a successful JSON answer into out (nil: dropped). It
// returns the answer's headers.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body, out any) (http.Header, error) {
	return c.send(ctx, retryable, method, path, query, body, out)
}

// doOnce is do for a request that is not safe to repeat: it is sent again
// only when E2B was not asked (retryableOnce).
func (c *apiClient) doOnce(ctx context.Context, method, path string, query url.Values, body, out any) (http.Header, error) {
	return c.send(ctx, retryableOnce, method, path, query, body, out)
}

func (c *apiClient) send(ctx context.Context, retry func(error) bool, method, path string, query url.Values, body, out any) (http.Header, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		payload = b
	}
	for n := 0; ; n++ {
		h, err := c.once(ctx, method, path, query, payload, out)
		if err == nil || !retry(err) || n+1 >= maxAttempts {
			return h, err
		}
		if berr := backoff(ctx, n, err); berr != nil {
			return nil, err
		}
	}
}

func (c *apiClient) once(ctx context.Context, method, path string, query url.Values, payload []byte, out any) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-KEY", c.key)
	req.Header.Set("User-Agent", userAgent)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.Header, readAPIError(resp, append(payloadSecrets(payload), c.key)...)
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
			return resp.Header, fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

// sandbox is what the control plane says of a sandbox (Sandbox,
// SandboxDetail and ListedSandbox share these names).
type sandbox struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	Domain          *string           `json:"domain"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
}

// newSandbox is NewSandboxV2, the fields boxfs sets.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             int32             `json:"timeout"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             *networkConfig    `json:"network,omitempty"`
}

// networkConfig is SandboxNetworkConfig, the egress rules boxfs sets.
type networkConfig struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

// create asks E2B once for a sandbox (again only on a 429).
func (c *apiClient) create(ctx context.Context, body newSandbox) (sandbox, error) {
	var sb sandbox
	_, err := c.doOnce(ctx, http.MethodPost, "/v2/sandboxes", nil, body, &sb)
	return sb, err
}

func (c *apiClient) get(ctx context.Context, id string) (sandbox, error) {
	var sb sandbox
	_, err := c.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &sb)
	return sb, err
}

// kill ends a sandbox; one that is already gone is not an error.
func (c *apiClient) kill(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil)
	if errorCode(err) == providers.NotFound {
		return nil
	}
	return err
}

// list returns the running and paused sandboxes carrying every label of
// metadata, following X-Next-Token from page to page. Both states are
// asked for, in one comma-separated value (the API's unexploded form
// style, as the SDK sends them).
func (c *apiClient) list(ctx context.Context, metadata map[string]string) ([]sandbox, error) {
	var out []sandbox
	token := ""
	for range 10000 {
		q := url.Values{"state": {"running,paused"}, "limit": {"100"}}
		if m := metadataQuery(metadata); m != "" {
			q.Set("metadata", m)
		}
		if token != "" {
			q.Set("nextToken", token)
		}
		var page []sandbox
		h, err := c.do(ctx, http.MethodGet, "/v2/sandboxes", q, nil, &page)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		token = h.Get("X-Next-Token")
		if token == "" || len(page) == 0 {
			return out, nil
		}
	}
	return nil, errors.New("the sandbox listing did not end after 10000 pages")
}

// metadataQuery writes a metadata filter as the API reads it: each key and
// value escaped, the k=v pairs joined with & and escaped again (the URL
// escapes it a third time).
func metadataQuery(m map[string]string) string {
	var b bytes.Buffer
	for _, k := range sortedKeys(m) {
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(url.QueryEscape(k)))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(url.QueryEscape(m[k])))
	}
	return b.String()
}
