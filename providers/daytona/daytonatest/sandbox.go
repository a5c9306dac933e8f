package daytonatest

import (
	"cmp"
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

// Sandbox states and desired states (SandboxState, SandboxDesiredState).
const (
	stateCreating   = "creating"
	stateStarted    = "started"
	stateStopping   = "stopping"
	stateStopped    = "stopped"
	stateDestroying = "destroying"
	stateDestroyed  = "destroyed"
	statePaused     = "paused"
	stateArchived   = "archived"
)

// pendingStates are the states of a change in progress, in which the API
// refuses another (409 "Sandbox state change in progress").
var pendingStates = []string{
	stateCreating, "starting", stateStopping, "restoring", stateDestroying, "pending_build", "building_snapshot",
	"pulling_snapshot", "archiving", "resizing", "snapshotting", "forking", "pausing", "resuming",
}

// sandbox is one fake sandbox. Its fields are guarded by Server.mu.
type sandbox struct {
	id, name, snapshot, target, user string
	labels, env                      map[string]string
	state, errorReason               string
	desiredState                     string
	createdAt, updatedAt             time.Time
	lastActivity                     time.Time
	settleAt                         time.Time // when a creating or stopping state ends
	deletedAt                        time.Time // when a DELETE was accepted
	destroyedAt                      time.Time
	autoStop, autoDelete             int // minutes
	autoArchive, ttl                 int
	networkBlockAll                  bool
	networkAllowList                 string
	domainAllowList                  string
	creatingLeft                     int
	failState                        string
	cpu, memory, disk, gpu           int
	destroying                       bool          // destroy has begun
	cleaned                          chan struct{} // closed once its processes are killed and its directory removed

	dir      string // its temporary directory
	sessions map[string]*session
	follows  sync.WaitGroup // log followers; not guarded
	ended    chan struct{}  // closed when destroyed
}

// pending reports a change in progress: a pending state, or a DELETE not
// carried out yet.
func (sb *sandbox) pending() bool {
	return slices.Contains(pendingStates, sb.state) || sb.desiredState == stateDestroyed && sb.state != stateDestroyed
}

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

// dto renders the Sandbox DTO (list: the SandboxListItem, which has no
// env).
func (s *Server) dto(sb *sandbox, list bool) map[string]any {
	m := map[string]any{
		"id": sb.id, "name": sb.name, "organizationId": "daytonatest-org", "snapshot": sb.snapshot, "user": sb.user,
		"labels": sb.labels, "public": false, "target": sb.target,
		"cpu": sb.cpu, "gpu": sb.gpu, "memory": sb.memory, "disk": sb.disk,
		"state": sb.state, "desiredState": sb.desiredState,
		"autoStopInterval": sb.autoStop, "autoArchiveInterval": sb.autoArchive, "autoDeleteInterval": sb.autoDelete,
		"createdAt": sb.createdAt.UTC().Format(time.RFC3339Nano), "updatedAt": sb.updatedAt.UTC().Format(time.RFC3339Nano),
		"lastActivityAt":  sb.lastActivity.UTC().Format(time.RFC3339Nano),
		"networkBlockAll": sb.networkBlockAll, "networkAllowList": sb.networkAllowList,
		"toolboxProxyUrl": s.srv.URL + "/toolbox", "daemonVersion": "daytonatest", "runnerId": "daytonatest-runner",
		"sandboxClass": "container", "recoverable": false,
	}
	if !list {
		m["env"], m["kvm"] = sb.env, false
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

// idOf is the sandbox the path names.
func idOf(r *http.Request) string {
	if v := r.PathValue("sandboxIdOrName"); v != "" {
		return v
	}
	return r.PathValue("sandboxId")
}

// find returns the sandbox with id or name, destroyed ones excluded, its
// state brought up to now. Caller holds s.mu.
func (s *Server) find(idOrName string) *sandbox {
	now := time.Now()
	sb := s.sandboxes[idOrName]
	if sb == nil {
		for _, c := range s.sandboxes {
			if c.name == idOrName && c.state != stateDestroyed {
				sb = c
			}
		}
	}
	if sb == nil {
		return nil
	}
	s.advance(sb, now)
	if sb.state == stateDestroyed {
		return nil
	}
	return sb
}

// lookup answers for a sandbox the path names, or 404.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *sandbox {
	s.mu.Lock()
	sb := s.find(idOf(r))
	s.mu.Unlock()
	if sb == nil {
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOf(r))))
	}
	return sb
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req createSandbox
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "invalid body: "+err.Error()))
		return
	}
	msg := checkCreate(req)
	if msg == "" {
		msg = s.checkSnapshot(req.Snapshot)
	}
	if msg != "" {
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, msg))
		return
	}
	sb := s.newSandbox(req)
	dir, err := os.MkdirTemp(s.root, "sandbox-")
	if err == nil {
		err = s.fromSnapshot(req.Snapshot, dir)
	}
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
		s.settle(sb, time.Now()) // the server waits a little for the sandbox to start
	}
	out, failed, reason := s.dto(sb, false), sb.failState != "" && sb.state == sb.failState, sb.errorReason
	s.mu.Unlock()
	if failed {
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "Sandbox failed to start: "+reason))
		return
	}
	writeJSON(w, http.StatusOK, out) // Daytona answers 200, not 201
}

// checkCreate is the create's validation: resources only with a build,
// CIDRs in networkAllowList.
func checkCreate(req createSandbox) string {
	if req.BuildInfo == nil && (req.CPU != nil || req.GPU != nil || req.Memory != nil || req.Disk != nil) && req.Snapshot != "" {
		return "Cannot specify Sandbox resources when using a snapshot"
	}
	if req.NetworkAllowList != nil && *req.NetworkAllowList != "" {
		for _, c := range strings.Split(*req.NetworkAllowList, ",") {
			if !strings.Contains(c, "/") {
				return "networkAllowList must hold CIDR blocks"
			}
		}
	}
	return ""
}

// newSandbox makes the sandbox a create asks for, creating.
func (s *Server) newSandbox(req createSandbox) *sandbox {
	now := time.Now()
	sb := &sandbox{
		id: newID(), name: req.Name, snapshot: req.Snapshot, target: req.Target, user: req.User,
		labels: maps.Clone(req.Labels), env: maps.Clone(req.Env),
		state: stateCreating, desiredState: stateStarted, createdAt: now, updatedAt: now, lastActivity: now,
		settleAt: now.Add(s.opts.CreatingFor), autoStop: 15, autoDelete: -1, autoArchive: 7 * 24 * 60,
		creatingLeft: s.opts.CreatingPolls, failState: s.opts.FailState,
		cpu: 1, memory: 1, disk: 3,
		sessions: map[string]*session{}, ended: make(chan struct{}), cleaned: make(chan struct{}),
	}
	if sb.labels == nil {
		sb.labels = map[string]string{}
	}
	if sb.env == nil {
		sb.env = map[string]string{}
	}
	sb.name = cmp.Or(sb.name, sb.id)
	sb.snapshot = cmp.Or(sb.snapshot, baseSnapshot)
	sb.target = cmp.Or(sb.target, "us")
	sb.user = cmp.Or(sb.user, "daytona")
	for _, f := range []struct {
		dst *int
		src *int
	}{{&sb.autoStop, req.AutoStopInterval}, {&sb.autoDelete, req.AutoDeleteInterval}, {&sb.autoArchive, req.AutoArchive}, {&sb.ttl, req.TTLMinutes}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if !s.opts.IgnoreNetwork {
		if req.NetworkBlockAll != nil {
			sb.networkBlockAll = *req.NetworkBlockAll
		}
		sb.networkAllowList = deref(req.NetworkAllowList)
		sb.domainAllowList = deref(req.DomainAllowList)
	}
	return sb
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// settle moves a creating sandbox on by one read: it stays creating for
// Options.CreatingPolls reads and until Options.CreatingFor has passed.
// Caller holds s.mu.
func (s *Server) settle(sb *sandbox, now time.Time) {
	if sb.state != stateCreating {
		return
	}
	if sb.creatingLeft > 0 {
		sb.creatingLeft--
		return
	}
	if now.Before(sb.settleAt) {
		return
	}
	sb.updatedAt = now
	if sb.failState != "" {
		sb.state, sb.errorReason = sb.failState, s.opts.ErrorReason
		sb.errorReason = cmp.Or(sb.errorReason, "daytonatest: injected failure")
		return
	}
	sb.state = stateStarted
}

// advance carries out what time has settled: a snapshot or a stop that has
// taken its time, and a DELETE past its lag (the sandbox is then destroyed, its
// processes killed in the background). Caller holds s.mu.
func (s *Server) advance(sb *sandbox, now time.Time) {
	if sb.state == stateSnapshotting && !now.Before(sb.settleAt) {
		sb.state, sb.updatedAt = stateStarted, now
	}
	if sb.state == stateStopping && !now.Before(sb.settleAt) {
		sb.state, sb.updatedAt = stateStopped, now
		if sb.autoDelete == 0 {
			sb.desiredState, sb.deletedAt = stateDestroyed, now
		}
	}
	if sb.desiredState == stateDestroyed && !sb.destroying && !now.Before(sb.deletedAt.Add(s.opts.DeleteLag)) {
		sb.destroying = true
		sb.state, sb.updatedAt = stateDestroyed, now
		sb.destroyedAt = now
		close(sb.ended)
		go s.cleanUp(sb)
	}
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb := s.find(idOf(r))
	if sb == nil {
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOf(r))))
		return
	}
	s.settle(sb, time.Now())
	out := s.dto(sb, false)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// deleteSandbox accepts a DELETE unless a change is in progress: it sets
// desiredState destroyed and leaves the state as it is for the lag.
func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb := s.find(idOf(r))
	if sb == nil {
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOf(r))))
		return
	}
	if sb.pending() {
		s.mu.Unlock()
		inProgress(w)
		return
	}
	now := time.Now()
	sb.desiredState, sb.deletedAt, sb.updatedAt = stateDestroyed, now, now
	out := s.dto(sb, false)
	s.advance(sb, now)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// inProgress is the answer to a change asked for while another is in
// progress.
func inProgress(w http.ResponseWriter) {
	writeJSON(w, http.StatusConflict, nestError(http.StatusConflict, "Sandbox state change in progress"))
}

// startSandbox starts a stopped or archived sandbox and resumes a paused
// one; the server waits for it, so it answers started.
func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	resume := false
	switch {
	case sb.pending():
		s.mu.Unlock()
		inProgress(w)
		return
	case sb.state == stateStopped || sb.state == stateArchived || sb.state == statePaused:
		resume = sb.state == statePaused
		now := time.Now()
		sb.state, sb.desiredState, sb.updatedAt, sb.lastActivity = stateStarted, stateStarted, now, now
	case sb.state != stateStarted:
		st := sb.state
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "Sandbox is in state "+st+" and cannot be started"))
		return
	}
	out := s.dto(sb, false)
	s.mu.Unlock()
	if resume {
		s.signalAll(sb, sigCont)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) stopHandler(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	pending := sb.pending()
	s.mu.Unlock()
	if pending {
		inProgress(w)
		return
	}
	s.stopSandbox(sb, "stopped")
	s.mu.Lock()
	out := s.dto(sb, false)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) replaceLabels(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, err.Error()))
		return
	}
	s.change(w, r, func(sb *sandbox) any {
		sb.labels = maps.Clone(body.Labels)
		return map[string]any{"labels": sb.labels}
	})
}

func (s *Server) lastActivity(w http.ResponseWriter, r *http.Request) {
	s.change(w, r, func(sb *sandbox) any {
		sb.lastActivity = time.Now()
		return nil
	})
}

// change applies f to the sandbox the path names, under s.mu, and answers
// what f returns (nil: 201 and no body), or 404.
func (s *Server) change(w http.ResponseWriter, r *http.Request, f func(*sandbox) any) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	out := f(sb)
	s.mu.Unlock()
	if out == nil {
		w.WriteHeader(http.StatusCreated)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	if s.lookup(w, r) != nil {
		writeJSON(w, http.StatusOK, map[string]string{"url": s.srv.URL + "/toolbox"})
	}
}

// setTimer serves the lifecycle timers: autostop, autodelete, autoarchive
// and ttl, in minutes.
func (s *Server) setTimer(which string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(cmp.Or(r.PathValue("interval"), r.PathValue("ttlMinutes")))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "invalid interval"))
			return
		}
		s.change(w, r, func(sb *sandbox) any {
			switch which {
			case "autostop":
				sb.autoStop = n
			case "autodelete":
				sb.autoDelete = n
			case "autoarchive":
				sb.autoArchive = n
			case "ttl":
				sb.ttl = n
			}
			return s.dto(sb, false)
		})
	}
}

// listSandboxes serves GET /sandbox: the JSON labels filter, repeated
// states, a name prefix, cursor pagination.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var want map[string]string
	if l := q.Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "labels must be a JSON object"))
			return
		}
	}
	limit := s.opts.PageSize
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 && l < limit {
		limit = l
	}
	start := 0
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 {
			writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "invalid cursor"))
			return
		}
		start = n
	}
	s.mu.Lock()
	rows := s.listed(want, q["states"], strings.ToLower(q.Get("name")))
	start = min(start, len(rows))
	end := min(start+limit, len(rows))
	items := make([]map[string]any, 0, end-start)
	for _, sb := range rows[start:end] {
		items = append(items, s.dto(sb, true))
	}
	s.mu.Unlock()
	var next any
	if end < len(rows) {
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

// listed returns the sandboxes a listing shows, oldest first: those
// created at least ListDelay ago and not destroyed longer than that, with
// the labels, one of the states (if any) and the name prefix. Caller holds
// s.mu.
func (s *Server) listed(labels map[string]string, states []string, namePrefix string) []*sandbox {
	now := time.Now()
	var rows []*sandbox
	for _, sb := range s.sandboxes {
		s.advance(sb, now)
		if now.Sub(sb.createdAt) < s.opts.ListDelay {
			continue // not yet visible: listings are eventually consistent
		}
		if sb.state == stateDestroyed && now.Sub(sb.destroyedAt) >= s.opts.ListDelay {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && sb.labels[k] == v
		}
		if !match || len(states) > 0 && !slices.Contains(states, sb.state) ||
			!strings.HasPrefix(strings.ToLower(sb.name), namePrefix) {
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
	return rows
}

// stopSandbox stops a started sandbox: its processes are killed and it is
// stopping for Options.StoppingFor, then stopped (and, with an
// autoDeleteInterval of 0, deleted).
func (s *Server) stopSandbox(sb *sandbox, why string) {
	s.mu.Lock()
	if sb.state != stateStarted || sb.desiredState != stateStarted {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	sb.state, sb.desiredState, sb.updatedAt, sb.settleAt = stateStopping, stateStopped, now, now.Add(s.opts.StoppingFor)
	s.mu.Unlock()
	s.signalAll(sb, syscall.SIGKILL)
	s.mu.Lock()
	s.advance(sb, time.Now())
	s.mu.Unlock()
}

// destroy ends a sandbox now (the server's close, its ttl), and returns
// once it is cleaned up: reads then answer 404.
func (s *Server) destroy(sb *sandbox, why string) {
	s.mu.Lock()
	if !sb.destroying {
		now := time.Now()
		sb.desiredState, sb.deletedAt = stateDestroyed, now.Add(-s.opts.DeleteLag)
		s.advance(sb, now)
	}
	s.mu.Unlock()
	<-sb.cleaned
}

// cleanUp kills a destroyed sandbox's processes, ends its sessions,
// waits for its log followers, and removes its directory.
func (s *Server) cleanUp(sb *sandbox) {
	defer close(sb.cleaned)
	s.signalAll(sb, syscall.SIGKILL)
	s.mu.Lock()
	sessions := make([]*session, 0, len(sb.sessions))
	for _, ss := range sb.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.end()
	}
	sb.follows.Wait()
	os.RemoveAll(sb.dir)
}

// Signals signalAll sends besides SIGKILL: to pause and resume.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// signalAll sends sig to every process whose environment carries the
// sandbox's DAYTONA_SANDBOX_ID; for SIGKILL, until none is left (a fork
// may race the first pass).
func (s *Server) signalAll(sb *sandbox, sig syscall.Signal) {
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
			syscall.Kill(pid, sig)
		}
		if found == 0 || sig != syscall.SIGKILL {
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

// timers enforces ttlMinutes and autoStopInterval, carries out what time
// has settled, and forgets destroyed sandboxes once listings no longer
// show them.
func (s *Server) timers() {
	defer s.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
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
			s.advance(sb, now)
			switch {
			case sb.state == stateDestroyed:
				if now.Sub(sb.destroyedAt) > s.opts.ListDelay+time.Minute {
					delete(s.sandboxes, id)
				}
			case sb.ttl > 0 && now.After(sb.createdAt.Add(time.Duration(sb.ttl)*s.opts.Minute)):
				expire = append(expire, sb)
			case sb.state == stateStarted && sb.autoStop > 0 && now.After(sb.lastActivity.Add(time.Duration(sb.autoStop)*s.opts.Minute)):
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

// Alive reports whether the process pid of this machine (where the fake's
// sandboxes run their commands) exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
