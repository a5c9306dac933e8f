package daytonatest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sandbox is one fake sandbox. Its fields are guarded by Server.mu.
type sandbox struct {
	id, name, snapshot, target, user string
	labels, env                      map[string]string
	state, errorReason               string
	desiredState                     string
	createdAt, updatedAt             time.Time
	lastActivity                     time.Time
	destroyedAt                      time.Time
	autoStop, autoDelete             int // minutes
	autoArchive, ttl                 int
	networkBlockAll                  bool
	networkAllowList                 string
	domainAllowList                  string
	creatingLeft                     int
	failState                        string
	stuck                            bool
	cpu, memory, disk, gpu           int

	dir      string // its temporary directory
	sessions map[string]*session
	follows  sync.WaitGroup // log followers; not guarded
	ended    chan struct{}  // closed when destroyed
}

func (sb *sandbox) gone() bool { return sb.state == "destroyed" || sb.state == "destroying" }

// createSandbox is the CreateSandbox body, the fields the fake reads.
type createSandbox struct {
	Name               string            `json:"name"`
	Snapshot           string            `json:"snapshot"`
	User               string            `json:"user"`
	Env                map[string]string `json:"env"`
	Labels             map[string]string `json:"labels"`
	Public             bool              `json:"public"`
	NetworkBlockAll    *bool             `json:"networkBlockAll"`
	NetworkAllowList   *string           `json:"networkAllowList"`
	DomainAllowList    *string           `json:"domainAllowList"`
	Target             string            `json:"target"`
	CPU                *int              `json:"cpu"`
	GPU                *int              `json:"gpu"`
	Memory             *int              `json:"memory"`
	Disk               *int              `json:"disk"`
	AutoStopInterval   *int              `json:"autoStopInterval"`
	AutoArchive        *int              `json:"autoArchiveInterval"`
	AutoDeleteInterval *int              `json:"autoDeleteInterval"`
	TTLMinutes         *int              `json:"ttlMinutes"`
	BuildInfo          json.RawMessage   `json:"buildInfo"`
}

// dto renders the Sandbox DTO.
func (s *Server) dto(sb *sandbox) map[string]any {
	m := map[string]any{
		"id": sb.id, "name": sb.name, "organizationId": "daytonatest-org", "snapshot": sb.snapshot, "user": sb.user,
		"env": sb.env, "labels": sb.labels, "public": false, "target": sb.target,
		"cpu": sb.cpu, "gpu": sb.gpu, "memory": sb.memory, "disk": sb.disk,
		"state": sb.state, "desiredState": sb.desiredState,
		"autoStopInterval": sb.autoStop, "autoArchiveInterval": sb.autoArchive, "autoDeleteInterval": sb.autoDelete,
		"createdAt": sb.createdAt.UTC().Format(time.RFC3339Nano), "updatedAt": sb.updatedAt.UTC().Format(time.RFC3339Nano),
		"lastActivityAt":  sb.lastActivity.UTC().Format(time.RFC3339Nano),
		"networkBlockAll": sb.networkBlockAll, "networkAllowList": sb.networkAllowList,
		"toolboxProxyUrl": s.srv.URL + "/toolbox", "daemonVersion": "daytonatest", "runnerId": "daytonatest-runner",
		"sandboxClass": "container", "recoverable": false,
	}
	if sb.domainAllowList != "" {
		m["domainAllowList"] = sb.domainAllowList
	}
	if sb.errorReason != "" {
		m["errorReason"] = sb.errorReason
	}
	if sb.ttl > 0 {
		m["autoDestroyAt"] = sb.createdAt.Add(time.Duration(sb.ttl) * s.opts.Minute).UTC().Format(time.RFC3339Nano)
	}
	return m
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// find returns the sandbox with id or name, destroyed ones excluded.
// Caller holds s.mu.
func (s *Server) find(idOrName string) *sandbox {
	if sb := s.sandboxes[idOrName]; sb != nil && !sb.gone() {
		return sb
	}
	for _, sb := range s.sandboxes {
		if sb.name == idOrName && !sb.gone() {
			return sb
		}
	}
	return nil
}

func (s *Server) serveSandbox(w http.ResponseWriter, r *http.Request, rest string) {
	parts := strings.Split(rest, "/")
	switch {
	case rest == "" && r.Method == http.MethodPost:
		s.createSandbox(w, r)
	case rest == "" && r.Method == http.MethodGet:
		s.listSandboxes(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		s.getSandbox(w, parts[0])
	case len(parts) == 1 && r.Method == http.MethodDelete:
		s.deleteSandbox(w, parts[0])
	case len(parts) >= 2:
		s.sandboxAction(w, r, parts[0], parts[1:])
	default:
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, "Cannot "+r.Method+" /api/sandbox/"+rest))
	}
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req createSandbox
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "invalid body: "+err.Error()))
		return
	}
	if req.BuildInfo == nil && (req.CPU != nil || req.GPU != nil || req.Memory != nil || req.Disk != nil) && req.Snapshot != "" {
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "Cannot specify Sandbox resources when using a snapshot"))
		return
	}
	if req.NetworkAllowList != nil && *req.NetworkAllowList != "" {
		for _, c := range strings.Split(*req.NetworkAllowList, ",") {
			if !strings.Contains(c, "/") {
				writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "networkAllowList must hold CIDR blocks"))
				return
			}
		}
	}
	now := time.Now()
	sb := &sandbox{
		id: newID(), name: req.Name, snapshot: req.Snapshot, target: req.Target, user: req.User,
		labels: maps.Clone(req.Labels), env: maps.Clone(req.Env),
		state: "creating", desiredState: "started", createdAt: now, updatedAt: now, lastActivity: now,
		autoStop: 15, autoDelete: -1, autoArchive: 7 * 24 * 60,
		creatingLeft: s.opts.CreatingPolls, failState: s.opts.FailState, stuck: s.opts.StuckCreating,
		cpu: 1, memory: 1, disk: 3,
		sessions: map[string]*session{}, ended: make(chan struct{}),
	}
	if sb.labels == nil {
		sb.labels = map[string]string{}
	}
	if sb.env == nil {
		sb.env = map[string]string{}
	}
	if sb.name == "" {
		sb.name = sb.id
	}
	if sb.snapshot == "" {
		sb.snapshot = "daytonaio/sandbox:daytonatest"
	}
	if sb.target == "" {
		sb.target = "us"
	}
	if req.AutoStopInterval != nil {
		sb.autoStop = *req.AutoStopInterval
	}
	if req.AutoDeleteInterval != nil {
		sb.autoDelete = *req.AutoDeleteInterval
	}
	if req.AutoArchive != nil {
		sb.autoArchive = *req.AutoArchive
	}
	if req.TTLMinutes != nil {
		sb.ttl = *req.TTLMinutes
	}
	if !s.opts.IgnoreNetwork {
		if req.NetworkBlockAll != nil {
			sb.networkBlockAll = *req.NetworkBlockAll
		}
		if req.NetworkAllowList != nil {
			sb.networkAllowList = *req.NetworkAllowList
		}
		if req.DomainAllowList != nil {
			sb.domainAllowList = *req.DomainAllowList
		}
	}
	dir, err := os.MkdirTemp(s.root, "sandbox-")
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, nestError(http.StatusInternalServerError, err.Error()))
		return
	}
	sb.dir = dir
	s.mu.Lock()
	if s.find(sb.name) != nil {
		s.mu.Unlock()
		os.RemoveAll(dir)
		writeJSON(w, http.StatusConflict, nestError(http.StatusConflict, fmt.Sprintf("Sandbox with name %s already exists", sb.name)))
		return
	}
	s.sandboxes[sb.id] = sb
	if sb.creatingLeft == 0 {
		s.settle(sb) // a fast Daytona answers the create with the sandbox started
	}
	out := s.dto(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out) // Daytona answers 200, not 201
}

// settle moves a creating sandbox on by one read: it stays creating for
// Options.CreatingPolls reads. Caller holds s.mu.
func (s *Server) settle(sb *sandbox) {
	if sb.state != "creating" || sb.stuck {
		return
	}
	if sb.creatingLeft > 0 {
		sb.creatingLeft--
		return
	}
	sb.updatedAt = time.Now()
	if sb.failState != "" {
		sb.state, sb.errorReason = sb.failState, s.opts.ErrorReason
		if sb.errorReason == "" {
			sb.errorReason = "daytonatest: injected failure"
		}
		return
	}
	sb.state = "started"
}

func (s *Server) getSandbox(w http.ResponseWriter, idOrName string) {
	s.mu.Lock()
	sb := s.find(idOrName)
	if sb == nil {
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOrName)))
		return
	}
	s.settle(sb)
	out := s.dto(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, idOrName string) {
	s.mu.Lock()
	sb := s.find(idOrName)
	if sb == nil {
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOrName)))
		return
	}
	sb.state, sb.desiredState = "destroying", "destroyed"
	out := s.dto(sb)
	s.mu.Unlock()
	s.destroy(sb, "deleted")
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) sandboxAction(w http.ResponseWriter, r *http.Request, idOrName string, action []string) {
	s.mu.Lock()
	sb := s.find(idOrName)
	s.mu.Unlock()
	if sb == nil {
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOrName)))
		return
	}
	minutes := func() (int, bool) {
		if len(action) != 2 {
			return 0, false
		}
		n, err := strconv.Atoi(action[1])
		return n, err == nil
	}
	switch {
	case action[0] == "start" && r.Method == http.MethodPost:
		s.mu.Lock()
		switch sb.state {
		case "stopped", "archived":
			sb.state, sb.desiredState, sb.updatedAt, sb.lastActivity = "started", "started", time.Now(), time.Now()
		case "started":
		default:
			st := sb.state
			s.mu.Unlock()
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "Sandbox is in state "+st+" and cannot be started"))
			return
		}
		out := s.dto(sb)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case action[0] == "stop" && r.Method == http.MethodPost:
		s.stopSandbox(sb, "stopped")
		s.mu.Lock()
		out := s.dto(sb)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case action[0] == "labels" && r.Method == http.MethodPut:
		var body struct {
			Labels map[string]string `json:"labels"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, err.Error()))
			return
		}
		s.mu.Lock()
		sb.labels = maps.Clone(body.Labels)
		out := map[string]any{"labels": sb.labels}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case action[0] == "last-activity" && r.Method == http.MethodPost:
		s.mu.Lock()
		sb.lastActivity = time.Now()
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	case action[0] == "toolbox-proxy-url" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"url": s.srv.URL + "/toolbox"})
	case r.Method == http.MethodPost && (action[0] == "autostop" || action[0] == "autodelete" || action[0] == "autoarchive" || action[0] == "ttl"):
		n, ok := minutes()
		if !ok {
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "invalid interval"))
			return
		}
		s.mu.Lock()
		switch action[0] {
		case "autostop":
			sb.autoStop = n
		case "autodelete":
			sb.autoDelete = n
		case "autoarchive":
			sb.autoArchive = n
		case "ttl":
			sb.ttl = n
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	default:
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, "Cannot "+r.Method+" "+r.URL.Path))
	}
}

// listSandboxes serves GET /sandbox: the JSON labels filter, repeated
// states, cursor (or page) pagination.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var want map[string]string
	if l := q.Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "labels must be a JSON object"))
			return
		}
	}
	states := q["states"]
	namePrefix := strings.ToLower(q.Get("name"))
	limit := s.opts.PageSize
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 && l < limit {
		limit = l
	}
	now := time.Now()
	s.mu.Lock()
	var rows []*sandbox
	for _, sb := range s.sandboxes {
		if now.Sub(sb.createdAt) < s.opts.ListDelay {
			continue // not yet visible: listings are eventually consistent
		}
		if sb.gone() && now.Sub(sb.destroyedAt) >= s.opts.ListDelay {
			continue
		}
		match := true
		for k, v := range want {
			if sb.labels[k] != v {
				match = false
			}
		}
		if !match || len(states) > 0 && !slices.Contains(states, sb.state) {
			continue
		}
		if namePrefix != "" && !strings.HasPrefix(strings.ToLower(sb.name), namePrefix) {
			continue
		}
		rows = append(rows, sb)
	}
	slices.SortFunc(rows, func(a, b *sandbox) int {
		if c := a.createdAt.Compare(b.createdAt); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	start := 0
	switch s.opts.ListShape {
	case "pages":
		if p, err := strconv.Atoi(q.Get("page")); err == nil && p > 1 {
			start = (p - 1) * limit
		}
	case "array":
		limit = len(rows) + 1
	default:
		if c := q.Get("cursor"); c != "" {
			b, err := base64.RawURLEncoding.DecodeString(c)
			n, err2 := strconv.Atoi(string(b))
			if err != nil || err2 != nil || n < 0 {
				s.mu.Unlock()
				writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "invalid cursor"))
				return
			}
			start = n
		}
	}
	start = min(start, len(rows))
	end := min(start+limit, len(rows))
	items := make([]map[string]any, 0, end-start)
	for _, sb := range rows[start:end] {
		d := s.dto(sb)
		delete(d, "env")
		items = append(items, d)
	}
	total := len(rows)
	s.mu.Unlock()
	switch s.opts.ListShape {
	case "array":
		writeJSON(w, http.StatusOK, items)
	case "pages":
		page := start/limit + 1
		pages := (total + limit - 1) / limit
		writeJSON(w, http.StatusOK, map[string]any{"items": items, "total": total, "page": page, "totalPages": pages})
	default:
		var next any
		if end < total {
			next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
		}
		writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
	}
}

// stopSandbox kills a started sandbox's processes and marks it stopped; an
// autoDeleteInterval of 0 then deletes it.
func (s *Server) stopSandbox(sb *sandbox, why string) {
	s.mu.Lock()
	if sb.state != "started" {
		s.mu.Unlock()
		return
	}
	sb.state, sb.desiredState, sb.updatedAt = "stopping", "stopped", time.Now()
	s.mu.Unlock()
	s.killAll(sb)
	s.mu.Lock()
	sb.state = "stopped"
	del := sb.autoDelete == 0
	s.mu.Unlock()
	if del {
		s.mu.Lock()
		sb.state = "destroying"
		s.mu.Unlock()
		s.destroy(sb, why+", then deleted (autoDeleteInterval 0)")
	}
}

// destroy ends a sandbox: its processes killed, its followers ended, its
// directory removed; reads then answer 404.
func (s *Server) destroy(sb *sandbox, why string) {
	s.mu.Lock()
	if sb.state == "destroyed" {
		s.mu.Unlock()
		return
	}
	sb.state, sb.desiredState, sb.destroyedAt, sb.updatedAt = "destroyed", "destroyed", time.Now(), time.Now()
	close(sb.ended)
	s.mu.Unlock()
	s.killAll(sb)
	sb.follows.Wait()
	os.RemoveAll(sb.dir)
}

// killAll kills every process whose environment carries the sandbox's
// DAYTONA_SANDBOX_ID, until none is left (a fork may race the first pass).
func (s *Server) killAll(sb *sandbox) {
	marker := []byte("DAYTONA_SANDBOX_ID=" + sb.id + "\x00")
	for pass := 0; pass < 50; pass++ {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := 0
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil || !containsEnv(env, marker) {
				continue
			}
			found++
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if found == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func containsEnv(env, marker []byte) bool {
	for len(env) > 0 {
		if len(env) >= len(marker) && string(env[:len(marker)]) == string(marker) {
			return true
		}
		i := 0
		for i < len(env) && env[i] != 0 {
			i++
		}
		env = env[min(i+1, len(env)):]
	}
	return false
}

// timers enforces ttlMinutes and autoStopInterval, and forgets destroyed
// sandboxes once listings no longer show them.
func (s *Server) timers() {
	defer s.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		var expire, idle []*sandbox
		s.mu.Lock()
		for id, sb := range s.sandboxes {
			switch {
			case sb.state == "destroyed":
				if now.Sub(sb.destroyedAt) > s.opts.ListDelay+time.Minute {
					delete(s.sandboxes, id)
				}
			case sb.ttl > 0 && now.After(sb.createdAt.Add(time.Duration(sb.ttl)*s.opts.Minute)):
				sb.state = "destroying"
				expire = append(expire, sb)
			case sb.state == "started" && sb.autoStop > 0 && now.After(sb.lastActivity.Add(time.Duration(sb.autoStop)*s.opts.Minute)):
				idle = append(idle, sb)
			}
		}
		s.mu.Unlock()
		for _, sb := range expire {
			go s.destroy(sb, "ttl passed")
		}
		for _, sb := range idle {
			go s.stopSandbox(sb, "auto-stopped")
		}
	}
}
