package daytonatest

import (
	"net/http"
	"strings"
	"time"
)

// Route is an operation the fake serves: its plane ("api", "toolbox", or
// "toolbox-old" with Options.OldDaemon, as package spec names them), its
// method, and its path as the vendor's spec writes it, relative to the
// plane's base.
type Route struct {
	Plane, Method, Path string
}

// route is a served operation and its handler.
type route struct {
	Route
	h http.HandlerFunc
}

// toolboxRoute is a toolbox operation: for the current daemon, the older
// one, or both.
type toolboxRoute struct {
	method, path string
	current, old bool
	h            func(http.ResponseWriter, *http.Request, *sandbox)
}

// served lists the operations, each under the path the spec gives it.
func (s *Server) served() []route {
	api := []route{
		{Route{"api", "POST", "/sandbox"}, s.createSandbox},
		{Route{"api", "GET", "/sandbox"}, s.listSandboxes},
		{Route{"api", "GET", "/sandbox/{sandboxIdOrName}"}, s.getSandbox},
		{Route{"api", "DELETE", "/sandbox/{sandboxIdOrName}"}, s.deleteSandbox},
		{Route{"api", "POST", "/sandbox/{sandboxIdOrName}/start"}, s.startSandbox},
		{Route{"api", "POST", "/sandbox/{sandboxIdOrName}/stop"}, s.stopHandler},
		{Route{"api", "POST", "/sandbox/{sandboxIdOrName}/snapshot"}, s.createSandboxSnapshot},
		{Route{"api", "PUT", "/sandbox/{sandboxIdOrName}/labels"}, s.replaceLabels},
		{Route{"api", "POST", "/sandbox/{sandboxId}/last-activity"}, s.lastActivity},
		{Route{"api", "GET", "/sandbox/{sandboxId}/toolbox-proxy-url"}, s.toolboxProxyURL},
		{Route{"api", "POST", "/sandbox/{sandboxIdOrName}/autostop/{interval}"}, s.setTimer("autostop")},
		{Route{"api", "POST", "/sandbox/{sandboxIdOrName}/autodelete/{interval}"}, s.setTimer("autodelete")},
		{Route{"api", "POST", "/sandbox/{sandboxIdOrName}/autoarchive/{interval}"}, s.setTimer("autoarchive")},
		{Route{"api", "POST", "/sandbox/{sandboxIdOrName}/ttl/{ttlMinutes}"}, s.setTimer("ttl")},
	}
	tb := []toolboxRoute{
		{"POST", "/process/execute", true, false, s.execute},
		{"POST", "/process/execute", false, true, s.executeSplit},
		{"POST", "/process/session", true, true, s.createSession},
		{"GET", "/process/session", true, true, s.listSessions},
		{"GET", "/process/session/{sessionId}", true, true, s.getSession},
		{"DELETE", "/process/session/{sessionId}", true, true, s.deleteSession},
		{"POST", "/process/session/{sessionId}/exec", true, true, s.sessionExec},
		{"GET", "/process/session/{sessionId}/command/{commandId}", true, true, s.getCommand},
		{"GET", "/process/session/{sessionId}/command/{commandId}/logs", true, true, s.commandLogs},
		{"POST", "/process/session/{sessionId}/command/{commandId}/input", true, true, s.commandInput},
		{"GET", "/files", true, true, s.listFiles},
		{"DELETE", "/files", true, true, deleteFile},
		{"GET", "/files/info", true, true, s.fileInfoHandler},
		{"GET", "/files/download", true, true, downloadFile},
		{"POST", "/files/bulk-download", true, true, bulkDownload},
		{"POST", "/files/bulk-upload", true, true, bulkUpload},
		{"POST", "/files/upload", false, true, uploadFile},
		{"POST", "/files/folder", true, true, createFolder},
		{"POST", "/files/move", true, true, moveFile},
		{"POST", "/files/permissions", true, true, setPermissions},
		{"GET", "/work-dir", true, true, workDir},
		{"GET", "/user-home-dir", true, true, workDir},
		{"GET", "/version", true, true, version},
	}
	out := api
	for _, t := range tb {
		plane := "toolbox"
		if s.opts.OldDaemon {
			plane = "toolbox-old"
		}
		if s.opts.OldDaemon && t.old || !s.opts.OldDaemon && t.current {
			out = append(out, route{Route{plane, t.method, t.path}, s.inToolbox(t.h)})
		}
	}
	return out
}

// Routes returns the operations the fake serves.
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.served() {
		out = append(out, r.Route)
	}
	return out
}

// routes builds the mux: every served operation under its plane's base,
// and for every path an answer of 404 in the plane's own words to the
// methods it does not serve (and to paths it does not know).
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	fallback := map[string]bool{}
	for _, r := range s.served() {
		p := "/api" + r.Path
		if r.Plane != "api" {
			p = "/toolbox/{sandboxId}" + r.Path
		}
		mux.HandleFunc(r.Method+" "+p, r.h)
		if !fallback[p] {
			fallback[p] = true
			mux.HandleFunc(p, notFound)
		}
	}
	mux.HandleFunc("/", notFound)
	return mux
}

func notFound(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/toolbox/") {
		toolboxError(w, r, http.StatusNotFound, errNoRoute(r))
		return
	}
	writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, "Cannot "+r.Method+" "+r.URL.Path))
}

type noRoute string

func (e noRoute) Error() string { return string(e) }

func errNoRoute(r *http.Request) error { return noRoute("no route " + r.Method + " " + r.URL.Path) }

// inToolbox runs h for the sandbox the path names, when it is started: the
// proxy answers 404 for a sandbox it does not know and 400 for one that
// is not running.
func (s *Server) inToolbox(h func(http.ResponseWriter, *http.Request, *sandbox)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		sb := s.sandboxes[r.PathValue("sandboxId")]
		if sb != nil {
			s.advance(sb, time.Now())
		}
		if sb == nil || sb.state == stateDestroyed {
			s.mu.Unlock()
			writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, "Sandbox not found"))
			return
		}
		if sb.state != stateStarted {
			st := sb.state
			s.mu.Unlock()
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "Sandbox is not started (state "+st+")"))
			return
		}
		sb.lastActivity = time.Now()
		s.mu.Unlock()
		h(w, r, sb)
	}
}

// SandboxIDs returns the ids of the sandboxes that exist and are not
// being deleted (a DELETE was not accepted for them).
func (s *Server) SandboxIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sandboxes {
		if sb.state != stateDestroyed && sb.desiredState != stateDestroyed {
			ids = append(ids, id)
		}
	}
	return ids
}

// State returns a sandbox's state ("" when the fake never knew it).
func (s *Server) State(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		s.advance(sb, time.Now())
		return sb.state
	}
	return ""
}

// Stop stops a started sandbox as its auto-stop would: it is stopping
// for Options.StoppingFor, then stopped.
func (s *Server) Stop(id string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb != nil {
		s.stopSandbox(sb, "stopped by the test")
	}
}

// Pause pauses a started sandbox (its processes are frozen) until a start
// resumes it.
func (s *Server) Pause(id string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	if sb == nil || sb.state != stateStarted || sb.desiredState != stateStarted {
		s.mu.Unlock()
		return
	}
	sb.state, sb.desiredState, sb.updatedAt = statePaused, statePaused, time.Now()
	s.mu.Unlock()
	s.signalAll(sb, sigStop)
}

// LastActivity returns when a sandbox last saw activity.
func (s *Server) LastActivity(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.lastActivity
	}
	return time.Time{}
}
