package e2btest

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// sandbox is one sandbox of the fake.
type sandbox struct {
	s         *Server
	id        string
	template  string
	tpl       Template
	token     string
	home, tmp string
	env       map[string]string // envd's global variables: the template's, the sandbox's own, the create's
	metadata  map[string]string
	startedAt time.Time
	allowNet  *bool
	network   *networkConfig

	gone chan struct{} // closed when the sandbox ends

	mu     sync.Mutex
	endAt  time.Time
	ended  bool
	paused bool
	away   chan struct{} // closed while the sandbox is paused or ended: its streams are cut
	timer  *time.Timer
	procs  map[uint32]*proc
}

func (s *Server) newSandbox(body newSandboxBody, tpl Template, timeout time.Duration) (*sandbox, error) {
	id := newID(20)
	home := filepath.Join(s.root, id, "home")
	tmp := filepath.Join(s.root, id, "tmp")
	for _, d := range []string{home, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	env := maps.Clone(tpl.Env)
	if env == nil {
		env = map[string]string{}
	}
	env["E2B_SANDBOX"] = "true"
	env["E2B_SANDBOX_ID"] = id
	env["TMPDIR"] = tmp
	maps.Copy(env, body.EnvVars)
	sb := &sandbox{
		s: s, id: id, template: body.TemplateID, tpl: tpl, token: newID(32),
		home: home, tmp: tmp, env: env, metadata: maps.Clone(body.Metadata),
		startedAt: time.Now().UTC(), allowNet: body.AllowInternetAccess, network: body.Network,
		procs: map[uint32]*proc{}, gone: make(chan struct{}), away: make(chan struct{}),
	}
	sb.endAt = sb.startedAt.Add(timeout)
	sb.timer = time.AfterFunc(timeout, func() { s.end(sb, "timeout") })
	s.mu.Lock()
	s.sandboxes[id] = sb
	s.mu.Unlock()
	s.log.Info("e2btest: sandbox created", "id", id, "template", body.TemplateID, "timeout", timeout)
	return sb, nil
}

// running reports whether the sandbox runs: not ended, not paused.
func (sb *sandbox) running() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return !sb.ended && !sb.paused
}

// exists reports whether the control plane knows the sandbox: running or
// paused.
func (sb *sandbox) exists() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return !sb.ended
}

// goneCh is closed when the sandbox pauses or ends: the streams to it are
// cut then.
func (sb *sandbox) goneCh() <-chan struct{} {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.away
}

func (sb *sandbox) end() time.Time {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.endAt
}

// setEnd moves the sandbox's end to t.
func (sb *sandbox) setEnd(t time.Time) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.ended {
		return
	}
	sb.endAt = t
	sb.timer.Reset(time.Until(t))
}

// end ends a sandbox: every process carrying its id is killed, and its
// files go.
func (s *Server) end(sb *sandbox, why string) {
	sb.mu.Lock()
	if sb.ended {
		sb.mu.Unlock()
		return
	}
	sb.ended = true
	sb.timer.Stop()
	close(sb.gone)
	if !sb.paused {
		close(sb.away)
	}
	procs := make([]*proc, 0, len(sb.procs))
	for _, p := range sb.procs {
		procs = append(procs, p)
	}
	sb.mu.Unlock()
	for _, p := range procs {
		p.cmd.Process.Kill()
	}
	killTagged("E2B_SANDBOX_ID=" + sb.id)
	for _, p := range procs {
		<-p.done
	}
	os.RemoveAll(filepath.Join(s.root, sb.id))
	s.log.Info("e2btest: sandbox ended", "id", sb.id, "why", why)
}

// pause pauses a running sandbox: its processes are stopped (with memory)
// or killed (without: a resume boots it again from its disk), its streams
// cut, its timeout stopped. It reports false for a sandbox already paused.
func (sb *sandbox) pause(memory bool) bool {
	sb.mu.Lock()
	if sb.paused || sb.ended {
		sb.mu.Unlock()
		return false
	}
	sb.paused = true
	sb.timer.Stop()
	close(sb.away)
	sb.mu.Unlock()
	if memory {
		signalTagged("E2B_SANDBOX_ID="+sb.id, syscall.SIGSTOP)
	} else {
		killTagged("E2B_SANDBOX_ID=" + sb.id)
	}
	return true
}

// resume thaws a paused sandbox, to end timeout from now.
func (sb *sandbox) resume(timeout time.Duration) {
	sb.mu.Lock()
	if !sb.paused || sb.ended {
		sb.mu.Unlock()
		return
	}
	sb.paused = false
	sb.away = make(chan struct{})
	sb.endAt = time.Now().Add(timeout)
	sb.timer.Reset(timeout)
	sb.mu.Unlock()
	signalTagged("E2B_SANDBOX_ID="+sb.id, syscall.SIGCONT)
}

// signalTagged sends sig, once, to every process whose environment holds
// tag.
func signalTagged(tag string, sig syscall.Signal) {
	needle := append([]byte(tag), 0)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, needle...)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, sig)
		}
	}
}

// killTagged kills every process whose environment holds tag, until none
// is left (a dying process may have started another).
func killTagged(tag string) {
	needle := append([]byte(tag), 0)
	for range 50 {
		found := false
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			env, err := os.ReadFile(d + "/environ")
			if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, needle...)) {
				continue
			}
			pid, err := strconv.Atoi(filepath.Base(d))
			if err != nil || pid == os.Getpid() {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				found = true
			}
		}
		if !found {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// info is the Sandbox (detail: SandboxDetail) the API answers.
func (sb *sandbox) info(detail bool) map[string]any {
	m := map[string]any{
		"sandboxID":          sb.id,
		"templateID":         sb.template,
		"clientID":           "6532622b",
		"envdVersion":        sb.s.opts.EnvdVersion,
		"envdAccessToken":    sb.token,
		"trafficAccessToken": nil,
		"domain":             nil,
	}
	if sb.s.opts.Domain != "" {
		m["domain"] = sb.s.opts.Domain
	}
	if detail {
		m["cpuCount"] = sb.tpl.CPUs
		m["memoryMB"] = sb.tpl.MemoryMB
		m["diskSizeMB"] = sb.tpl.DiskMB
		m["startedAt"] = sb.startedAt.Format(time.RFC3339Nano)
		m["endAt"] = sb.end().UTC().Format(time.RFC3339Nano)
		m["state"] = sb.state()
		m["metadata"] = sb.metadata
		m["allowInternetAccess"] = sb.allowNet
		if sb.network != nil {
			m["network"] = sb.network
		}
		m["lifecycle"] = map[string]any{"onTimeout": "kill", "autoResume": false}
	}
	return m
}

// listed is the ListedSandbox a listing answers: no envd token and no
// domain.
func (sb *sandbox) listed() map[string]any {
	return map[string]any{
		"sandboxID":   sb.id,
		"templateID":  sb.template,
		"clientID":    "6532622b",
		"startedAt":   sb.startedAt.Format(time.RFC3339Nano),
		"endAt":       sb.end().UTC().Format(time.RFC3339Nano),
		"cpuCount":    sb.tpl.CPUs,
		"memoryMB":    sb.tpl.MemoryMB,
		"diskSizeMB":  sb.tpl.DiskMB,
		"envdVersion": sb.s.opts.EnvdVersion,
		"metadata":    sb.metadata,
		"state":       sb.state(),
	}
}

// state is SandboxState: running or paused.
func (sb *sandbox) state() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.paused {
		return "paused"
	}
	return "running"
}
