// Package e2btest serves a fake of E2B in process: the REST control plane
// on one httptest.Server and envd, the daemon of every sandbox, on
// another, with the real paths, JSON field names, Connect services and
// headers.
//
// # What it models
//
// The control plane (X-API-KEY) answers POST /v2/sandboxes (201), GET and
// DELETE /sandboxes/{id} (404 for an unknown or ended sandbox), POST
// /sandboxes/{id}/timeout (which replaces the end time, so it can extend
// it), POST /sandboxes/{id}/pause (its processes stopped with their
// memory, its streams cut, its timeout stopped; envd answers 502 while it
// is paused), POST /v2/sandboxes/{id}/connect (which resumes a paused
// sandbox, 201), POST /sandboxes/{id}/snapshots (a copy of the sandbox's
// home, under a template id a create takes; DELETE /templates/{id} removes
// it), and GET /v2/sandboxes filtered by metadata (the doubly URL-encoded
// "k=v&k2=v2" query the SDK sends) and state (comma-separated; running
// and paused when none is given), newest first, paged by limit with the
// X-Next-Token header. Errors are JSON {code, message}. A template fixes
// a sandbox's CPUs, memory and disk; a sandbox ends (its processes
// killed, GET answers 404) when its timeout passes, which it does not
// while it is paused: a paused sandbox stays, listed as paused, until it
// is killed or resumed.
//
// envd (X-Access-Token, routed by the E2b-Sandbox-Id header or a
// "49983-{id}." host) serves the process.Process and filesystem.Filesystem
// Connect services through connect-go, so JSON (enum names, int64 as
// strings, base64 bytes) and binary framing, enveloped streams with their
// end-of-stream message and error codes are the protocol's own; plus GET
// and POST /files (multipart or octet-stream, Range on downloads) and GET
// /health. A request for a sandbox that is not running answers 502, as
// E2B's proxy does.
//
// # What is real
//
// A sandbox's processes run for real on this machine, as the test's user,
// through envd's own /bin/sh wrapper (oom_score_adj, then exec nice), in
// envd's process group rather than one of their own, with envd's
// environment rules: PATH, HOME, USER and LOGNAME, then the template's and
// the sandbox's variables (E2B_SANDBOX, E2B_SANDBOX_ID and TMPDIR among
// them), then the request's; nothing of the host's. HOME and the default
// working directory is the sandbox's own temporary directory; there is no
// other isolation. Output goes out in chunks of at most 32 KiB to every
// stream attached to the process, and is dropped while none is (envd's
// multiplexer); SendInput blocks while the process does not read. A signal
// goes to the process alone, never its group. When a sandbox ends every
// process carrying its E2B_SANDBOX_ID is killed.
//
// # Knobs and records
//
// Options set the API key, templates, envd's version, the longest timeout
// and latency; SetFault injects a status (429 with Retry-After, 401, 5xx)
// before a request is handled or in place of its answer once handled, or
// cuts a stream after some messages.
// Every request is recorded.
package e2btest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem/filesystemconnect"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/process/processconnect"
)

// Template is what a sandbox is made from: its size and base environment.
type Template struct {
	CPUs     int
	MemoryMB int
	DiskMB   int
	Env      map[string]string
}

// Options configure a fake.
type Options struct {
	// APIKey is the only key the control plane accepts. Default
	// "e2b_test_key".
	APIKey string
	// Templates by id. Default: "base" with 2 CPUs, 512 MB, 10 GB.
	Templates map[string]Template
	// EnvdVersion is the version sandboxes report. Default "0.5.7".
	EnvdVersion string
	// MaxTimeout is the longest sandbox timeout accepted, the team's tier
	// cap: a create or a timeout over it is answered 400 {code: 400,
	// message: "Timeout cannot be greater than N hours"}, as E2B does.
	// Default 1h, the Hobby tier's (Pro's is 24h).
	MaxTimeout time.Duration
	// Latency is added before every answer.
	Latency time.Duration
	// PageSize caps a listing page whatever limit asks. Default 100.
	PageSize int
	// Domain is the domain sandboxes report in a create's, a connect's
	// and a sandbox's detail answer, as sandboxes of a cluster of a
	// team's own (BYOC) do; a listing never carries it. "" reports none
	// (null), as E2B's own cluster does.
	Domain string
	// Logger receives the fake's log lines; nil discards them.
	Logger *slog.Logger
	// Dir is where the fake keeps its sandboxes' directories; "" is the
	// system's temporary directory. When the test process dies without
	// Close, a reaper process still kills the sandboxes' processes and
	// removes their directories.
	Dir string
}

// Fault is what an injected failure does to one request.
type Fault struct {
	Status     int    // answered before the request is handled; 0: none
	RetryAfter string // the Retry-After header of the answer, if any
	// Handled, with Status, carries the request out before answering
	// Status in place of its answer, as E2B's gateway does when a call
	// outlives it (502, 504): the client cannot tell whether it was done.
	// For unary calls only.
	Handled bool
	// CutAfter, on a streaming call (Start, Connect, WatchDir), severs the
	// connection after that many messages were sent, as a proxy that drops
	// it would. The process keeps running.
	CutAfter int
	// KeepData, on a Start or Connect stream, sends only the first
	// KeepData output events and then the end event as usual: envd losing
	// the end of a command's output while it reports the exit.
	KeepData int
}

// FaultFunc decides the fault of a request; n counts requests from 1.
type FaultFunc func(r *http.Request, n int) Fault

// Request is one request the fake received.
type Request struct {
	Method, Path, Query string
	Header              http.Header
	Status              int // the status the fake answered (200 for streams)
}

// Server is a running fake.
type Server struct {
	opts Options
	api  *httptest.Server
	envd *httptest.Server
	root string
	log  *slog.Logger

	reaper    *os.File // closing it makes the reaper clean up
	reaperCmd *exec.Cmd

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	snapshots map[string]snapshot // snapshot templates by id
	fault     FaultFunc
	count     int
	requests  []Request
	closed    bool
}

// New starts a fake.
func New(opts Options) *Server {
	if opts.APIKey == "" {
		opts.APIKey = "e2b_test_key"
	}
	if opts.Templates == nil {
		opts.Templates = map[string]Template{"base": {CPUs: 2, MemoryMB: 512, DiskMB: 10240}}
	}
	if opts.EnvdVersion == "" {
		opts.EnvdVersion = "0.5.7"
	}
	if opts.MaxTimeout == 0 {
		opts.MaxTimeout = time.Hour
	}
	if opts.PageSize == 0 {
		opts.PageSize = 100
	}
	root, err := os.MkdirTemp(opts.Dir, "e2btest-")
	if err != nil {
		panic(fmt.Sprintf("e2btest: %v", err))
	}
	s := &Server{opts: opts, root: root, sandboxes: map[string]*sandbox{}, snapshots: map[string]snapshot{}, log: opts.Logger}
	s.reaper, s.reaperCmd = startReaper(root)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.api = httptest.NewServer(s.wrap(s.apiMux()))
	s.envd = httptest.NewServer(s.wrap(s.envdMux()))
	return s
}

// APIURL is the control plane's base URL (what E2B_API_URL names).
func (s *Server) APIURL() string { return s.api.URL }

// SandboxURL is envd's base URL for every sandbox (what E2B_SANDBOX_URL
// names); requests say which sandbox in the E2b-Sandbox-Id header.
func (s *Server) SandboxURL() string { return s.envd.URL }

// APIKey is the key the control plane accepts.
func (s *Server) APIKey() string { return s.opts.APIKey }

// Close kills every sandbox and stops the servers.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	sbs := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		sbs = append(sbs, sb)
	}
	s.mu.Unlock()
	for _, sb := range sbs {
		s.end(sb, "the fake closed")
	}
	s.api.CloseClientConnections()
	s.envd.CloseClientConnections()
	s.api.Close()
	s.envd.Close()
	if s.reaper != nil {
		s.reaper.Write([]byte("done\n"))
		s.reaper.Close()
		s.reaperCmd.Wait()
	}
	os.RemoveAll(s.root)
}

// KillSandbox ends a sandbox as E2B would at its timeout or on a kill
// from elsewhere: its processes are killed, its streams cut, and the
// control plane answers 404 for it.
func (s *Server) KillSandbox(id string) {
	if sb := s.get(id); sb != nil {
		s.end(sb, "killed by the test")
	}
}

// CutStreams severs every connection to envd now, as a proxy that drops
// them would: streams end without their end of stream, and the processes
// they followed run on with no listener for their output.
func (s *Server) CutStreams() { s.envd.CloseClientConnections() }

// SetFault installs f (nil: none) for the requests that follow.
func (s *Server) SetFault(f FaultFunc) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// Requests returns a copy of the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// SandboxIDs returns the ids of the sandboxes still running or paused.
func (s *Server) SandboxIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sandboxes {
		if sb.exists() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Dir returns the sandbox's own directory (its HOME) on this machine.
func (s *Server) Dir(id string) (string, bool) {
	sb := s.get(id)
	if sb == nil {
		return "", false
	}
	return sb.home, true
}

func (s *Server) get(id string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxes[id]
}

// statusWriter records the status a handler answers.
type statusWriter struct {
	http.ResponseWriter
	status int
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
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming answers through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type faultKey struct{}

// wrap adds latency, faults and the record of every request.
func (s *Server) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Latency > 0 {
			time.Sleep(s.opts.Latency)
		}
		s.mu.Lock()
		s.count++
		n, f := s.count, s.fault
		s.mu.Unlock()
		var fault Fault
		if f != nil {
			fault = f(r, n)
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			s.mu.Lock()
			s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Status: sw.status})
			s.mu.Unlock()
		}()
		if fault.Status != 0 {
			if fault.Handled {
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			if fault.RetryAfter != "" {
				w.Header().Set("Retry-After", fault.RetryAfter)
			}
			jsonError(sw, fault.Status, "injected fault")
			return
		}
		if fault.CutAfter > 0 {
			r = r.WithContext(withCut(r.Context(), fault.CutAfter))
		}
		if fault.KeepData > 0 {
			r = r.WithContext(withKeep(r.Context(), fault.KeepData))
		}
		h.ServeHTTP(sw, r)
	})
}

// jsonError answers E2B's error body, {code, message}.
func jsonError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// envdMux routes envd's endpoints to the sandbox the request names.
func (s *Server) envdMux() http.Handler {
	mux := http.NewServeMux()
	procPath, procHandler := processconnect.NewProcessHandler(&processService{s: s})
	fsPath, fsHandler := filesystemconnect.NewFilesystemHandler(&filesystemService{s: s})
	mux.Handle(procPath, procHandler)
	mux.Handle(fsPath, fsHandler)
	mux.HandleFunc("GET /files", s.getFiles)
	mux.HandleFunc("POST /files", s.postFiles)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sb := s.get(sandboxIDOf(r))
		if sb == nil || !sb.running() {
			// E2B's proxy, not envd, answers for a sandbox that is not running.
			jsonError(w, http.StatusBadGateway, "The sandbox was not found")
			return
		}
		open := r.Method == http.MethodGet && r.URL.Path == "/health" ||
			r.URL.Path == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodPost)
		if tok := r.Header.Get("X-Access-Token"); tok != sb.token && !open {
			jsonError(w, http.StatusUnauthorized, "unauthorized access, please provide a valid access token or method signing if supported")
			return
		}
		mux.ServeHTTP(w, r.WithContext(withSandbox(r.Context(), sb)))
	})
}

// sandboxIDOf reads which sandbox a request is for: the E2b-Sandbox-Id
// header the SDK sends, else a "49983-{id}." host.
func sandboxIDOf(r *http.Request) string {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		return id
	}
	host, _, _ := strings.Cut(r.Host, ".")
	if rest, ok := strings.CutPrefix(host, "49983-"); ok {
		return rest
	}
	return ""
}
