package modal

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// Exec bounds.
const (
	argMax      = 64 << 10         // bytes of argv Modal takes in one exec
	stdinChunk  = 512 << 10        // bytes of stdin in one write
	killTimeout = 30 * time.Second // the kill command, its confirmation included
	startGrace  = 10 * time.Second // for a started wrapper to record its group
	drainGrace  = 5 * time.Second  // for output to end once the group is dead
	pidDir      = "/tmp/.boxfs"    // where wrappers record their process group
)

// execScript wraps every command of Exec. Its arguments are
//
//	$1 the pid file  $2 the directory  $3 "1" when argv is octal-escaped  $4... argv
//
// so argv reaches the command byte for byte, never parsed by a shell (a
// protobuf string must be UTF-8: other bytes travel as \0ooo escapes and
// printf %b turns them back). It enters the directory and starts the
// command under setsid, the leader of a process group of its own (stdin
// passed on explicitly: a background job would read /dev/null). That
// leader records its group in the pid file, writes one marker byte to
// stdout and only then becomes the command, so the marker comes before any
// output of the command's: 0 "started", or 1/2/3 when the directory is
// missing/not a directory/not enterable, 4 when the box has no setsid. The
// host strips the marker. The wrapper waits for the command and exits with
// its status (128+n after signal n).
const execScript = `f=$1 d=$2 e=$3
shift 3
if [ "$e" = 1 ]; then
	for a in "$@"; do
		shift
		a=$(printf '%bx' "$a")
		set -- "$@" "${a%x}"
	done
fi
if ! command -v setsid >/dev/null 2>&1; then printf '\004'; exit 125; fi
if ! cd "$d" 2>/dev/null; then
	if [ ! -e "$d" ]; then printf '\001'; elif [ ! -d "$d" ]; then printf '\002'; else printf '\003'; fi
	exit 126
fi
[ -d "${f%/*}" ] || mkdir -p "${f%/*}" 2>/dev/null
exec 3<&0
setsid /bin/sh -c 'echo $$ >"$1" 2>/dev/null; printf "\000"; shift; exec "$@"' boxfs-run "$f" "$@" <&3 3<&- &
exec 3<&-
wait $!
r=$?
rm -f "$f"
exit $r
`

// killScript kills the process group recorded in the pid file $1 (and its
// leader alone, in case it has not made its group yet) and confirms it
// gone, looking again at growing intervals (about 10 s in all). Exit 0:
// gone; 3: no group recorded (the command had ended); 4: still there.
const killScript = shell.KillGroup + `p=$(cat "$1" 2>/dev/null)
case $p in ''|*[!0-9]*|0|1) exit 3 ;; esac
killgroup "$p" || exit 4
rm -f "$1"
`

// Marker bytes of execScript.
const (
	markerStarted   = 0
	markerNoDir     = 1
	markerNotDir    = 2
	markerDirDenied = 3
	markerNoSetsid  = 4
)

// Exec runs req.Argv in the box as its own process group, through the
// task's command router. It returns once the command has started (its
// directory entered); a missing Dir is NotFound. Argv and env must not hold
// NUL; env and Dir must be UTF-8 (argv may be any bytes). Env reaches the
// command as an exec secret, never in an argv. Stdin streams while the
// command runs, in chunks stamped with their offset, and ends with an
// explicit EOF.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "modal.Exec"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	dir, args, err := b.execArgs(op, req)
	if err != nil {
		return nil, err
	}
	rt, taskID, err := b.router(ctx)
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id)
	}
	pr := newProcess(b, rt, taskID, dir, req)
	start := &pb.TaskExecStartRequest{
		TaskId: taskID, ExecId: pr.execID,
		CommandArgs:  append([]string{"/bin/sh", "-c", execScript, "boxfs-exec", pr.pidfile, dir, args[0]}, args[1:]...),
		StdoutConfig: pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE,
		StderrConfig: pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE,
	}
	switch {
	case pr.joined:
		start.StderrConfig = pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_STDOUT
	case pr.noErr:
		start.StderrConfig = pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_DEVNULL
	}
	if len(req.Env) > 0 {
		start.SecretSources = []*pb.SecretSource{{Source: &pb.SecretSource_Env{Env: &pb.StringMap{Contents: maps.Clone(req.Env)}}}}
	}
	if dl, ok := ctx.Deadline(); ok {
		// Modal ends the command at its deadline even if this host is gone.
		secs := uint32(max(1, (time.Until(dl)+time.Second-1)/time.Second))
		start.TimeoutSecs = &secs
	}
	if n := argvBytes(start.CommandArgs); n > argMax {
		return nil, providers.Errorf(providers.TooLarge, op, "argv of %d bytes: Modal takes at most %d", n, argMax).WithBox(b.id)
	}
	if err := rt.call(ctx, func(cctx context.Context, api pb.TaskCommandRouterClient) error {
		_, err := api.TaskExecStart(cctx, start)
		return err
	}); err != nil {
		return nil, b.classify(ctx, op, err)
	}
	return pr.run(ctx, op, req.Stdin)
}

// execArgs checks a request and returns the directory to run in and the
// escape flag followed by argv as execScript takes them.
func (b *Box) execArgs(op string, req providers.ExecRequest) (string, []string, error) {
	if err := req.ValidateUTF8(); err != nil {
		return "", nil, providers.E(0, op, err).WithBox(b.id)
	}
	dir := req.WorkDir(b.workspace)
	escape := false
	for _, a := range req.Argv {
		escape = escape || !utf8.ValidString(a)
	}
	if !escape {
		return dir, append([]string{"0"}, req.Argv...), nil
	}
	args := []string{"1"}
	for _, a := range req.Argv {
		args = append(args, printfEscape(a))
	}
	return dir, args, nil
}

// printfEscape writes s for printf %b: printable ASCII but the backslash as
// itself, every other byte as \0ooo.
func printfEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\0%03o`, c)
		}
	}
	return b.String()
}

func argvBytes(argv []string) int {
	n := 0
	for _, a := range argv {
		n += len(a)
	}
	return n
}

// process is one running command.
type process struct {
	b       *Box
	rt      *router
	taskID  string
	execID  string
	pidfile string
	dir     string
	joined  bool // stderr comes on stdout
	noErr   bool // stderr goes to /dev/null
	bg      context.Context
	stop    context.CancelFunc // ends the calls of bg

	stdout, stderr *providers.OutQueue

	marker     byte
	markerSeen chan struct{} // closed at the first stdout byte
	outDone    chan struct{} // the stdout stream ended
	errDone    chan struct{} // the stderr stream ended (closed at once when there is none)
	exited     chan struct{} // TaskExecWait answered, or failed for good

	killOnce  sync.Once
	killedCh  chan struct{} // a kill (Kill or ctx) was done
	watchDone chan struct{}

	mu        sync.Mutex
	streamErr error // a stream that broke for good
	exitCode  int
	waitErr   error
	cause     error // ctx's error when ctx ended the command
	killErr   error
	deadline  time.Time

	done chan struct{} // closed when code and err are final
	code int
	err  error
}

var _ providers.Process = (*process)(nil)

func newProcess(b *Box, rt *router, taskID, dir string, req providers.ExecRequest) *process {
	bg, stop := context.WithCancel(context.Background())
	pr := &process{
		b: b, rt: rt, taskID: taskID, execID: newUUID(), pidfile: pidDir + "/exec-" + providers.NewID(8), dir: dir,
		joined: req.Stdout != nil && req.Stdout == req.Stderr, noErr: req.Stderr == nil,
		bg: bg, stop: stop,
		stdout: providers.NewOutQueue(req.Stdout, 64), stderr: providers.NewOutQueue(req.Stderr, 64),
		markerSeen: make(chan struct{}), outDone: make(chan struct{}), errDone: make(chan struct{}),
		exited: make(chan struct{}), killedCh: make(chan struct{}), watchDone: make(chan struct{}), done: make(chan struct{}),
	}
	return pr
}

// run starts the process's goroutines and returns once the wrapper has
// started the command, or failed to.
func (pr *process) run(ctx context.Context, op string, stdin io.Reader) (providers.Process, error) {
	if dl, ok := ctx.Deadline(); ok {
		pr.deadline = dl
	}
	go pr.read(pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT, pr.stdout, pr.outDone)
	if pr.joined || pr.noErr {
		pr.stderr.Close()
		close(pr.errDone)
	} else {
		go pr.read(pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR, pr.stderr, pr.errDone)
	}
	go pr.feed(stdin)
	go pr.wait()
	go pr.watch(ctx)
	go pr.finish()
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
		if pr.err != nil {
			return nil, pr.err
		}
		return nil, pr.startError(op)
	}
}
