package e2btest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// newSandboxBody is NewSandboxV2, every documented field; an unknown one
// is refused, so a client that misspells a field finds out.
type newSandboxBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int32            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	Secure              *bool             `json:"secure"`
}

// networkConfig is SandboxNetworkConfig.
type networkConfig struct {
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    string          `json:"maskRequestHost,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	HTTPSPorts         []int           `json:"httpsPorts,omitempty"`
}

// apiMux serves the control plane.
func (s *Server) apiMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/sandboxes", s.create)
	mux.HandleFunc("GET /v2/sandboxes", s.list)
	mux.HandleFunc("GET /sandboxes/{id}", s.detail)
	mux.HandleFunc("DELETE /sandboxes/{id}", s.kill)
	mux.HandleFunc("POST /sandboxes/{id}/timeout", s.setTimeout)
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", s.connect)
	mux.HandleFunc("POST /sandboxes/{id}/pause", s.pause)
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", s.snapshot)
	mux.HandleFunc("DELETE /templates/{templateID}", s.deleteTemplate)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-KEY") != s.opts.APIKey {
			jsonError(w, http.StatusUnauthorized, "Invalid API key, it must start with 'e2b_' prefix")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var body newSandboxBody
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		jsonError(w, http.StatusBadRequest, "request body has an error: %v", err)
		return
	}
	tpl, snap, ok := s.template(body.TemplateID)
	if !ok {
		jsonError(w, http.StatusNotFound, "template '%s' not found", body.TemplateID)
		return
	}
	timeout := 300 * time.Second
	if body.Timeout != nil {
		timeout = time.Duration(*body.Timeout) * time.Second
	}
	if timeout <= 0 || timeout > s.opts.MaxTimeout {
		jsonError(w, http.StatusBadRequest, "Timeout cannot be greater than %d hours", int(s.opts.MaxTimeout.Hours()))
		return
	}
	if body.AllowInternetAccess != nil && !*body.AllowInternetAccess && body.Network != nil && len(body.Network.AllowOut) > 0 {
		jsonError(w, http.StatusBadRequest, "allow_internet_access false and network.allowOut cannot be combined")
		return
	}
	sb, err := s.newSandbox(body, tpl, timeout)
	if err == nil && snap != "" {
		err = copyDir(snap, sb.home)
	}
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "creating the sandbox: %v", err)
		return
	}
	writeJSON(w, http.StatusCreated, sb.info(false))
}

func (s *Server) detail(w http.ResponseWriter, r *http.Request) {
	sb := s.get(r.PathValue("id"))
	if sb == nil || !sb.exists() {
		jsonError(w, http.StatusNotFound, "sandbox \"%s\" doesn't exist or you don't have access to it", r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, sb.info(true))
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	sb := s.get(r.PathValue("id"))
	if sb == nil || !sb.exists() {
		jsonError(w, http.StatusNotFound, "sandbox \"%s\" not found", r.PathValue("id"))
		return
	}
	s.end(sb, "killed")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Timeout int32 `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		jsonError(w, http.StatusBadRequest, "request body has an error: %v", err)
		return
	}
	sb := s.get(r.PathValue("id"))
	if sb == nil || !sb.running() {
		jsonError(w, http.StatusNotFound, "sandbox \"%s\" not found", r.PathValue("id"))
		return
	}
	d := time.Duration(body.Timeout) * time.Second
	if d < 0 || time.Since(sb.startedAt)+d > s.opts.MaxTimeout {
		jsonError(w, http.StatusBadRequest, "Timeout cannot be greater than %d hours", int(s.opts.MaxTimeout.Hours()))
		return
	}
	sb.setEnd(time.Now().Add(d))
	w.WriteHeader(http.StatusNoContent)
}

// connect answers POST /v2/sandboxes/{id}/connect: a running sandbox's
// timeout is extended (never shortened) to the one given (default 300 s),
// 200; a paused one is resumed with it, 201.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Timeout *int32 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	sb := s.known(w, r, &body)
	if sb == nil {
		return
	}
	timeout := 300 * time.Second
	if body.Timeout != nil {
		timeout = time.Duration(*body.Timeout) * time.Second
	}
	if sb.state() == "paused" {
		sb.resume(timeout)
		writeJSON(w, http.StatusCreated, sb.info(false))
		return
	}
	if end := time.Now().Add(timeout); end.After(sb.end()) {
		sb.setEnd(end)
	}
	writeJSON(w, http.StatusOK, sb.info(false))
}

// pause answers POST /sandboxes/{id}/pause (SandboxPauseRequest: memory,
// default true): 204; 409 for a sandbox already paused, 404 for one not
// known.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Memory *bool `json:"memory"`
	}
	sb := s.known(w, r, &body)
	if sb == nil {
		return
	}
	if !sb.pause(body.Memory == nil || *body.Memory) {
		jsonError(w, http.StatusConflict, "sandbox \"%s\" is already paused", r.PathValue("id"))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// list answers GET /v2/sandboxes.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filters, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		jsonError(w, http.StatusBadRequest, "error parsing metadata: %v", err)
		return
	}
	var states []string
	for _, v := range q["state"] {
		states = append(states, strings.Split(v, ",")...)
	}
	if len(states) == 0 {
		states = []string{"running", "paused"}
	}
	limit := s.opts.PageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			jsonError(w, http.StatusBadRequest, "limit must be a positive number")
			return
		}
		limit = min(n, s.opts.PageSize)
	}
	s.mu.Lock()
	var all []*sandbox
	for _, sb := range s.sandboxes {
		if sb.exists() && slices.Contains(states, sb.state()) && matches(sb.metadata, filters) {
			all = append(all, sb)
		}
	}
	s.mu.Unlock()
	asc := q.Get("order") == "asc"
	slices.SortFunc(all, func(a, b *sandbox) int {
		c := a.startedAt.Compare(b.startedAt)
		if c == 0 {
			c = strings.Compare(a.id, b.id)
		}
		if !asc {
			c = -c
		}
		return c
	})
	start := 0
	if tok := q.Get("nextToken"); tok != "" {
		raw, err := base64.URLEncoding.DecodeString(tok)
		if err != nil {
			jsonError(w, http.StatusBadRequest, "invalid next token")
			return
		}
		start = len(all)
		for i, sb := range all {
			if cursor(sb) == string(raw) {
				start = i + 1
				break
			}
		}
	}
	end := min(start+limit, len(all))
	page := make([]any, 0, end-start)
	for _, sb := range all[start:end] {
		page = append(page, sb.listed())
	}
	if end < len(all) {
		w.Header().Set("X-Next-Token", base64.URLEncoding.EncodeToString([]byte(cursor(all[end-1]))))
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(s.running()))
	writeJSON(w, http.StatusOK, page)
}

func cursor(sb *sandbox) string { return sb.startedAt.Format(time.RFC3339Nano) + "__" + sb.id }

func (s *Server) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sb := range s.sandboxes {
		if sb.running() {
			n++
		}
	}
	return n
}

// parseMetadataQuery reads the metadata filter as E2B's API does: the
// query value (already unescaped once by the URL) is unescaped again, split
// into k=v pairs at & and =, and each key and value unescaped once more.
func parseMetadataQuery(q string) (map[string]string, error) {
	if q == "" {
		return nil, nil
	}
	query, err := url.QueryUnescape(q)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, pair := range strings.Split(query, "&") {
		parts := strings.Split(pair, "=")
		if len(parts) != 2 {
			return nil, errInvalidPair
		}
		k, err := url.QueryUnescape(parts[0])
		if err != nil {
			return nil, err
		}
		v, err := url.QueryUnescape(parts[1])
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

type constError string

func (e constError) Error() string { return string(e) }

const errInvalidPair = constError("invalid key value pair in query")

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// newID returns a sandbox id or token in E2B's style: lowercase letters and
// digits.
func newID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// known decodes a request's optional JSON body into body and returns the
// sandbox its path names, running or paused; else it answers 400 or 404
// and returns nil.
func (s *Server) known(w http.ResponseWriter, r *http.Request, body any) *sandbox {
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(body); err != nil {
			jsonError(w, http.StatusBadRequest, "request body has an error: %v", err)
			return nil
		}
	}
	sb := s.get(r.PathValue("id"))
	if sb == nil || !sb.exists() {
		jsonError(w, http.StatusNotFound, "sandbox \"%s\" not found", r.PathValue("id"))
		return nil
	}
	return sb
}
