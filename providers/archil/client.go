package archil

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Retry bounds of the HTTP client.
const (
	maxTries     = 6
	backoffFirst = 100 * time.Millisecond
	backoffMax   = 3 * time.Second
	errorBodyMax = 64 << 10
)

// client speaks Archil's control plane (JSON in the {success, data}
// envelope) and a disk's object API (S3's shapes). The API key goes in the
// Authorization header of both, as "key-<key>", and nowhere else: not in a
// URL, a log line, an error or a box.
type client struct {
	hc  *http.Client
	api *url.URL // the control plane's base
	s3  *url.URL // the object API's base
	key string
	log *slog.Logger
}

// request is one call.
type request struct {
	method string
	url    string // absolute, without the query
	query  url.Values
	header http.Header
	// body returns a fresh body for each attempt; nil means none.
	body func() (io.Reader, error)
	// size is the body's length, always sent as Content-Length: the
	// object API refuses an upload without one (411), and net/http sends
	// a body it cannot measure (a file's section) chunked, dropping a
	// Content-Length header set by hand.
	size int64
	// idempotent calls are retried on no answer, 429 and 5xx.
	idempotent bool
}

// apiError is a call that failed. It never holds what was sent.
type apiError struct {
	Method, Path string
	Status       int    // 0: no answer came
	S3Code       string // the object API's error code ("NoSuchKey"), if any
	Message      string // the server's message, if any
	Tries        int
	Err          error // why no answer came (Status 0)
}

func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "archil API %s %s", e.Method, e.Path)
	if e.Status == 0 {
		b.WriteString(": no answer")
		if e.Err != nil {
			fmt.Fprintf(&b, " (%v)", e.Err)
		}
	} else {
		fmt.Fprintf(&b, ": %d %s", e.Status, http.StatusText(e.Status))
		if e.S3Code != "" {
			fmt.Fprintf(&b, " %s", e.S3Code)
		}
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

// s3Busy is the object API's code for a path another client owns (a
// conflicting operation in progress: try again).
const s3Busy = "OperationAborted"

// errorCode classifies a failed call by its HTTP status and the object
// API's error code, or, when no answer came, by the transport's error. It
// is the one place Archil's failures become codes; it never reads text.
func errorCode(status int, s3code string, err error) providers.Code {
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
	case http.StatusBadRequest:
		return providers.Invalid
	case http.StatusUnauthorized:
		return providers.Auth
	case http.StatusForbidden:
		return providers.Permission
	case http.StatusNotFound:
		return providers.NotFound
	case http.StatusConflict:
		if s3code == s3Busy {
			return providers.Unavailable
		}
		return providers.Exists
	case http.StatusRequestedRangeNotSatisfiable:
		return providers.Invalid
	case http.StatusRequestEntityTooLarge:
		return providers.TooLarge
	case http.StatusTooManyRequests:
		return providers.Unavailable
	case http.StatusNotImplemented:
		return providers.Unsupported
	case http.StatusGatewayTimeout:
		return providers.Timeout
	}
	if status >= 500 {
		return providers.Unavailable
	}
	return providers.Unknown
}

// wrap makes err a *providers.Error of op: an *apiError is classified by
// errorCode, a *providers.Error keeps its code.
func wrap(op, box string, err error) *providers.Error {
	var pe *providers.Error
	if errors.As(err, &pe) {
		return providers.E(0, op, err).WithBox(box)
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return (&providers.Error{Code: errorCode(ae.Status, ae.S3Code, ae.Err), Op: op, Err: err}).WithBox(box)
	}
	return (&providers.Error{Code: errorCode(0, "", err), Op: op, Err: err}).WithBox(box)
}

// statusOf returns the HTTP status of a failed call, 0 if none.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// s3CodeOf returns the object API's error code of a failed call.
func s3CodeOf(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.S3Code
	}
	return ""
}

// do sends req, retrying an idempotent one on no answer, 429 and 5xx with
// backoff. The answer is a success (below 400) whose body the caller
// closes, or an error: *apiError, or ctx's.
func (c *client) do(ctx context.Context, req request) (*http.Response, error) {
	u, err := url.Parse(req.url)
	if err != nil {
		return nil, fmt.Errorf("archil: bad URL for %s: %w", req.method, err)
	}
	if len(req.query) > 0 {
		u.RawQuery = req.query.Encode()
	}
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
		if body != nil {
			// A length of 0 with a body would read as unknown.
			hreq.ContentLength = req.size
			if req.size == 0 {
				hreq.Body = http.NoBody
			}
		}
		for k, vs := range req.header {
			hreq.Header[k] = vs
		}
		hreq.Header.Set("Authorization", "key-"+c.key)
		hreq.Header.Set("User-Agent", "boxfs")
		resp, err := c.hc.Do(hreq)
		var e *apiError
		retryable := false
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			e = &apiError{Method: req.method, Path: u.Path, Tries: attempt, Err: transportCause(err)}
			retryable = true
		case resp.StatusCode < 400:
			return resp, nil
		default:
			e = c.failure(req.method, u.Path, resp, attempt)
			retryable = retryableStatus(resp.StatusCode)
		}
		if !retryable || !req.idempotent || attempt >= maxTries {
			return nil, e
		}
		c.log.Debug("archil: retrying", "method", e.Method, "path", e.Path, "status", e.Status)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// retryableStatus reports whether a call answered with status may be sent
// again: it was refused for now (429) or the server failed (5xx but 501).
func retryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500 && status != http.StatusNotImplemented
}

// failure reads an error answer: the envelope's error, or S3's error
// document.
func (c *client) failure(method, path string, resp *http.Response, attempt int) *apiError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyMax))
	e := &apiError{Method: method, Path: path, Status: resp.StatusCode, Tries: attempt}
	var env struct {
		Error string `json:"error"`
	}
	var doc struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	switch {
	case json.Unmarshal(b, &env) == nil:
		e.Message = env.Error
	case xml.Unmarshal(b, &doc) == nil:
		e.S3Code, e.Message = doc.Code, doc.Message
	}
	if len(e.Message) > 300 {
		e.Message = e.Message[:300] + "..."
	}
	if c.key != "" {
		e.Message = strings.ReplaceAll(e.Message, c.key, "[key]")
	}
	return e
}

// transportCause keeps a transport error's kind without its URL.
func transportCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// backoff is the pause before attempt+1, doubling and capped, with jitter.
func backoff(attempt int) time.Duration {
	d := backoffFirst << (attempt - 1)
	if d > backoffMax || d <= 0 {
		d = backoffMax
	}
	return d/2 + rand.N(d/2+1)
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

// control sends a control-plane call and decodes the envelope's data into
// out (nil: discard). An envelope with success false is an error even on
// a 2xx answer, as the vendor's client has it.
func (c *client) control(ctx context.Context, method, path string, query url.Values, in, out any, idempotent bool) (int, error) {
	req := request{method: method, url: strings.TrimSuffix(c.api.String(), "/") + path, query: query, idempotent: idempotent}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		req.body = func() (io.Reader, error) { return bytes.NewReader(b), nil }
		req.size = int64(len(b))
		req.header = http.Header{"Content-Type": {"application/json"}}
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, &apiError{Method: method, Path: path, Err: err}
	}
	var env struct {
		Success bool            `json:"success"`
		Data    json.RawMessage `json:"data"`
		Error   string          `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return 0, fmt.Errorf("archil API %s %s: the answer is not the envelope expected: %w", method, path, err)
	}
	if !env.Success {
		return 0, &apiError{Method: method, Path: path, Status: resp.StatusCode, Message: env.Error}
	}
	if out != nil && len(env.Data) > 0 {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return 0, fmt.Errorf("archil API %s %s: the data is not the shape expected: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// objectURL is the object API's URL of key on disk; key "" is the disk
// (its listing). Each segment is escaped, as the vendor's client does.
func (c *client) objectURL(disk, key string) string {
	base := strings.TrimSuffix(c.s3.String(), "/") + "/" + url.PathEscape(disk)
	if key == "" {
		return base
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return base + "/" + strings.Join(segs, "/")
}

// getObject reads an object; a Range header may ask for part of it.
func (c *client) getObject(ctx context.Context, disk, key string, header http.Header) (*http.Response, error) {
	return c.do(ctx, request{method: http.MethodGet, url: c.objectURL(disk, key), header: header, idempotent: true})
}

// Multipart uploads, as the vendor's client makes them: a body over
// partSize goes up in parts of partSize (the last one shorter), at most
// uploadConcurrency at a time, and at most maxParts of them.
const (
	partSize          = 16 << 20
	uploadConcurrency = 4
	maxParts          = 10000
)

// putObject writes the object key from the size bytes of src: one PUT, or
// a multipart upload when size is over partSize. Every request carries
// its Content-Length.
func (c *client) putObject(ctx context.Context, disk, key string, src io.ReaderAt, size int64) error {
	if size > partSize {
		return c.putMultipart(ctx, disk, key, src, size)
	}
	h := http.Header{"Content-Type": {"application/octet-stream"}}
	body := func() (io.Reader, error) { return io.NewSectionReader(src, 0, size), nil }
	resp, err := c.do(ctx, request{method: http.MethodPut, url: c.objectURL(disk, key), header: h, body: body, size: size, idempotent: true})
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// completePart is one part of CompleteMultipartUpload's body.
type completePart struct {
	PartNumber int    `xml:"PartNumber"`
	ETag       string `xml:"ETag"`
}

// putMultipart uploads the object in parts: CreateMultipartUpload (POST
// ?uploads), UploadPart for each (PUT ?uploadId&partNumber, retried as any
// idempotent call), then CompleteMultipartUpload (POST ?uploadId). A
// failure aborts the upload (DELETE ?uploadId), so no parts stay staged.
func (c *client) putMultipart(ctx context.Context, disk, key string, src io.ReaderAt, size int64) error {
	u := c.objectURL(disk, key)
	resp, err := c.do(ctx, request{method: http.MethodPost, url: u, query: url.Values{"uploads": {""}},
		header: http.Header{"Content-Type": {"application/octet-stream"}}, idempotent: true})
	if err != nil {
		return err
	}
	var made struct {
		UploadID string `xml:"UploadId"`
	}
	err = xml.NewDecoder(io.LimitReader(resp.Body, errorBodyMax)).Decode(&made)
	resp.Body.Close()
	if err != nil || made.UploadID == "" {
		return fmt.Errorf("archil: CreateMultipartUpload answered no UploadId (%v)", err)
	}
	id := made.UploadID
	if err := c.uploadParts(ctx, u, id, src, size); err != nil {
		c.abortMultipart(ctx, u, id)
		return err
	}
	return nil
}

// uploadParts sends the parts and completes the upload.
func (c *client) uploadParts(ctx context.Context, u, id string, src io.ReaderAt, size int64) error {
	ps := max(int64(partSize), (size+maxParts-1)/maxParts)
	n := int((size + ps - 1) / ps)
	parts := make([]completePart, n)
	errs := make([]error, n)
	sem := make(chan struct{}, uploadConcurrency)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		off := int64(i) * ps
		length := min(ps, size-off)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			q := url.Values{"uploadId": {id}, "partNumber": {strconv.Itoa(i + 1)}}
			body := func() (io.Reader, error) { return io.NewSectionReader(src, off, length), nil }
			resp, err := c.do(pctx, request{method: http.MethodPut, url: u, query: q, body: body, size: length, idempotent: true})
			if err != nil {
				errs[i] = err
				cancel()
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			parts[i] = completePart{PartNumber: i + 1, ETag: resp.Header.Get("ETag")}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, e := range errs {
			if e != nil && !errors.Is(e, context.Canceled) {
				return e
			}
		}
		return err
	}
	doc, err := xml.Marshal(struct {
		XMLName xml.Name       `xml:"CompleteMultipartUpload"`
		Parts   []completePart `xml:"Part"`
	}{Parts: parts})
	if err != nil {
		return err
	}
	doc = append([]byte(xml.Header), doc...)
	return c.completeMultipart(ctx, u, id, doc, size)
}

// completeMultipart sends CompleteMultipartUpload. A completion is not
// safe to repeat blindly (one that went through but whose answer was lost
// makes a repeat fail NoSuchUpload), so it is retried only after the
// object was looked for: each upload goes to a key of its own, so an
// object there of the full size is this upload, completed.
func (c *client) completeMultipart(ctx context.Context, u, id string, doc []byte, size int64) error {
	req := request{method: http.MethodPost, url: u, query: url.Values{"uploadId": {id}},
		header: http.Header{"Content-Type": {"application/xml"}},
		body:   func() (io.Reader, error) { return bytes.NewReader(doc), nil }, size: int64(len(doc))}
	for attempt := 1; ; attempt++ {
		err := c.postComplete(ctx, req, attempt)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// No answer, a 429 or a 5xx may be sent again; so may a 404
		// (NoSuchUpload) after one of those, which may mean the first
		// went through.
		s := statusOf(err)
		if s != 0 && !retryableStatus(s) && (s != http.StatusNotFound || attempt == 1) {
			return err
		}
		// A 429 was refused before it was carried out; anything else
		// may have been: look for the object.
		if s != http.StatusTooManyRequests && c.hasObject(ctx, u, size) {
			return nil
		}
		if s == http.StatusNotFound || attempt >= maxTries {
			return err
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// postComplete sends CompleteMultipartUpload once. S3 may answer 200 with
// an error document (a failure after the answer began): that is an error
// too.
func (c *client) postComplete(ctx context.Context, req request, attempt int) error {
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, errorBodyMax))
	if err != nil {
		return &apiError{Method: req.method, Path: resp.Request.URL.Path, Tries: attempt, Err: err}
	}
	var doc struct {
		XMLName xml.Name
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if xml.Unmarshal(b, &doc) == nil && doc.XMLName.Local == "Error" {
		return &apiError{Method: req.method, Path: resp.Request.URL.Path, Status: http.StatusInternalServerError, S3Code: doc.Code, Message: doc.Message, Tries: attempt}
	}
	return nil
}

// hasObject reports whether the object at u exists with size bytes.
func (c *client) hasObject(ctx context.Context, u string, size int64) bool {
	resp, err := c.do(ctx, request{method: http.MethodHead, url: u, idempotent: true})
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.ContentLength == size
}

// abortMultipart discards an upload's parts; a failure is logged only (a
// gone upload is not one).
func (c *client) abortMultipart(ctx context.Context, u, id string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	resp, err := c.do(actx, request{method: http.MethodDelete, url: u, query: url.Values{"uploadId": {id}}, idempotent: true})
	if err != nil {
		if statusOf(err) != http.StatusNotFound {
			c.log.Warn("archil: aborting a multipart upload", "err", err)
		}
		return
	}
	resp.Body.Close()
}

// deleteObject deletes an object; a missing one is not an error.
func (c *client) deleteObject(ctx context.Context, disk, key string) error {
	resp, err := c.do(ctx, request{method: http.MethodDelete, url: c.objectURL(disk, key), idempotent: true})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil
		}
		return err
	}
	resp.Body.Close()
	return nil
}

// listPage is one ListObjectsV2 answer.
type listPage struct {
	Contents []struct {
		Key          string `xml:"Key"`
		Size         int64  `xml:"Size"`
		ETag         string `xml:"ETag"`
		LastModified string `xml:"LastModified"`
	} `xml:"Contents"`
	CommonPrefixes []struct {
		Prefix string `xml:"Prefix"`
	} `xml:"CommonPrefixes"`
	IsTruncated           bool   `xml:"IsTruncated"`
	NextContinuationToken string `xml:"NextContinuationToken"`
	KeyCount              int    `xml:"KeyCount"`
}

// maxListPages bounds a listing, against a server whose token never ends.
const maxListPages = 100000

// list pages through ListObjectsV2 of prefix (one level with delimiter "/"
// when delim is set), calling each for every key and common prefix.
func (c *client) list(ctx context.Context, disk, prefix string, delim bool, each func(key string, prefix bool) error) error {
	token := ""
	seen := map[string]bool{}
	for range maxListPages {
		q := url.Values{"list-type": {"2"}, "prefix": {prefix}}
		if delim {
			q.Set("delimiter", "/")
		}
		if token != "" {
			q.Set("continuation-token", token)
		}
		resp, err := c.do(ctx, request{method: http.MethodGet, url: c.objectURL(disk, ""), query: q, idempotent: true})
		if err != nil {
			return err
		}
		var pg listPage
		err = xml.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&pg)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("archil: a ListObjectsV2 page is not the XML expected: %w", err)
		}
		for _, o := range pg.Contents {
			if err := each(o.Key, false); err != nil {
				return err
			}
		}
		for _, p := range pg.CommonPrefixes {
			if err := each(p.Prefix, true); err != nil {
				return err
			}
		}
		if !pg.IsTruncated || pg.NextContinuationToken == "" {
			return nil
		}
		if seen[pg.NextContinuationToken] {
			return fmt.Errorf("archil: the listing's continuation token repeats")
		}
		seen[pg.NextContinuationToken] = true
		token = pg.NextContinuationToken
	}
	return fmt.Errorf("archil: the listing goes on past %d pages", maxListPages)
}
