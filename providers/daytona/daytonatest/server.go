// Package daytonatest serves a fake of Daytona's REST API in process: the
// control plane (sandboxes) and the per-sandbox toolbox (files, commands,
// sessions) on one httptest.Server, with the routes, field names and
// behaviour of the vendor's current published clients and daemon.
//
// # What it models
//
// The control plane answers under /api. A create answers 200 while the
// sandbox may still be creating; one that fails within the server's own
// wait answers 400 "Sandbox failed to start: <reason>" and leaves the
// sandbox in its error state. A sandbox goes creating → started after
// Options.CreatingPolls reads and Options.CreatingFor; it can be made to
// fail (error, build_failed). Stop leaves it stopping for
// Options.StoppingFor, then stopped. While a sandbox is in such a pending
// state, DELETE answers 409 "Sandbox state change in progress"; an
// accepted DELETE sets desiredState destroyed and leaves state as it was
// for Options.DeleteLag (reads show the sandbox, its toolbox answers),
// then the sandbox is destroyed and reads answer 404. A paused sandbox is
// resumed by start. A snapshot of a started sandbox copies its directory
// and leaves it snapshotting for Options.SnapshottingFor; a create naming
// that snapshot starts with the copy, and one naming a snapshot never
// taken (nor the base one) answers 400 "Snapshot X not found", as
// Daytona does. Its ttlMinutes destroys it in any state; its
// autoStopInterval stops it when idle, and an autoDeleteInterval of 0 then
// deletes it. Listings (a JSON labels filter, repeated states, cursor
// pagination with a tiny page size) are eventually consistent: a sandbox
// appears Options.ListDelay after its create, and a destroyed one lingers
// that long.
//
// The toolbox answers under /toolbox/{id}. process/execute runs the
// command through sh, which reads it from its stdin (the daemon since
// 2026-03), in its own process group, output combined, 408 past its
// timeout. A session is one long-lived sh, which runs its commands one
// after another; each command's stdout and stderr are labelled line by
// line with the 3-byte markers 01 01 01 and 02 02 02 into its log, which
// the logs endpoint serves as JSON or, with ?follow=true, over a
// WebSocket in binary frames of at most 1 KiB, closed once the command's
// exit code is known and the log has stayed at its end for
// Options.FollowLinger. The markers are stripped from the log unless the
// request carries X-Daytona-Split-Output: true or an X-Daytona-SDK-Version
// of 0.27 or later, as the daemon does for old clients. Deleting a session
// terminates its shell's process group. The file endpoints (info, list,
// download, bulk-download, bulk-upload, folder, delete, move, permissions)
// behave as the daemon's handlers do, a relative path (or cwd) being
// taken from the sandbox's working directory. Options.OldDaemon serves the
// older daemon instead, the one @daytonaio/toolbox-api-client 0.161
// describes: it also has files/upload, and its process/execute splits the
// command on spaces with naive quote rules and runs the words without a
// shell.
//
// # What is real
//
// A sandbox's commands run for real on this machine, as the same user as
// the test, with their own process group, a fixed PATH and no variable of
// the host's environment (DAYTONA_SANDBOX_ID, HOME and the sandbox's env
// are all they get), so scripts, find and tar really run. There is no
// isolation: a sandbox's paths are this machine's paths. Each sandbox has
// its own temporary directory (the default working directory and HOME of
// its commands); tests give each box its own workspace. When a sandbox
// ends, every process carrying its DAYTONA_SANDBOX_ID is killed.
//
// # Knobs and records
//
// Options set the API key, the timings above, the page size, latency and
// fault injection (429 with Retry-After, 5xx, before or after the request
// is handled). Every request is recorded (method, path, query, headers,
// body, and the answer's status, type and body) for tests to inspect, and
// Routes lists what the fake serves, so tests can check both against the
// vendor's spec.
package daytonatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Options configure a fake.
type Options struct {
	// APIKey is the only key the fake accepts, as "Authorization: Bearer
	// <key>". Default "daytonatest-key".
	APIKey string
	// CreatingPolls is how many reads of a new sandbox still see it
	// creating before it is started (0: the create can answer it started).
	CreatingPolls int
	// CreatingFor is how long a new sandbox is creating at least.
	CreatingFor time.Duration
	// FailState, when set ("error", "build_failed"), is where a new
	// sandbox goes instead of started, with ErrorReason. A sandbox that
	// fails before the create answers makes the create answer 400.
	FailState   string
	ErrorReason string
	// StoppingFor is how long a stop leaves a sandbox stopping. Default
	// 100ms; negative: none.
	StoppingFor time.Duration
	// DeleteLag is how long an accepted DELETE leaves a sandbox in its
	// state (desiredState destroyed) before it is destroyed. Default
	// 200ms; negative: none.
	DeleteLag time.Duration
	// PageSize is the most items a listing page holds. Default 2.
	PageSize int
	// ListDelay hides a new sandbox from listings for this long, and keeps
	// a destroyed one listed as long.
	ListDelay time.Duration
	// FollowLinger is how long a followed log stays at its end, with the
	// command's exit code known, before the stream closes (the daemon
	// waits about a second). Default 50ms.
	FollowLinger time.Duration
	// Latency is added before every answer.
	Latency time.Duration
	// SnapshottingFor is how long a snapshot leaves a sandbox snapshotting.
	// Default 100 ms.
	SnapshottingFor time.Duration
	// Minute is how long the fake's minute lasts, for ttlMinutes and
	// autoStopInterval. Default time.Minute.
	Minute time.Duration
	// IgnoreNetwork makes the fake drop networkBlockAll and the allow
	// lists on create, as a Daytona that does not apply them would.
	IgnoreNetwork bool
	// OldDaemon serves the toolbox of older daemons (toolbox API 0.161):
	// files/upload exists and process/execute runs no shell.
	OldDaemon bool
}

// Fault is what an injected failure does to one request.
type Fault struct {
	Status     int    // the status to answer; 0: no fault
	RetryAfter string // the Retry-After header, if any
	// After handles the request first and then answers Status, as a proxy
	// that lost the backend's answer would.
	After bool
}

// FaultFunc decides the fault of a request; n counts requests from 1.
type FaultFunc func(r *http.Request, n int) Fault

// Every returns a FaultFunc that fails every nth request (WebSocket
// upgrades included), cycling through statuses; a 429 carries
// Retry-After: retryAfter.
func Every(n int, retryAfter string, statuses ...int) FaultFunc {
	var mu sync.Mutex
	k := 0
	return func(r *http.Request, count int) Fault {
		if n <= 0 || count%n != 0 || len(statuses) == 0 {
			return Fault{}
		}
		mu.Lock()
		st := statuses[k%len(statuses)]
		k++
		mu.Unlock()
		f := Fault{Status: st}
		if st == http.StatusTooManyRequests {
			f.RetryAfter = retryAfter
		}
		return f
	}
}

// Request is one recorded request and its answer.
type Request struct {
	Time   time.Time
	Method string
	Path   string // the URL path, e.g. /api/sandbox
	Query  string // the raw query
	Header http.Header
	Body   []byte
	Status int // what the fake answered (101 for an upgrade)
	// ContentType and Response are the answer's type and body (its first
	// MiB), as the fake wrote them.
	ContentType string
	Response    []byte
}

// responseMax is how much of an answer is recorded.
const responseMax = 1 << 20

// Server is a running fake.
type Server struct {
	srv  *httptest.Server
	mux  *http.ServeMux
	opts Options
	root string // temp dir holding each sandbox's directory

	mu        sync.Mutex
	sandboxes map[string]*sandbox // by id; destroyed ones stay until they are no longer listed
	snapshots map[string]string   // snapshots taken: name -> the copy of the sandbox's directory
	requests  []*Request
	count     int
	fault     FaultFunc

	stop chan struct{}
	wg   sync.WaitGroup
}

// New starts a fake. Close it when done.
func New(opts Options) *Server {
	if opts.APIKey == "" {
		opts.APIKey = "daytonatest-key"
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 2
	}
	if opts.Minute <= 0 {
		opts.Minute = time.Minute
	}
	opts.StoppingFor = orDefault(opts.StoppingFor, 100*time.Millisecond)
	opts.SnapshottingFor = orDefault(opts.SnapshottingFor, 100*time.Millisecond)
	opts.DeleteLag = orDefault(opts.DeleteLag, 200*time.Millisecond)
	opts.FollowLinger = orDefault(opts.FollowLinger, 50*time.Millisecond)
	root, err := os.MkdirTemp("", "daytonatest-")
	if err != nil {
		panic(fmt.Sprintf("daytonatest: %v", err))
	}
	s := &Server{opts: opts, root: root, sandboxes: map[string]*sandbox{}, snapshots: map[string]string{}, stop: make(chan struct{})}
	s.mux = s.routes()
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.wg.Add(1)
	go s.timers()
	return s
}

// orDefault is d, def when d is 0, and 0 when d is negative.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// APIURL is the control plane's base URL, what the provider's api_url
// option takes.
func (s *Server) APIURL() string { return s.srv.URL + "/api" }

// APIKey is the key the fake accepts.
func (s *Server) APIKey() string { return s.opts.APIKey }

// Close ends every sandbox and stops the server.
func (s *Server) Close() {
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	var all []*sandbox
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	for _, sb := range all {
		s.destroy(sb, "server closed")
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
	os.RemoveAll(s.root)
}

// SetFault sets (nil: clears) the fault injection.
func (s *Server) SetFault(f FaultFunc) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// SetLatency changes the added latency.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.opts.Latency = d
	s.mu.Unlock()
}

// Requests returns a copy of the recorded requests, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
		out[i].Header = r.Header.Clone()
	}
	return out
}

// ResetRequests forgets the recorded requests.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	s.requests = nil
	s.mu.Unlock()
}

// Leaks returns a description of every place secret appears in the
// recorded requests other than an "Authorization: Bearer <secret>" header:
// the path, the query, any other header, any body.
func (s *Server) Leaks(secret string) []string {
	if secret == "" {
		return nil
	}
	var out []string
	for i, r := range s.Requests() {
		where := fmt.Sprintf("request %d (%s %s)", i, r.Method, r.Path)
		q, _ := url.QueryUnescape(r.Query)
		if strings.Contains(r.Path, secret) || strings.Contains(r.Query, secret) || strings.Contains(q, secret) {
			out = append(out, where+": in the URL")
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if !strings.Contains(v, secret) {
					continue
				}
				if http.CanonicalHeaderKey(k) == "Authorization" && v == "Bearer "+secret {
					continue
				}
				out = append(out, where+": in header "+k)
			}
		}
		if bytes.Contains(r.Body, []byte(secret)) {
			out = append(out, where+": in the body")
		}
	}
	return out
}

// serve records, authenticates, delays, injects faults and routes one
// request.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := &Request{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.count++
	n := s.count
	fault := s.fault
	latency := s.opts.Latency
	s.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		rec.Status, rec.ContentType, rec.Response = sw.status, sw.Header().Get("Content-Type"), sw.body
		s.mu.Unlock()
	}()

	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	if r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
		writeJSON(sw, http.StatusUnauthorized, nestError(http.StatusUnauthorized, "Invalid credentials"))
		return
	}
	var f Fault
	if fault != nil {
		f = fault(r, n)
	}
	switch {
	case f.Status == 0:
		s.mux.ServeHTTP(sw, r)
	case !f.After || r.Header.Get("Upgrade") != "": // an upgrade cannot be answered twice
		injectFault(sw, f)
	default:
		s.mux.ServeHTTP(httptest.NewRecorder(), r)
		injectFault(sw, f)
	}
}

func injectFault(w http.ResponseWriter, f Fault) {
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	if f.Status == http.StatusTooManyRequests {
		writeJSON(w, f.Status, nestError(f.Status, "ThrottlerException: Too Many Requests"))
		return
	}
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(f.Status)
	fmt.Fprintf(w, "<html><body><h1>%d %s</h1></body></html>\n", f.Status, http.StatusText(f.Status))
}

// statusWriter remembers the status written and the start of the body.
type statusWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if room := responseMax - len(w.body); room > 0 {
		w.body = append(w.body, b[:min(room, len(b))]...)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (and the WebSocket upgrade) reach
// the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// nestError is the control plane's (NestJS) error body.
func nestError(status int, msg string) map[string]any {
	return map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)}
}

// toolboxError is the daemon's error body.
func toolboxError(w http.ResponseWriter, r *http.Request, status int, err error) {
	code := map[int]string{
		http.StatusBadRequest: "BAD_REQUEST", http.StatusNotFound: "NOT_FOUND", http.StatusForbidden: "FORBIDDEN",
		http.StatusConflict: "CONFLICT", http.StatusRequestTimeout: "REQUEST_TIMEOUT", http.StatusGone: "GONE",
	}[status]
	if code == "" {
		code = "INTERNAL_SERVER_ERROR"
	}
	writeJSON(w, status, map[string]any{
		"statusCode": status, "message": err.Error(), "code": code,
		"path": r.URL.Path, "method": r.Method, "timestamp": time.Now().UTC().Format(time.RFC3339),
	})
}
