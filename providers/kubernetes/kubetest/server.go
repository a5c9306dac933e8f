// Package kubetest serves a fake of the Kubernetes API server in process,
// for the kubernetes provider's tests on machines without a cluster or
// root: pods (create, get, list by label selector, delete) and pods/exec.
//
// # What it models
//
// Objects are core/v1 JSON with their real field names; errors are
// metav1.Status bodies with the API server's reasons and codes (404
// NotFound, 409 AlreadyExists, 400 BadRequest for an exec into a pod that
// does not run). A pod runs at once when its image is one of
// Options.Images; otherwise its container waits with ErrImageNeverPull, as
// the kubelet reports it for imagePullPolicy IfNotPresent on a node without
// the image and no registry. A pod's activeDeadlineSeconds ends it (phase
// Failed, reason DeadlineExceeded) and kills its commands; a delete kills
// them and removes the pod at once. Env values and the container's
// command go through the kubelet's $(VAR) expansion ("$$" is "$").
//
// pods/exec speaks the two protocols client-go's executors do: WebSocket
// v5.channel.k8s.io (k8s.io/streaming's channel conn: stdin, stdout,
// stderr, the status channel, and v5's stream close that carries stdin's
// end) and SPDY v4.channel.k8s.io (k8s.io/cri-streaming's ServeExec, the
// kubelet's own server). The exit code travels as the kubelet writes it: a
// Failure status with reason NonZeroExitCode and an ExitCode cause.
// Options.RefuseWebSocket makes WebSocket upgrades fail, as an API server
// too old for v5 does, so the client falls back to SPDY.
//
// # What is real
//
// A pod's commands run for real on this machine, as the same user as the
// test, each in its own process group, with the pod's environment and
// nothing of the host's. There is no isolation: a pod's paths are this
// machine's paths, so tests give each box a workspace of its own.
package kubetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/boxfs/boxfs/providers"
)

// Options configure a Server.
type Options struct {
	// Namespace is the one namespace that exists (default "default").
	Namespace string
	// Images are the images the node has (default: boxfs-base:latest).
	Images []string
	// RefuseWebSocket answers WebSocket exec upgrades with 400, so clients
	// fall back to SPDY.
	RefuseWebSocket bool
}

// Server is the fake API server.
type Server struct {
	opts Options
	srv  *httptest.Server

	mu   sync.Mutex
	pods map[string]*pod // by name
	// Execs counts exec requests by protocol ("websocket", "spdy").
	execs map[string]int
}

type pod struct {
	obj   *corev1.Pod
	procs map[int]*os.Process // running commands, by pid (= process group)
	timer *time.Timer
}

// NewServer starts a fake API server; Close stops it and kills what its
// pods run.
func NewServer(opts Options) *Server {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if len(opts.Images) == 0 {
		opts.Images = []string{"boxfs-base:latest"}
	}
	s := &Server{opts: opts, pods: map[string]*pod{}, execs: map[string]int{}}
	mux := http.NewServeMux()
	ns := "/api/v1/namespaces/{ns}"
	mux.HandleFunc("GET "+ns, s.getNamespace)
	mux.HandleFunc("GET "+ns+"/pods", s.listPods)
	mux.HandleFunc("POST "+ns+"/pods", s.createPod)
	mux.HandleFunc("GET "+ns+"/pods/{name}", s.getPod)
	mux.HandleFunc("DELETE "+ns+"/pods/{name}", s.deletePod)
	mux.HandleFunc("GET "+ns+"/pods/{name}/exec", s.exec)
	mux.HandleFunc("POST "+ns+"/pods/{name}/exec", s.exec)
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Kubeconfig writes a kubeconfig for the server into dir and returns its
// path.
func (s *Server) Kubeconfig(dir string) (string, error) {
	p := filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: %s}}]
current-context: fake
`, s.srv.URL, s.opts.Namespace)
	return p, os.WriteFile(p, []byte(kc), 0o600)
}

// Execs returns how many exec requests came over protocol ("websocket" or
// "spdy").
func (s *Server) Execs(protocol string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execs[protocol]
}

// Close stops the server and every command of every pod.
func (s *Server) Close() {
	s.srv.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, p := range s.pods {
		s.endLocked(p)
		delete(s.pods, name)
	}
}

// writeJSON answers with obj as JSON.
func writeJSON(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(obj)
}

// status answers with a metav1.Status, as the API server answers errors.
func status(w http.ResponseWriter, code int, reason metav1.StatusReason, format string, args ...any) {
	writeJSON(w, code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: fmt.Sprintf(format, args...), Reason: reason, Code: int32(code),
	})
}

func (s *Server) namespaceOK(w http.ResponseWriter, r *http.Request) bool {
	if ns := r.PathValue("ns"); ns != s.opts.Namespace {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "namespaces %q not found", ns)
		return false
	}
	return true
}

func (s *Server) getNamespace(w http.ResponseWriter, r *http.Request) {
	if !s.namespaceOK(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: s.opts.Namespace},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	})
}

func (s *Server) listPods(w http.ResponseWriter, r *http.Request) {
	if !s.namespaceOK(w, r) {
		return
	}
	sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "unable to parse requirement: %v", err)
		return
	}
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	s.mu.Lock()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range s.pods {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		if p := s.pods[n]; sel.Matches(labels.Set(p.obj.Labels)) {
			list.Items = append(list.Items, *p.obj.DeepCopy())
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) getPod(w http.ResponseWriter, r *http.Request) {
	if !s.namespaceOK(w, r) {
		return
	}
	s.mu.Lock()
	p := s.pods[r.PathValue("name")]
	var obj *corev1.Pod
	if p != nil {
		obj = p.obj.DeepCopy()
	}
	s.mu.Unlock()
	if obj == nil {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "pods %q not found", r.PathValue("name"))
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

func (s *Server) createPod(w http.ResponseWriter, r *http.Request) {
	if !s.namespaceOK(w, r) {
		return
	}
	obj := &corev1.Pod{}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(obj); err != nil {
		status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding the pod: %v", err)
		return
	}
	if obj.Name == "" || len(obj.Spec.Containers) != 1 {
		status(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "the fake takes named pods of one container")
		return
	}
	now := metav1.Now()
	obj.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	obj.Namespace, obj.UID, obj.CreationTimestamp = s.opts.Namespace, types.UID(providers.NewID(16)), now
	c := obj.Spec.Containers[0]
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
	obj.Status = corev1.PodStatus{Phase: corev1.PodPending, StartTime: &now}
	if slices.Contains(s.opts.Images, c.Image) {
		obj.Status.Phase = corev1.PodRunning
		cs.Ready, cs.State.Running = true, &corev1.ContainerStateRunning{StartedAt: now}
	} else {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)}
	}
	obj.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.pods[obj.Name]; dup {
		status(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, "pods %q already exists", obj.Name)
		return
	}
	p := &pod{obj: obj, procs: map[int]*os.Process{}}
	if d := obj.Spec.ActiveDeadlineSeconds; d != nil {
		p.timer = time.AfterFunc(time.Duration(*d)*time.Second, func() { s.deadline(obj.Name, p) })
	}
	s.pods[obj.Name] = p
	writeJSON(w, http.StatusCreated, obj)
}

// deadline ends a pod whose activeDeadlineSeconds passed, as the kubelet
// does: its processes killed, the pod Failed with DeadlineExceeded.
func (s *Server) deadline(name string, p *pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[name] != p {
		return
	}
	s.endLocked(p)
	now := metav1.Now()
	p.obj.Status.Phase = corev1.PodFailed
	p.obj.Status.Reason = "DeadlineExceeded"
	p.obj.Status.Message = "Pod was active on the node longer than the specified deadline"
	for i := range p.obj.Status.ContainerStatuses {
		cs := &p.obj.Status.ContainerStatuses[i]
		cs.Ready = false
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: now}}
	}
}

// endLocked kills every command of p, as the end of its container does,
// and removes the records the provider's wrapper kept of them: in a pod
// they would go with the container, here they are on this machine.
func (s *Server) endLocked(p *pod) {
	if p.timer != nil {
		p.timer.Stop()
	}
	killed := map[string]bool{}
	for pid := range p.procs {
		syscall.Kill(-pid, syscall.SIGKILL)
		killed[strconv.Itoa(pid)] = true
	}
	if len(killed) == 0 {
		return
	}
	records, _ := filepath.Glob(fmt.Sprintf("/tmp/.boxfs-%d/exec-*", os.Getuid()))
	for _, f := range records {
		if b, err := os.ReadFile(f); err == nil && killed[strings.TrimSpace(string(b))] {
			os.Remove(f)
		}
	}
}

func (s *Server) deletePod(w http.ResponseWriter, r *http.Request) {
	if !s.namespaceOK(w, r) {
		return
	}
	name := r.PathValue("name")
	s.mu.Lock()
	p := s.pods[name]
	if p != nil {
		s.endLocked(p)
		delete(s.pods, name)
	}
	s.mu.Unlock()
	if p == nil {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "pods %q not found", name)
		return
	}
	writeJSON(w, http.StatusOK, p.obj)
}

// expand does the kubelet's $(VAR) expansion of a value: "$$" is "$",
// "$(NAME)" is NAME's value when env has it, anything else is kept.
func expand(v string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '$' || i+1 == len(v) {
			b.WriteByte(v[i])
			continue
		}
		switch v[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(v[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			name := v[i+2 : i+2+end]
			if val, ok := env[name]; ok {
				b.WriteString(val)
			} else {
				b.WriteString(v[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// start starts one command of pod name, in its own process group, with the
// pod's environment. It returns the command and a func to call once it
// ended.
func (s *Server) start(name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (*exec.Cmd, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[name]
	if p == nil || p.obj.Status.Phase != corev1.PodRunning {
		return nil, nil, errors.New("the pod does not run")
	}
	env := map[string]string{}
	var envList []string
	for _, e := range p.obj.Spec.Containers[0].Env {
		env[e.Name] = expand(e.Value, env)
		envList = append(envList, e.Name+"="+env[e.Name])
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = envList
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Commands that leave a child holding the output open still end.
	cmd.WaitDelay = 2 * time.Second
	var in io.WriteCloser
	if stdin != nil {
		var err error
		if in, err = cmd.StdinPipe(); err != nil {
			return nil, nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	if in != nil {
		// Not through cmd.Stdin: Wait would wait for a stdin that never ends.
		go func() {
			io.Copy(in, stdin)
			in.Close()
		}()
	}
	pid := cmd.Process.Pid
	p.procs[pid] = cmd.Process
	return cmd, func() {
		s.mu.Lock()
		delete(p.procs, pid)
		s.mu.Unlock()
	}, nil
}

// exitError is a command's exit as k8s.io/utils/exec's ExitError.
type exitError struct{ code int }

func (e exitError) Error() string   { return fmt.Sprintf("command terminated with exit code %d", e.code) }
func (e exitError) String() string  { return e.Error() }
func (e exitError) Exited() bool    { return true }
func (e exitError) ExitStatus() int { return e.code }

// waitExit waits for cmd and returns nil for exit 0, an exitError
// otherwise (128+n for signal n, as a runtime reports it).
func waitExit(cmd *exec.Cmd) error {
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitError{128 + int(ws.Signal())}
		}
		return exitError{ee.ExitCode()}
	case errors.Is(err, exec.ErrWaitDelay):
		return nil
	}
	return err
}
