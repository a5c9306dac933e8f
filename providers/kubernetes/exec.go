package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/wrapper"
)

// runOutputMax caps what the provider keeps of its own commands' output
// (kill, facts): the box writes it, and the box is untrusted.
const runOutputMax = 1 << 20

// execURL is the pods/exec URL of a command in the box's container.
func (b *Box) execURL(argv []string, stdin bool) *url.URL {
	return b.p.core.Post().Namespace(b.p.namespace).Resource("pods").Name(b.id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: containerName, Command: argv, Stdin: stdin, Stdout: true, Stderr: true,
		}, paramCodec).URL()
}

// stream runs one exec to its end: WebSocket (v5, the one protocol that
// carries stdin's end) first, SPDY when the server refuses the upgrade.
func (b *Box) stream(ctx context.Context, u *url.URL, opts remotecommand.StreamOptions) error {
	ws, err := remotecommand.NewWebSocketExecutor(b.p.cfg, http.MethodGet, u.String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.p.cfg, http.MethodPost, u)
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, shouldFallback)
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, opts)
}

// shouldFallback: try SPDY when the WebSocket upgrade failed for a reason
// of the protocol's; an answer of the API server's (the pod is missing, the
// caller may not exec) would be the same over SPDY.
func shouldFallback(err error) bool {
	cause, ok := upgradeFailure(err)
	if !ok {
		return httpstream.IsHTTPSProxyError(err)
	}
	var st *apierrors.StatusError
	if errors.As(cause, &st) {
		switch st.Status().Code {
		case http.StatusNotFound, http.StatusForbidden, http.StatusUnauthorized, http.StatusTooManyRequests:
			return false
		}
	}
	return true
}

// exitCode splits a stream's outcome into an exit code and a failure of the
// stream itself.
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, nil
	}
	return -1, err
}

// Exec runs req.Argv in the box as its own process group, through the exec
// subresource. It returns once the command has started (its working
// directory entered); a missing Dir is NotFound. Argv, env and Dir must not
// hold NUL, and Dir must be UTF-8 (argv and env values may be any bytes).
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "kubernetes.Exec"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	dir := req.WorkDir(b.workspace)
	cmd := wrapper.NewCommand(req, dir)
	// The stream lives until the command ends, not as long as ctx: when
	// ctx ends, the group is killed in the box first (closing an exec
	// stream leaves its process running), and only then the stream.
	sctx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	pr := &process{b: b}
	pr.GroupProcess = providers.NewGroupProcess(providers.GroupHooks{
		Op: op, Box: b.id, Dir: dir,
		KillGroup:   func(ctx context.Context) error { return b.killGroup(ctx, cmd.Name) },
		CloseStream: cancelStream,
		Outcome:     pr.outcome,
		Ending:      b.ending,
		NoStart: func(code int) error {
			return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh, and setsid unless the runtime makes a session leader", code).WithBox(b.id)
		},
		Marker: wrapper.Marker(op, b.id),
	}, req.Stdout, req.Stderr)
	pr.out = wrapper.NewOutput(pr.GroupProcess, cmd.Name)
	opts := remotecommand.StreamOptions{Stdout: pr.out.Stdout, Stderr: pr.out.Stderr}
	if req.Stdin != nil {
		opts.Stdin = req.Stdin
	}
	go func() {
		err := b.stream(sctx, b.execURL(cmd.Argv, req.Stdin != nil), opts)
		pr.out.End()
		pr.code, pr.streamErr = exitCode(err)
		pr.StreamEnded()
	}()
	if err := pr.Start(ctx); err != nil {
		return nil, err
	}
	return pr, nil
}

// process is one running command: an exec stream around the shared group
// lifecycle.
type process struct {
	*providers.GroupProcess
	b         *Box
	code      int   // the exit code, once the stream ended (-1: none)
	streamErr error // why the stream failed, once it ended

	out *wrapper.Output // the command's output, marker and trailer taken out
}

var _ providers.Process = (*process)(nil)

// outcome is the command's exit code from the stream's status; a stream
// that failed is lost, unless a kill cut it once the group was dead.
func (pr *process) outcome(ctx context.Context, killed bool) (int, error) {
	switch {
	case pr.streamErr != nil && !killed:
		return -1, pr.b.lost(ctx, "kubernetes.Exec", pr.streamErr)
	case pr.streamErr != nil:
		return 128 + 9, nil
	case !killed && pr.code < 128 && !pr.out.Whole():
		// The wrapper exited by itself, after writing its trailer on
		// both: the stream lost the end of the output.
		return -1, pr.b.lost(ctx, "kubernetes.Exec", errors.New("the exec stream ended with the command's exit status but without the end of its output"))
	}
	return pr.code, nil
}

// killGroup runs the wrapper's kill script in the box on the group
// recorded under name.
func (b *Box) killGroup(ctx context.Context, name string) error {
	code, out, err := b.run(ctx, wrapper.KillArgv(name), nil)
	return shell.KillExit("kubernetes.Kill", b.id, code, out, err)
}

// run runs a fixed command of the provider's own (no wrapper) and returns
// its exit code and its combined output, of which it keeps runOutputMax
// bytes.
func (b *Box) run(ctx context.Context, argv []string, stdin io.Reader) (int, []byte, error) {
	const op = "kubernetes.run"
	out := &capped{max: runOutputMax}
	err := b.stream(ctx, b.execURL(argv, stdin != nil), remotecommand.StreamOptions{Stdin: stdin, Stdout: out, Stderr: out})
	code, err := exitCode(err)
	if err != nil {
		if ctx.Err() != nil {
			return -1, out.Bytes(), providers.E(0, op, ctx.Err()).WithBox(b.id)
		}
		return -1, out.Bytes(), b.lost(ctx, op, err)
	}
	return code, out.Bytes(), nil
}

// capped is a buffer that keeps the first max bytes written to it and
// drops the rest.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

// lost classifies a failed exec stream: Gone when the box went away or has
// ended, the API server's answer where it gave one, else TransportLost.
func (b *Box) lost(ctx context.Context, op string, err error) error {
	if b.ending(ctx) {
		return providers.E(providers.Gone, op, err).WithBox(b.id)
	}
	if c := errorCode(err); c != providers.Unknown {
		return wrap(op, b.id, err)
	}
	return providers.E(providers.TransportLost, op, err).WithBox(b.id)
}
