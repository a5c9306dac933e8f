package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// The exec protocols the fake speaks.
const (
	protocolV5 = "v5.channel.k8s.io"
)

// spdyProtocols are the SPDY exec protocols, newest first, as the kubelet
// offers them.
var spdyProtocols = []string{"v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"}

// exec serves pods/exec: the pod must exist and run, then the command runs
// over a WebSocket v5 or SPDY stream.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	if !s.namespaceOK(w, r) {
		return
	}
	q := r.URL.Query()
	name, argv := r.PathValue("name"), q["command"]
	s.mu.Lock()
	p := s.pods[name]
	var phase corev1.PodPhase
	if p != nil {
		phase = p.obj.Status.Phase
	}
	s.mu.Unlock()
	switch {
	case p == nil:
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "pods %q not found", name)
		return
	case phase == corev1.PodSucceeded || phase == corev1.PodFailed:
		status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "cannot exec into a container in a completed pod; current phase is %s", phase)
		return
	case phase != corev1.PodRunning:
		status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "pod %s does not have a host assigned", name)
		return
	case len(argv) == 0:
		status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "you must specify at least 1 command")
		return
	}
	opts := &remotecommand.Options{
		Stdin: q.Get("stdin") == "true", Stdout: q.Get("stdout") == "true", Stderr: q.Get("stderr") == "true", TTY: q.Get("tty") == "true",
	}
	if wsstream.IsWebSocketRequest(r) {
		if s.opts.RefuseWebSocket {
			status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "websocket upgrades are not served here")
			return
		}
		s.count("websocket")
		s.execV5(w, r, name, argv, opts)
		return
	}
	s.count("spdy")
	remotecommand.ServeExec(w, r, executor{s}, name, "", "", argv, opts, 0, 30*time.Second, spdyProtocols)
}

func (s *Server) count(protocol string) {
	s.mu.Lock()
	s.execs[protocol]++
	s.mu.Unlock()
}

// executor runs SPDY execs for cri-streaming's ServeExec.
type executor struct{ s *Server }

func (e executor) ExecInContainer(_ context.Context, name, _, _ string, argv []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	cmd, done, err := e.s.start(name, argv, in, writerOrDiscard(out), writerOrDiscard(errw))
	if err != nil {
		return err
	}
	defer done()
	return waitExit(cmd)
}

func writerOrDiscard(w io.WriteCloser) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// execV5 runs a command over the v5 WebSocket channel protocol: channels
// stdin, stdout, stderr, status (resize ignored), and the stream close
// that ends stdin.
func (s *Server) execV5(w http.ResponseWriter, r *http.Request, name string, argv []string, opts *remotecommand.Options) {
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		protocolV5: {Binary: true, Channels: []wsstream.ChannelType{
			wsstream.ReadChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.IgnoreChannel,
		}},
	})
	_, chans, err := conn.Open(w, r)
	if err != nil {
		return
	}
	defer conn.Close()
	var stdin io.Reader
	if opts.Stdin {
		stdin = chans[0]
	}
	stdout, stderr := io.Writer(io.Discard), io.Writer(io.Discard)
	if opts.Stdout {
		stdout = chans[1]
	}
	if opts.Stderr {
		stderr = chans[2]
	}
	cmd, done, err := s.start(name, argv, stdin, stdout, stderr)
	if err != nil {
		writeStatus(chans[3], &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Message: err.Error()})
		return
	}
	err = waitExit(cmd)
	done()
	st := &metav1.Status{Status: metav1.StatusSuccess}
	if ee, ok := err.(exitError); ok {
		st = &metav1.Status{
			Status: metav1.StatusFailure, Reason: remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", ee),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(ee.code)}}},
		}
	} else if err != nil {
		st = &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Message: err.Error()}
	}
	writeStatus(chans[3], st)
}

func writeStatus(w io.Writer, st *metav1.Status) {
	b, _ := json.Marshal(st)
	w.Write(b)
}
