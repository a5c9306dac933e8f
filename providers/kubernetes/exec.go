package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// What the wrapper records, and what the provider keeps of its own output.
const (
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
// drop the pid file and pass on its status (128+n for signal n). Last, it
// writes the trailer on stdout and on stderr, by which the host knows the
// output arrived whole.
const wrapperScript = `if [ "$2" = 0 ] && ! kill -0 -$$ 2>/dev/null; then
	s=$1
	shift 2
	exec setsid /bin/sh -c 'eval "$1"' boxfs-exec "$s" 1 "$@"
fi
f=/tmp/.boxfs-$(id -u 2>/dev/null)/$3 d=$4 e=$5 j=$6 n=$7
shift 7
boxfs_end() {
	printf '\036%s\037' "${f##*/}"
	printf '\036%s\037' "${f##*/}" >&2
	exit "$1"
}
if [ "$e" = 1 ]; then
	for a in "$@"; do
		shift
		a=$(printf '%bx' "$a")
		set -- "$@" "${a%x}"
	done
fi
while [ "$n" -gt 0 ]; do export "$1" || boxfs_end 125; shift; n=$((n - 1)); done
mkdir -p "${f%/*}" 2>/dev/null
if ! { echo $$ >"$f"; } 2>/dev/null; then printf '\004'; boxfs_end 125; fi
if ! cd "$d" 2>/dev/null; then
	rm -f "$f"
	if [ ! -e "$d" ]; then printf '\001'; elif [ ! -d "$d" ]; then printf '\002'; else printf '\003'; fi
	boxfs_end 126
fi
printf '\000'
if [ "$j" = 1 ]; then "$@" 2>&1; else "$@"; fi
r=$?
rm -f "$f"
boxfs_end $r
`

// killScript kills the process group recorded under the name $1 and
// confirms it gone (killgroup). Exit 0: gone; 3: nothing
// recorded (the command had ended); 4: still there.
const killScript = shell.KillGroup + `f=/tmp/.boxfs-$(id -u 2>/dev/null)/$1
p=$(cat "$f" 2>/dev/null)
case $p in ''|*[!0-9]*|0|1) exit 3 ;; esac
killgroup "$p" || exit 4
rm -f "$f"
`

// markerNoRecord is wrapperScript's marker when it cannot record the
// command's group (the others are providers.Marker*).
const markerNoRecord = 4

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
	// The stream lives until the command ends, not as long as ctx: when
	// ctx ends, the group is killed in the box first (closing an exec
	// stream leaves its process running), and only then the stream.
	sctx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	pr := &process{b: b}
	pr.GroupProcess = providers.NewGroupProcess(providers.GroupHooks{
		Op: op, Box: b.id, Dir: dir,
		KillGroup:   func(ctx context.Context) error { return b.killGroup(ctx, pidfile) },
		CloseStream: cancelStream,
		Outcome:     pr.outcome,
		Ending:      b.ending,
		NoStart: func(code int) error {
			return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh, and setsid unless the runtime makes a session leader", code).WithBox(b.id)
		},
		Marker: func(m byte) error {
			if m != markerNoRecord {
				return nil
			}
			return providers.Errorf(providers.Unsupported, op, "the box's /tmp is not writable: the command's process group cannot be recorded, so it could not be killed").WithBox(b.id)
		},
	}, req.Stdout, req.Stderr)
	end := trailer(pidfile)
	pr.stdout = &trailerCut{put: pr.Stdout().Put, trailer: end}
	pr.stderr = &trailerCut{put: pr.Stderr().Put, trailer: end}
	opts := remotecommand.StreamOptions{Stdout: &markerWriter{g: pr.GroupProcess, out: pr.stdout}, Stderr: pr.stderr}
	if req.Stdin != nil {
		opts.Stdin = req.Stdin
	}
	go func() {
		err := b.stream(sctx, b.execURL(cmd, req.Stdin != nil), opts)
		pr.stdout.end()
		pr.stderr.end()
		pr.code, pr.streamErr = exitCode(err)
		pr.StreamEnded()
	}()
	if err := pr.Start(ctx); err != nil {
		return nil, err
	}
	return pr, nil
}

// command checks req and builds the argv of the exec: the wrapper and its
// parameters. It returns the directory the command runs in.
func (b *Box) command(op string, req providers.ExecRequest) ([]string, string, error) {
	if err := req.Validate(); err != nil {
		return nil, "", providers.E(0, op, err).WithBox(b.id)
	}
	dir := req.WorkDir(b.workspace)
	escaped := false
	args := make([]string, 0, len(req.Env)+len(req.Argv))
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		args = append(args, k+"="+req.Env[k])
	}
	args = append(args, req.Argv...)
	for _, a := range args {
		escaped = escaped || !utf8.ValidString(a)
	}
	if escaped {
		for i, a := range args {
			args[i] = shell.Escape(a)
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

// process is one running command: an exec stream around the shared group
// lifecycle.
type process struct {
	*providers.GroupProcess
	b         *Box
	code      int   // the exit code, once the stream ended (-1: none)
	streamErr error // why the stream failed, once it ended

	stdout, stderr *trailerCut // the command's output, up to the wrapper's trailer
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
	case !killed && pr.code < 128 && !(pr.stdout.seen && pr.stderr.seen):
		// The wrapper exited by itself, after writing its trailer on
		// both: the stream lost the end of the output.
		return -1, pr.b.lost(ctx, "kubernetes.Exec", errors.New("the exec stream ended with the command's exit status but without the end of its output"))
	}
	return pr.code, nil
}

// markerWriter takes the wrapper's marker byte off the front of stdout and
// passes the rest on to out.
type markerWriter struct {
	g    *providers.GroupProcess
	out  *trailerCut
	seen bool
}

func (w *markerWriter) Write(p []byte) (int, error) {
	n := len(p)
	if !w.seen && n > 0 {
		w.seen = true
		w.g.SetMarker(p[0])
		p = p[1:]
	}
	if len(p) > 0 {
		w.out.Write(p)
	}
	return n, nil
}

// killGroup runs killScript in the box on the group recorded under name.
func (b *Box) killGroup(ctx context.Context, name string) error {
	code, out, err := b.run(ctx, []string{"/bin/sh", "-c", killScript, "boxfs-kill", name}, nil)
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
