package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/boxfs/boxfs/providers"
)

// How long the host waits on the box's side of a kill, a start and a drain.
const (
	killTimeout = 30 * time.Second // the kill command, its confirmation included
	startGrace  = 10 * time.Second // for a just-started wrapper to record its group
	drainGrace  = 5 * time.Second  // for the streams to end once the group is dead
	// pidName is the name wrappers record their process group under, in
	// /tmp/.boxfs-UID/ (per user: a directory another user made cannot
	// stand in the way).
	pidName = "exec-"
	// runOutputMax caps what the provider keeps of its own commands' output
	// (kill, facts): the box writes it, and the box is untrusted.
	runOutputMax = 1 << 20
)

// wrapperScript runs every command of Exec. The text is the same each time
// and everything comes as positional parameters, so argv reaches the
// command byte for byte and no shell parses it:
//
//	$1 this script  $2 "1" once setsid was tried  $3 the pid file's name
//	$4 the directory  $5 "1" when the pairs and argv are octal-escaped
//	$6 "1" when stderr joins stdout  $7 the count of NAME=value pairs
//	that follow, then argv
//
// The exec API carries strings that must be UTF-8; other bytes travel as
// \0ooo escapes that printf %b turns back into bytes. The shell makes sure
// it leads its own process group (re-running itself under setsid if the
// runtime did not make it a session leader), records the group, exports the
// pairs, enters the directory and writes one marker byte on stdout: 0
// "started", or 1/2/3 when the directory is missing/not a directory/not
// enterable, 4 when the group cannot be recorded (a command that could not
// be killed is not started). The command runs as a child, so the shell can
// drop the pid file and pass on its status (128+n for signal n).
const wrapperScript = `if [ "$2" = 0 ] && ! kill -0 -$$ 2>/dev/null; then
	s=$1
	shift 2
	exec setsid /bin/sh -c 'eval "$1"' boxfs-exec "$s" 1 "$@"
fi
f=/tmp/.boxfs-$(id -u 2>/dev/null)/$3 d=$4 e=$5 j=$6 n=$7
shift 7
if [ "$e" = 1 ]; then
	for a in "$@"; do
		shift
		a=$(printf '%bx' "$a")
		set -- "$@" "${a%x}"
	done
fi
while [ "$n" -gt 0 ]; do export "$1" || exit 125; shift; n=$((n - 1)); done
mkdir -p "${f%/*}" 2>/dev/null
if ! { echo $$ >"$f"; } 2>/dev/null; then printf '\004'; exit 125; fi
if ! cd "$d" 2>/dev/null; then
	rm -f "$f"
	if [ ! -e "$d" ]; then printf '\001'; elif [ ! -d "$d" ]; then printf '\002'; else printf '\003'; fi
	exit 126
fi
printf '\000'
if [ "$j" = 1 ]; then "$@" 2>&1; else "$@"; fi
r=$?
rm -f "$f"
exit $r
`

// killScript kills the process group recorded under the name $1 and waits
// until none of it is left, about 10 s at most. Exit 0: gone; 3: nothing
// recorded (the command had ended); 4: still there.
const killScript = `f=/tmp/.boxfs-$(id -u 2>/dev/null)/$1
p=$(cat "$f" 2>/dev/null)
case $p in ''|*[!0-9]*|0|1) exit 3 ;; esac
i=0
while kill -9 -$p 2>/dev/null; do
	i=$((i + 1))
	[ $i -gt 100 ] && exit 4
	sleep 0.1
done
rm -f "$f"
exit 0
`

// Marker bytes of wrapperScript.
const (
	markerStarted   = 0
	markerNoDir     = 1
	markerNotDir    = 2
	markerDirDenied = 3
	markerNoRecord  = 4
)

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
	cmd, dir, err := b.command(op, req)
	if err != nil {
		return nil, err
	}
	pidfile := cmd[6]
	pr := &process{
		b:          b,
		pidfile:    pidfile,
		dir:        dir,
		stdout:     providers.NewOutQueue(req.Stdout, 64),
		stderr:     providers.NewOutQueue(req.Stderr, 64),
		markerSeen: make(chan struct{}),
		streamDone: make(chan struct{}),
		killedCh:   make(chan struct{}),
		watchDone:  make(chan struct{}),
		done:       make(chan struct{}),
	}
	// The stream lives until the command ends, not as long as ctx: when
	// ctx ends, watch kills the group in the box first (closing an exec
	// stream leaves its process running), and only then the stream.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	pr.cancelStream = scancel
	opts := remotecommand.StreamOptions{Stdout: &markerWriter{pr: pr}, Stderr: queueWriter{pr.stderr}}
	if req.Stdin != nil {
		opts.Stdin = req.Stdin
	}
	go func() {
		err := b.stream(sctx, b.execURL(cmd, req.Stdin != nil), opts)
		pr.code, pr.streamErr = exitCode(err)
		pr.stdout.Close()
		pr.stderr.Close()
		close(pr.streamDone)
	}()
	go pr.watch(ctx)
	go pr.finish(context.WithoutCancel(ctx))

	select {
	case <-pr.markerSeen:
	case <-pr.done:
	case <-ctx.Done():
		<-pr.done // watch kills what started and confirms it
		return nil, pr.err
	}
	select {
	case <-pr.markerSeen:
		if pr.marker == markerStarted {
			return pr, nil
		}
		<-pr.done
		return nil, pr.startError(op)
	default:
		// The stream ended before the wrapper started the command.
		<-pr.done
		if pr.err != nil {
			return nil, pr.err
		}
		return nil, pr.startError(op)
	}
}

// command checks req and builds the argv of the exec: the wrapper and its
// parameters. It returns the directory the command runs in.
func (b *Box) command(op string, req providers.ExecRequest) ([]string, string, error) {
	if len(req.Argv) == 0 {
		return nil, "", providers.Errorf(providers.Invalid, op, "empty argv").WithBox(b.id)
	}
	dir := req.Dir
	switch {
	case dir == "":
		dir = b.workspace
	case !path.IsAbs(dir):
		dir = path.Join(b.workspace, dir)
	}
	if strings.IndexByte(dir, 0) >= 0 || !utf8.ValidString(dir) {
		return nil, "", providers.Errorf(providers.Invalid, op, "dir %q holds NUL or is not UTF-8", dir).WithBox(b.id)
	}
	escaped := false
	args := make([]string, 0, len(req.Env)+len(req.Argv))
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		if !providers.ValidEnvName(k) || strings.IndexByte(req.Env[k], 0) >= 0 {
			return nil, "", providers.Errorf(providers.Invalid, op, "env %q: the name must be a shell variable name and the value hold no NUL", k).WithBox(b.id)
		}
		args = append(args, k+"="+req.Env[k])
	}
	for _, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, "", providers.Errorf(providers.Invalid, op, "argv holds a NUL byte").WithBox(b.id)
		}
		args = append(args, a)
	}
	for _, a := range args {
		escaped = escaped || !utf8.ValidString(a)
	}
	if escaped {
		for i, a := range args {
			args[i] = escapeBytes(a)
		}
	}
	join := "0"
	if req.Stdout != nil && req.Stdout == req.Stderr {
		join = "1"
	}
	cmd := []string{"/bin/sh", "-c", `eval "$1"`, "boxfs-exec", wrapperScript, "0",
		pidName + providers.NewID(8), dir, boolFlag(escaped), join, strconv.Itoa(len(req.Env))}
	return append(cmd, args...), dir, nil
}

func boolFlag(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// escapeBytes writes s for printf %b: every byte that is not ASCII, and the
// backslash, as \0ooo; the rest as itself.
func escapeBytes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < utf8.RuneSelf && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\0%03o`, c)
		}
	}
	return b.String()
}

// process is one running command.
type process struct {
	b       *Box
	pidfile string
	dir     string

	stdout, stderr *providers.OutQueue
	cancelStream   context.CancelFunc

	marker     byte          // the wrapper's marker, once markerSeen is closed
	markerSeen chan struct{} // closed at the first stdout byte
	streamDone chan struct{} // closed when the exec stream ended
	code       int           // the exit code, once streamDone is closed (-1: none)
	streamErr  error         // why the stream failed, once streamDone is closed

	killOnce  sync.Once
	killedCh  chan struct{} // closed when a kill (Kill or ctx) was done
	watchDone chan struct{} // closed when watch returns

	mu      sync.Mutex
	cause   error // ctx's error when ctx ended the command
	killErr error // the ctx kill's failure

	done chan struct{} // closed when the outcome is final
	err  error
}

var _ providers.Process = (*process)(nil)

// markerWriter takes the wrapper's marker byte off the front of stdout and
// queues the rest.
type markerWriter struct {
	pr   *process
	seen bool
}

func (w *markerWriter) Write(p []byte) (int, error) {
	n := len(p)
	if !w.seen && n > 0 {
		w.seen = true
		w.pr.marker = p[0]
		close(w.pr.markerSeen)
		p = p[1:]
	}
	if len(p) > 0 {
		w.pr.stdout.Put(bytes.Clone(p))
	}
	return n, nil
}

// queueWriter queues a copy of what it is given (the stream reuses its
// buffer).
type queueWriter struct{ q *providers.OutQueue }

func (w queueWriter) Write(p []byte) (int, error) {
	w.q.Put(bytes.Clone(p))
	return len(p), nil
}

// watch kills the command's group when ctx ends before the command does.
func (pr *process) watch(ctx context.Context) {
	defer close(pr.watchDone)
	select {
	case <-pr.streamDone:
		return
	case <-ctx.Done():
	}
	pr.mu.Lock()
	pr.cause = ctx.Err()
	pr.mu.Unlock()
	// The group is recorded before the marker is written.
	select {
	case <-pr.markerSeen:
	case <-pr.streamDone:
		return
	case <-time.After(startGrace):
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	err := pr.kill(kctx)
	cancel()
	pr.mu.Lock()
	pr.killErr = err
	pr.mu.Unlock()
	pr.killOnce.Do(func() { close(pr.killedCh) })
}

// finish waits for the stream to end (bounded once the group is killed: a
// process outside the group may still hold the output open), then for the
// outputs to be written, then settles the outcome.
func (pr *process) finish(ctx context.Context) {
	defer close(pr.done)
	select {
	case <-pr.streamDone:
	case <-pr.killedCh:
		select {
		case <-pr.streamDone:
		case <-time.After(drainGrace):
			pr.cancelStream()
			<-pr.streamDone
		}
	}
	<-pr.watchDone
	pr.cancelStream()
	pr.stdout.Wait()
	pr.stderr.Wait()
	pr.code, pr.err = pr.result(ctx)
}

func (pr *process) result(ctx context.Context) (int, error) {
	const op = "kubernetes.Exec"
	pr.mu.Lock()
	cause, killErr := pr.cause, pr.killErr
	pr.mu.Unlock()
	killed := false
	select {
	case <-pr.killedCh:
		killed = true
	default:
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch {
	case cause != nil:
		e := providers.E(providers.CodeOf(cause), op, cause).WithBox(pr.b.id)
		if killErr != nil {
			e.Err = fmt.Errorf("%w; and the kill: %v", cause, killErr)
		}
		return -1, e
	case pr.streamErr != nil && !killed:
		return -1, pr.b.lost(ictx, op, pr.streamErr)
	case pr.streamErr != nil:
		// Killed: the stream was cut once the group was confirmed gone.
		return 128 + 9, nil
	case pr.code >= 128 && !killed:
		// A signal: the box may be ending under the command.
		if pr.b.ending(ictx) {
			return -1, providers.Errorf(providers.Gone, op, "box ended while the command ran (exit %d)", pr.code).WithBox(pr.b.id)
		}
	}
	for _, q := range []*providers.OutQueue{pr.stdout, pr.stderr} {
		if err := q.Wait(); err != nil {
			return pr.code, providers.E(0, op, err).WithBox(pr.b.id)
		}
	}
	return pr.code, nil
}

// startError is Exec's error when the wrapper did not start the command.
func (pr *process) startError(op string) error {
	select {
	case <-pr.markerSeen:
		switch pr.marker {
		case markerNoDir:
			return providers.PathError(op, pr.b.id, pr.dir, 2) // ENOENT
		case markerNotDir:
			return providers.PathError(op, pr.b.id, pr.dir, 20) // ENOTDIR
		case markerDirDenied:
			return providers.PathError(op, pr.b.id, pr.dir, 13) // EACCES
		case markerNoRecord:
			return providers.Errorf(providers.Unsupported, op, "the box's /tmp is not writable: the command's process group cannot be recorded, so it could not be killed").WithBox(pr.b.id)
		}
		return providers.Errorf(providers.Unknown, op, "wrapper marker %d", pr.marker).WithBox(pr.b.id)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if pr.b.ending(ctx) {
		return providers.Errorf(providers.Gone, op, "box has ended").WithBox(pr.b.id)
	}
	return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh, and setsid unless the runtime makes a session leader", pr.code).WithBox(pr.b.id)
}

// Wait waits for the command to end and its output to be written.
func (pr *process) Wait() (int, error) {
	<-pr.done
	return pr.code, pr.err
}

// Kill kills the command's process group and confirms it gone.
func (pr *process) Kill(ctx context.Context) error {
	select {
	case <-pr.streamDone:
		return nil
	default:
	}
	err := pr.kill(ctx)
	pr.killOnce.Do(func() { close(pr.killedCh) })
	return err
}

// kill runs killScript in the box.
func (pr *process) kill(ctx context.Context) error {
	const op = "kubernetes.Kill"
	code, out, err := pr.b.run(ctx, []string{"/bin/sh", "-c", killScript, "boxfs-kill", pr.pidfile}, nil)
	if err != nil {
		if providers.IsCode(err, providers.Gone) {
			return nil // the box, and every process of it, is gone
		}
		return providers.E(0, op, err).WithBox(pr.b.id)
	}
	switch code {
	case 0, 3:
		return nil
	case 4:
		return providers.Errorf(providers.Liveness, op, "process group still alive after SIGKILL and ~10 s").WithBox(pr.b.id)
	}
	return providers.Errorf(providers.Unknown, op, "kill script exited %d: %s", code, bytes.TrimSpace(out)).WithBox(pr.b.id)
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
