// Package archiltest serves a fake of Archil's control plane and of its
// disks' S3-style object API in process, on one httptest.Server, with the
// routes, JSON field names, envelope and XML shapes of the vendor's
// published client (ClientPackage; ClientSpec lists each one).
//
// # What it models
//
// The control plane answers under /api with the envelope {success, data}
// or {success: false, error} and checks "Authorization: key-<key>" on
// every request. Disks have ids "dsk-" and 16 hex digits; a create by name
// answers 201 with a one-time token user, 200 when a disk of that name and
// configuration exists, and 409 when one of that name exists otherwise. A
// new disk reads as creating for Options.CreatingPolls reads, then
// available. POST /api/disks/{id}/exec runs the command with bash -c in the
// disk's directory (its working directory, as the platform's container
// has) after Options.QueueLatency, and answers when it ends with the exit
// code, stdout and stderr as JSON strings (invalid UTF-8 becomes U+FFFD, as
// in any JSON string) and the timing; past Options.ExecLimit (the vendor's
// 30 s by default) the command's whole session is killed and the answer is
// 504 "Command timed out", with no output. When the command
// ends, whatever it left running is killed: the container is released. In
// a region that is not an AWS one, exec answers 400 "Exec is not enabled".
//
// The object API answers /{diskId}/{key} (PUT, GET with Range, HEAD,
// DELETE) and /{diskId}?list-type=2 (ListObjectsV2 with prefix, delimiter,
// continuation-token, start-after and pages of at most Options.PageSize
// entries), on the disk's directory, with S3's XML errors (NoSuchKey,
// NoSuchBucket, AccessDenied, InvalidRange). A PUT lands whole (a
// temporary name, then rename), making missing parent directories; one
// without a Content-Length (a chunked body) is refused with 411
// MissingContentLength, as S3 refuses it. Multipart uploads, which the
// vendor's client makes above 16 MiB, are served as S3 serves them:
// POST ?uploads, PUT ?uploadId&partNumber (with a length), POST ?uploadId
// with the parts listed in ascending order, each with the ETag its upload
// answered and each but the last at least 5 MiB (else InvalidPartOrder,
// InvalidPart, EntityTooSmall), and DELETE ?uploadId; Uploads lists the
// ones completed.
//
// # Shared mode
//
// A command runs with an "archil" program first on its PATH that models
// the client's ownership commands: "archil checkout PATH" takes PATH for
// the command's container, refused while another container holds PATH, an
// ancestor or a descendant; "archil checkin PATH" gives it back; all of a
// container's checkouts end with it. With Options.SharedMode, an object
// write or delete under a path a running command holds is refused with
// 409 OperationAborted, and a command may change only what its container
// owns, as the vendor's shared-disk rules have it: a path it checked out
// or one below it, or a directory it made. The fake cannot stop a system
// call, so it compares the disk before and after each command: a change
// that no checkout of a container running meanwhile, no object call and
// no new directory covers makes the call answer 403 with the paths, and
// Violations lists it.
//
// # What is real
//
// Commands run for real on this machine as the test's user, in their own
// process group, with a fixed PATH and none of the host's environment.
// There is no isolation: a disk's paths are this machine's paths.
package archiltest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultExecLimit is the vendor's bound on one exec call's container:
// about 30 s in its spec, past which the call answers 504 "Command timed
// out" and the container, with everything it runs, is gone.
const DefaultExecLimit = 30 * time.Second

// Options configure a fake.
type Options struct {
	// APIKey is the only key the fake accepts, as "Authorization:
	// key-<APIKey>". Default "archiltest-key".
	APIKey string
	// Region is the region every disk is in. Default "aws-us-east-1"; a
	// region that does not start with "aws-" refuses exec.
	Region string
	// CreatingPolls is how many reads of a new disk see it creating.
	CreatingPolls int
	// ExecLimit is the platform's bound on one exec call's container
	// (queue, boot and mount not counted). Default DefaultExecLimit, the
	// vendor's; tests set less so as not to wait for it.
	ExecLimit time.Duration
	// QueueLatency is waited before each command runs (queue, boot, mount).
	QueueLatency time.Duration
	// PageSize is the most entries a ListObjectsV2 page holds. Default 3.
	PageSize int
	// SharedMode refuses object edits under paths a running command holds.
	SharedMode bool
	// Latency is added before every answer.
	Latency time.Duration
}

// Fault is what an injected failure does to one request.
type Fault struct {
	Status int // the status to answer; 0: no fault
	// After handles the request first and then answers Status, as a proxy
	// that lost the backend's answer would.
	After bool
}

// FaultFunc decides the fault of a request; n counts requests from 1.
type FaultFunc func(r *http.Request, n int) Fault

// Request is one request the fake answered.
type Request struct {
	Method, Path, Query string
	// Length is the request's Content-Length: -1 for a body of unknown
	// length (chunked), 0 for none.
	Length  int64
	Status  int
	Faulted bool
}

// Server is a running fake.
type Server struct {
	opts  Options
	srv   *httptest.Server
	state string // the fake's own files: disks' directories, the archil shim, checkouts

	n     atomic.Int64
	execs atomic.Int64

	mu        sync.Mutex
	disks     map[string]*disk
	fault     FaultFunc
	requests  []Request
	running   map[string]*run    // by client id
	uploads   map[string]*upload // multipart uploads in progress, by id
	completed []Upload
	// Shared mode: commands refused for changing paths not checked out.
	violations []Violation
}

type disk struct {
	ID, Name  string
	Dir       string
	Created   time.Time
	Mounts    json.RawMessage
	AllowedIP []string
	reads     int
	token     string
}

// New starts a fake.
func New(o Options) *Server {
	if o.APIKey == "" {
		o.APIKey = "archiltest-key"
	}
	if o.Region == "" {
		o.Region = "aws-us-east-1"
	}
	if o.ExecLimit <= 0 {
		o.ExecLimit = DefaultExecLimit
	}
	if o.PageSize <= 0 {
		o.PageSize = 3
	}
	state, err := os.MkdirTemp("", "archiltest-")
	if err != nil {
		panic(fmt.Sprintf("archiltest: %v", err))
	}
	s := &Server{opts: o, state: state, disks: map[string]*disk{}, running: map[string]*run{}, uploads: map[string]*upload{}}
	for _, d := range []string{"bin", "co", "disks", "hist"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			panic(fmt.Sprintf("archiltest: %v", err))
		}
	}
	if err := os.WriteFile(filepath.Join(state, "bin", "archil"), []byte(shim), 0o755); err != nil {
		panic(fmt.Sprintf("archiltest: %v", err))
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL of both the control plane and the object API.
func (s *Server) URL() string { return s.srv.URL }

// APIKey is the key the fake accepts.
func (s *Server) APIKey() string { return s.opts.APIKey }

// Close kills every running command, stops the server and removes the
// disks' directories.
func (s *Server) Close() {
	s.mu.Lock()
	runs := make([]*run, 0, len(s.running))
	for _, r := range s.running {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.kill()
	}
	s.srv.Close()
	os.RemoveAll(s.state)
}

// SetFault installs f (nil: none).
func (s *Server) SetFault(f FaultFunc) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// Requests returns every request answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Execs returns how many exec requests reached a command (the calls the
// platform bills).
func (s *Server) Execs() int64 { return s.execs.Load() }

// DiskIDs returns the ids of the disks that exist.
func (s *Server) DiskIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id := range s.disks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// DiskDir returns the directory that holds a disk's files, or "".
func (s *Server) DiskDir(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.disks[id]; d != nil {
		return d.Dir
	}
	return ""
}

// Running returns how many commands run on disk id now.
func (s *Server) Running(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.running {
		if r.disk == id {
			n++
		}
	}
	return n
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// statusWriter records the status an answer had.
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

// discard swallows an answer that a fault replaces.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	n := int(s.n.Add(1))
	if s.opts.Latency > 0 {
		time.Sleep(s.opts.Latency)
	}
	s.mu.Lock()
	fault := s.fault
	s.mu.Unlock()
	var f Fault
	if fault != nil {
		f = fault(r, n)
	}
	control := strings.HasPrefix(r.URL.Path, "/api/")
	sw := &statusWriter{ResponseWriter: w}
	switch {
	case f.Status != 0 && !f.After:
		s.faultAnswer(sw, control, f.Status)
	case f.Status != 0:
		s.route(&discard{h: http.Header{}}, r, control)
		s.faultAnswer(sw, control, f.Status)
	default:
		s.route(sw, r, control)
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Length: r.ContentLength, Status: sw.status, Faulted: f.Status != 0})
	s.mu.Unlock()
}

func (s *Server) faultAnswer(w http.ResponseWriter, control bool, status int) {
	if control {
		envelopeError(w, status, http.StatusText(status))
		return
	}
	code := "InternalError"
	if status == http.StatusServiceUnavailable {
		code = "SlowDown"
	}
	s3Error(w, status, code, http.StatusText(status), "")
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, control bool) {
	if r.Header.Get("Authorization") != "key-"+s.opts.APIKey {
		if control {
			envelopeError(w, http.StatusUnauthorized, "Invalid or missing API key")
		} else {
			s3Error(w, http.StatusForbidden, "AccessDenied", "Access Denied", "")
		}
		return
	}
	if control {
		s.control(w, r)
		return
	}
	s.objects(w, r)
}

// envelope answers {success: true, data}.
func envelope(w http.ResponseWriter, status int, data any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := map[string]any{"success": true}
	if data != nil {
		body["data"] = data
	}
	json.NewEncoder(w).Encode(body)
}

// envelopeError answers {success: false, error}.
func envelopeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"success": false, "error": msg})
}

func readJSON(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
