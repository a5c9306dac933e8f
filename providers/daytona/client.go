package daytona

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Retry bounds of the REST client.
const (
	maxTries      = 6                      // attempts of one idempotent call
	backoffFirst  = 100 * time.Millisecond // the first pause; doubled each time
	backoffMax    = 3 * time.Second
	retryAfterMax = 60 * time.Second // the longest Retry-After honoured
	errorBodyMax  = 64 << 10         // how much of an error answer is read
)

// client speaks Daytona's REST API: the control plane and the toolbox. The
// API key goes in the Authorization header of its requests and nowhere
// else: not in a URL, a log line or an error.
type client struct {
	hc  *http.Client
	api *url.URL // the control plane's base, e.g. https://app.daytona.io/api
	key string
	log *slog.Logger
}

// request is one call.
type request struct {
	method string
	url    string     // absolute, without the query
	query  url.Values // may be nil
	// body returns a fresh body for each attempt; nil means no body.
	body        func() (io.Reader, error)
	contentType string
	header      http.Header // extra headers (Range)
	// idempotent calls are retried on no answer, 429 and 5xx. Others are
	// retried only on 429, which Daytona's throttler answers before the
	// request is handled.
	idempotent bool
}

// jsonBody makes a request body of v, the same bytes on every attempt.
func jsonBody(v any) (func() (io.Reader, error), error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return func() (io.Reader, error) { return bytes.NewReader(b), nil }, nil
}

// apiError is a call that failed: its method, path and status, and the
// server's own message. It never holds a header or a body that was sent.
type apiError struct {
	Method  string
	Path    string // the URL path, without the query
	Status  int    // 0: no answer came
	Code    string // the vendor's code from the answer ("NOT_FOUND"), if any
	Message string // the server's message, if any
	Tries   int    // how many attempts were made
	Err     error  // why no answer came (Status 0)
}

func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "daytona API %s %s", e.Method, e.Path)
	if e.Status == 0 {
		fmt.Fprintf(&b, ": no answer")
		if e.Err != nil {
			fmt.Fprintf(&b, " (%v)", e.Err)
		}
	} else {
		fmt.Fprintf(&b, ": %d %s", e.Status, http.StatusText(e.Status))
		if e.Message != "" {
			fmt.Fprintf(&b, ": %s", e.Message)
		}
	}
	if e.Tries > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Tries)
	}
	return b.String()
}

func (e *apiError) Unwrap() error { return e.Err }

// errorCode classifies a failed call by its HTTP status, or, when no
// answer came, by the transport's error. It is the one place Daytona's
// failures become codes; it never looks at error text.
func errorCode(status int, err error) providers.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return providers.Aborted
	case errors.Is(err, context.DeadlineExceeded):
		return providers.Timeout
	}
	switch status {
	case 0:
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) {
			return providers.TransportLost
		}
		return providers.Unavailable
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return providers.Invalid
	case http.StatusUnauthorized:
		return providers.Auth
	case http.StatusForbidden:
		return providers.Permission
	case http.StatusNotFound:
		return providers.NotFound
	case http.StatusRequestTimeout:
		return providers.Timeout
	case http.StatusConflict:
		return providers.Exists
	case http.StatusGone:
		return providers.Gone
	case http.StatusRequestEntityTooLarge:
		return providers.TooLarge
	case http.StatusTooManyRequests:
		return providers.Unavailable
	case http.StatusNotImplemented:
		return providers.Unsupported
	}
	if status >= 500 {
		return providers.Unavailable
	}
	return providers.Unknown
}

// wrap makes err a *providers.Error of op. An *apiError is classified by
// errorCode; an error that already is a *providers.Error keeps its code;
// context errors become Aborted or Timeout.
func wrap(op, box string, err error) *providers.Error {
	var pe *providers.Error
	if errors.As(err, &pe) {
		return providers.E(0, op, err).WithBox(box)
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return (&providers.Error{Code: errorCode(ae.Status, ae.Err), Op: op, Err: err}).WithBox(box)
	}
	return (&providers.Error{Code: errorCode(0, err), Op: op, Err: err}).WithBox(box)
}

// statusOf returns the HTTP status of a failed call, 0 if none.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// tries returns how many attempts a failed call made.
func tries(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Tries
	}
	return 1
}

// do sends req, retrying any on 429 (after its Retry-After: the throttler
// answers before the call is handled) and an idempotent one also on no
// answer and 5xx, with backoff. The answer is a success (below 400)
// whose body the caller closes, or an error: *apiError, or ctx's.
func (c *client) do(ctx context.Context, req request) (*http.Response, error) {
	u, err := url.Parse(req.url)
	if err != nil {
		return nil, fmt.Errorf("daytona: bad URL for %s: %w", req.method, err)
	}
	if len(req.query) > 0 {
		u.RawQuery = req.query.Encode()
	}
	path := u.Path
	for attempt := 1; ; attempt++ {
		var body io.Reader
		if req.body != nil {
			if body, err = req.body(); err != nil {
				return nil, err
			}
		}
		hreq, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
		if err != nil {
			return nil, err
		}
		for k, vs := range req.header {
			hreq.Header[k] = vs
		}
		c.setHeaders(hreq.Header)
		if req.contentType != "" {
			hreq.Header.Set("Content-Type", req.contentType)
		}
		resp, err := c.hc.Do(hreq)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			e := &apiError{Method: req.method, Path: path, Tries: attempt, Err: transportCause(err)}
			if !req.idempotent || attempt >= maxTries {
				return nil, e
			}
			if err := c.pause(ctx, backoff(attempt), e); err != nil {
				return nil, err
			}
			continue
		}
		if resp.StatusCode < 400 {
			return resp, nil
		}
		e := c.failure(req.method, path, resp, attempt)
		retryable := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented
		if !retryable || !req.idempotent && resp.StatusCode != http.StatusTooManyRequests || attempt >= maxTries {
			return nil, e
		}
		wait := backoff(attempt)
		if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			wait = d
		}
		if err := c.pause(ctx, wait, e); err != nil {
			return nil, err
		}
	}
}

// sdkVersion is the release of Daytona's TypeScript SDK (@daytonaio/sdk)
// whose requests boxfs's follow and were checked against. It goes in
// X-Daytona-SDK-Version, a bare version as the SDK sends its own; the
// daemon reads it as the client's age (one of 0.27 or later gets a
// session's log with its stream markers).
const sdkVersion = "0.218.0"

// setHeaders sets what every request carries: the key, who is calling and
// which SDK release its requests follow (X-Daytona-Source,
// X-Daytona-SDK-Version, as Daytona's SDKs send them), and
// X-Daytona-Split-Output, without which the toolbox strips the stream
// markers from a session's log (stdout and stderr would come as one).
func (c *client) setHeaders(h http.Header) {
	h.Set("Authorization", "Bearer "+c.key)
	h.Set("User-Agent", "boxfs")
	h.Set("X-Daytona-Source", "boxfs")
	h.Set("X-Daytona-SDK-Version", sdkVersion)
	h.Set("X-Daytona-Split-Output", "true")
}

// pause waits d before the next attempt, or returns ctx's error.
func (c *client) pause(ctx context.Context, d time.Duration, why *apiError) error {
	c.log.Debug("daytona: retrying", "method", why.Method, "path", why.Path, "status", why.Status, "wait", d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// failure reads an error answer into an *apiError.
func (c *client) failure(method, path string, resp *http.Response, attempt int) *apiError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyMax))
	e := &apiError{Method: method, Path: path, Status: resp.StatusCode, Tries: attempt}
	var body struct {
		Message   json.RawMessage `json:"message"`
		Error     json.RawMessage `json:"error"`
		Errors    json.RawMessage `json:"errors"` // the toolbox's bulk upload
		Code      string          `json:"code"`
		ErrorCode string          `json:"error_code"`
	}
	if json.Unmarshal(b, &body) == nil {
		e.Code = cmp.Or(body.Code, body.ErrorCode)
		e.Message = cmp.Or(jsonText(body.Message), jsonText(body.Errors), jsonText(body.Error))
	}
	if len(e.Message) > 300 {
		e.Message = e.Message[:300] + "..."
	}
	if c.key != "" {
		e.Message = strings.ReplaceAll(e.Message, c.key, "[key]")
	}
	return e
}

// jsonText reads a message that is a string or an array of strings.
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return strings.Join(ss, "; ")
	}
	return ""
}

// transportCause keeps the kind of a transport error without its URL (the
// URL is in the apiError already).
func transportCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// backoff is the pause before attempt+1: doubling from backoffFirst, capped,
// with jitter.
func backoff(attempt int) time.Duration {
	d := backoffFirst << (attempt - 1)
	if d > backoffMax || d <= 0 {
		d = backoffMax
	}
	return d/2 + rand.N(d/2+1)
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	} else {
		return 0, false
	}
	return min(max(d, 0), retryAfterMax), true
}

// json sends req and decodes a successful answer into out (nil: discard).
func (c *client) json(ctx context.Context, req request, out any) error {
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return &apiError{Method: req.method, Path: pathOf(req.url), Status: 0, Err: err}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("daytona API %s %s: answer is not the JSON expected: %w", req.method, pathOf(req.url), err)
	}
	return nil
}

func pathOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Path
	}
	return ""
}

// apiURL is the control plane's URL for path (which starts with /).
func (c *client) apiURL(path string) string {
	return strings.TrimSuffix(c.api.String(), "/") + path
}

// trusted reports whether the key may go to u: a URL served over TLS, or
// one of the control plane's own origin (which already gets the key).
func (c *client) trusted(u *url.URL) bool {
	return u.Scheme == "https" || u.Scheme == c.api.Scheme && u.Host == c.api.Host
}
