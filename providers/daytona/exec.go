package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// Bounds of a command's life on the host's side; providers.GroupProcess
// bounds the kill, the drain and the wait for the exit code.
const (
	drainGrace   = 5 * time.Second // for the log to end once the record has an exit code
	pollEvery    = 5 * time.Second // how often a running command's record is read
	activityEach = time.Minute     // how often a running command tells Daytona the box is busy
	boxfsDir     = tmpDir + "/.boxfs"
)

// wrapperScript runs every command of Exec, in a toolbox session. Its
// arguments: $1 the directory, $2 the staged stdin file ("" none), $3 the
// prefix of the command's own files in the box, $4 "1" when stdout and
// stderr are one stream, $5 the count of NAME=value pairs that follow,
// then argv.
//
// It makes two FIFOs (a kill that came first left a directory in the
// first's place: then it runs nothing) and starts two encoders that print
// what the command writes to them as base64 lines, one on the session's
// stdout and one on its stderr, so that the session log's 3-byte stream
// markers can never appear in the data (each encoder reads what is there,
// up to 64 KiB, and encodes it at once: output streams); enters the
// directory (or prints "!E<errno>"); prints "!S"; starts the command under
// setsid, as its own process group, with the staged stdin; records its
// pid; waits for it and then for the encoders (which end when nothing holds
// the FIFOs open any more), and exits with the command's status (128+n for
// signal n).
const wrapperScript = `d=$1 in=$2 t=$3 one=$4 n=$5
shift 5
while [ "$n" -gt 0 ]; do export "$1" || exit 125; shift; n=$((n - 1)); done
mkfifo "$t.o" "$t.e" 2>/dev/null || { mkdir -p "${t%/*}" && mkfifo "$t.o" "$t.e"; } || exit 125
enc() {
	while dd bs=65536 count=1 of="$t.c$1" 2>"$t.d$1"; do
		read -r c <"$t.d$1" || break
		case $c in 0+0*) break ;; *+*) base64 <"$t.c$1" ;; *) break ;; esac
	done
}
enc o <"$t.o" &
o=$!
enc e <"$t.e" >&2 &
e=$!
exec 3>"$t.o" 4>"$t.e"
[ "$one" = 1 ] && exec 4>&3
f="$t.o $t.e $t.co $t.ce $t.do $t.de $t.pid"
if ! cd "$d" 2>/dev/null; then
	if [ ! -e "$d" ]; then r=2; elif [ ! -d "$d" ]; then r=20; else r=13; fi
	exec 3>&- 4>&-
	wait $o $e
	printf '!E%d\n' "$r"
	rm -f $f "$in"
	exit 126
fi
if [ -n "$in" ]; then exec 5<"$in" || exit 125; rm -f "$in"; else exec 5</dev/null; fi
printf '!S\n'
setsid -- "$@" <&5 >&3 2>&4 3>&- 4>&- 5<&- &
p=$!
echo "$p" >"$t.pid"
exec 3>&- 4>&- 5<&-
wait "$p"
r=$?
wait $o $e
rm -f $f
exit $r
`

// killScript kills the process group of the command whose files start with
// $1 and confirms it gone: no process of the group, nor the command's first
// process, is left that is not a zombie. Exit 0: gone; 3: the command had
// not started (a directory in its first FIFO's place keeps it from ever
// starting); 4: still there after ~10 s.
const killScript = shell.KillGroup + `t=$1
rm -f "$t.in"
mkdir -p "${t%/*}" 2>/dev/null
mkdir "$t.o" 2>/dev/null && exit 3
i=0
while ! [ -s "$t.pid" ]; do
	[ -p "$t.o" ] || exit 0
	i=$((i + 1))
	[ $i -le 300 ] || exit 0
	sleep 0.01
done
p=$(cat "$t.pid" 2>/dev/null)
case $p in ''|*[!0-9]*|0|1) exit 0 ;; esac
killgroup "$p" || exit 4
`

// Exec runs req.Argv in the box as its own process group, through a toolbox
// session. It returns once the command has started (its directory
// entered); a missing Dir is NotFound. A Stdin is read whole and uploaded
// before the command starts.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "daytona.Exec"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	dir, env, err := b.execArgs(op, req)
	if err != nil {
		return nil, err
	}
	t := boxfsDir + "/x-" + providers.NewID(8)
	in := ""
	if req.Stdin != nil {
		in = t + ".in"
		if err := b.stage(ctx, op, in, req.Stdin); err != nil {
			return nil, err
		}
	}
	one, oneArg := req.Stdout != nil && sameWriter(req.Stdout, req.Stderr), "0"
	if one {
		oneArg = "1"
	}
	args := append([]string{dir, in, t, oneArg, strconv.Itoa(len(env))}, env...)
	args = append(args, req.Argv...)
	sid := "boxfs-" + providers.NewID(8)
	if err := b.newSession(ctx, op, sid); err != nil {
		b.unstage(in)
		return nil, err
	}
	cid, err := b.sessionExec(ctx, op, sid, commandLine(decodeArgs+wrapperScript, args...))
	if err != nil {
		b.unstage(in)
		b.endSession(sid)
		return nil, err
	}
	// The log is followed until the command ends, not as long as ctx: when
	// ctx ends, the group is killed in the box first.
	fctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	pr := &process{b: b, sid: sid, cid: cid}
	pr.GroupProcess = providers.NewGroupProcess(providers.GroupHooks{
		Op: op, Box: b.id, Dir: dir,
		KillGroup:   func(ctx context.Context) error { return b.killGroup(ctx, t) },
		CloseStream: stop,
		Outcome:     pr.outcome,
		Ending:      b.ended,
		NoStart: func(code int) error {
			return providers.Errorf(providers.Unknown, op, "the command's wrapper ended (exit %d) before starting it: %s", code, strings.TrimSpace(string(pr.dec.raw))).WithBox(b.id)
		},
	}, req.Stdout, req.Stderr)
	put := [2]func([]byte){pr.Stdout().Put, pr.Stderr().Put}
	if one {
		put[1] = put[0] // one writer: one queue, so one goroutine writes to it
	}
	pr.dec = &logDecoder{marker: pr.SetMarker, put: put}
	go pr.follow(fctx, stop)
	go func() {
		pr.Wait()
		b.endSession(sid) // the record is read: the session is done with
	}()
	if err := pr.Start(ctx); err != nil {
		return nil, err
	}
	return pr, nil
}

// execArgs checks an ExecRequest and returns the command's directory (the
// workspace, or Dir within it) and its NAME=value pairs, sorted.
func (b *Box) execArgs(op string, req providers.ExecRequest) (string, []string, error) {
	if err := req.Validate(); err != nil {
		return "", nil, providers.E(0, op, err).WithBox(b.id)
	}
	var env []string
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		env = append(env, k+"="+req.Env[k])
	}
	return req.WorkDir(b.workspace), env, nil
}

// sameWriter reports whether two writers are the same one (==), as
// os/exec compares them.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // writers that are not comparable are not the same
		}
	}()
	return a == b
}

// stage uploads stdin to the box file name. It is spooled to a host file
// first, so the upload can be sent again when its answer is lost.
func (b *Box) stage(ctx context.Context, op, name string, stdin io.Reader) error {
	f, err := os.CreateTemp("", "boxfs-daytona-stdin-")
	if err != nil {
		return providers.E(providers.Unknown, op, err).WithBox(b.id)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := io.Copy(f, stdin); err != nil {
		return providers.E(providers.Invalid, op, fmt.Errorf("reading stdin: %w", err)).WithBox(b.id)
	}
	if err := b.upload(ctx, name, func() (io.Reader, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		return io.NopCloser(f), nil
	}); err != nil {
		return b.fail(ctx, op, err)
	}
	return nil
}

// unstage removes a staged stdin the command will never read.
func (b *Box) unstage(name string) {
	if name == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.p.liveness)
		defer cancel()
		u, err := b.tb(ctx, "/files")
		if err == nil {
			b.p.c.json(ctx, request{method: http.MethodDelete, url: u, query: url.Values{"path": {name}}, idempotent: true}, nil)
		}
	}()
}

// newSession makes a toolbox session of the given id. A 409 on a retry is
// this call's own session.
func (b *Box) newSession(ctx context.Context, op, sid string) error {
	u, err := b.tb(ctx, "/process/session")
	if err != nil {
		return b.fail(ctx, op, err)
	}
	body, _ := jsonBody(map[string]string{"sessionId": sid})
	err = b.p.c.json(ctx, request{method: http.MethodPost, url: u, body: body, contentType: "application/json", idempotent: true}, nil)
	if err != nil && !(statusOf(err) == http.StatusConflict && tries(err) > 1) {
		return b.fail(ctx, op, err)
	}
	return nil
}

// sessionExec starts line in the session and returns the command's id. The
// call is bounded by the liveness bound. A call whose answer was lost is
// sent again only when the session (which is this Exec's alone) shows no
// command; else that command is the one.
func (b *Box) sessionExec(ctx context.Context, op, sid, line string) (string, error) {
	u, err := b.tb(ctx, "/process/session/"+url.PathEscape(sid)+"/exec")
	if err != nil {
		return "", b.fail(ctx, op, err)
	}
	body, _ := jsonBody(map[string]any{"command": line, "runAsync": true})
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, b.p.liveness)
		var out struct {
			CmdID string `json:"cmdId"`
		}
		err := b.p.c.json(cctx, request{method: http.MethodPost, url: u, body: body, contentType: "application/json"}, &out)
		cancel()
		if err == nil {
			if out.CmdID == "" {
				return "", providers.Errorf(providers.Unknown, op, "the session answered without a command id").WithBox(b.id)
			}
			return out.CmdID, nil
		}
		if ctx.Err() != nil {
			return "", wrap(op, b.id, ctx.Err())
		}
		st := statusOf(err)
		lost := st == 0 || st == http.StatusTooManyRequests || st >= 500
		if !lost || attempt >= maxTries {
			if st == 0 && errors.Is(err, context.DeadlineExceeded) {
				return "", providers.E(providers.Liveness, op, err).WithBox(b.id)
			}
			return "", b.fail(ctx, op, err)
		}
		cid, err := b.sessionCommand(ctx, sid)
		if err != nil {
			return "", b.fail(ctx, op, err)
		}
		if cid != "" {
			return cid, nil
		}
		time.Sleep(backoff(attempt))
	}
}

// sessionCommand returns the id of the session's command, "" if none.
func (b *Box) sessionCommand(ctx context.Context, sid string) (string, error) {
	u, err := b.tb(ctx, "/process/session/"+url.PathEscape(sid))
	if err != nil {
		return "", err
	}
	var out struct {
		Commands []struct {
			ID string `json:"id"`
		} `json:"commands"`
	}
	if err := b.p.c.json(ctx, request{method: http.MethodGet, url: u, idempotent: true}, &out); err != nil {
		return "", err
	}
	if len(out.Commands) > 0 {
		return out.Commands[0].ID, nil
	}
	return "", nil
}

// commandRecord is a session command as the toolbox reports it.
type commandRecord struct {
	ID       string `json:"id"`
	ExitCode *int   `json:"exitCode"`
}

func (b *Box) command(ctx context.Context, sid, cid string) (commandRecord, error) {
	var rec commandRecord
	u, err := b.tb(ctx, "/process/session/"+url.PathEscape(sid)+"/command/"+url.PathEscape(cid))
	if err != nil {
		return rec, err
	}
	err = b.p.c.json(ctx, request{method: http.MethodGet, url: u, idempotent: true}, &rec)
	return rec, err
}

// endSession deletes a session, in the background and bounded.
func (b *Box) endSession(sid string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.p.liveness)
		defer cancel()
		u, err := b.tb(ctx, "/process/session/"+url.PathEscape(sid))
		if err == nil {
			b.p.c.json(ctx, request{method: http.MethodDelete, url: u, idempotent: true}, nil)
		}
	}()
}

// process is one running command: a toolbox session's command around the
// shared group lifecycle.
type process struct {
	*providers.GroupProcess
	b        *Box
	sid, cid string

	dec       *logDecoder // the log's decoder; its raw lines are read once the log ended
	streamErr error       // why the log broke for good, once it ended
}

var _ providers.Process = (*process)(nil)

// follow reads the command's log over the session's WebSocket until it
// ends or stop is called, and decodes it into the output queues. A
// connection that breaks is dialled again, with backoff, and the bytes
// already read skipped (the log is replayed from its start), until the box
// has ended or no connection has read anything for the liveness bound; a
// connection with no answer to pings within the liveness bound counts as
// broken.
func (pr *process) follow(ctx context.Context, stop context.CancelFunc) {
	defer pr.StreamEnded()
	defer pr.dec.flush()
	var consumed int64
	polled := make(chan struct{})
	defer close(polled)
	go pr.poll(ctx, stop, polled)
	var failing time.Time // since when no connection has read anything
	for attempt := 1; ; attempt++ {
		n, clean, err := pr.stream(ctx, pr.dec, consumed)
		consumed += n
		if clean || ctx.Err() != nil {
			return
		}
		if n > 0 || failing.IsZero() {
			failing, attempt = time.Now(), 1
		}
		pr.b.p.log.Debug("daytona: the command's log stream broke; dialling again", "box", pr.b.id, "read", consumed, "err", err)
		if time.Since(failing) > pr.b.p.liveness || pr.b.ended(ctx) {
			pr.streamErr = err
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(min(attempt, maxTries))):
		}
	}
}

// stream reads one connection of the log, skipping the first skip bytes.
// It returns the bytes it read, whether the stream ended cleanly (the
// command ended and its output is all read), and why it broke.
func (pr *process) stream(ctx context.Context, dec *logDecoder, skip int64) (int64, bool, error) {
	b := pr.b
	u, err := b.tb(ctx, "/process/session/"+url.PathEscape(pr.sid)+"/command/"+url.PathEscape(pr.cid)+"/logs")
	if err != nil {
		return 0, false, err
	}
	wsURL, err := url.Parse(u)
	if err != nil {
		return 0, false, err
	}
	switch wsURL.Scheme {
	case "https":
		wsURL.Scheme = "wss"
	default:
		wsURL.Scheme = "ws"
	}
	wsURL.RawQuery = url.Values{"follow": {"true"}}.Encode()
	h := http.Header{}
	b.p.c.setHeaders(h)
	dctx, cancel := context.WithTimeout(ctx, b.p.liveness)
	conn, resp, err := websocket.Dial(dctx, wsURL.String(), &websocket.DialOptions{HTTPClient: b.p.c.hc, HTTPHeader: h})
	cancel()
	if err != nil {
		st := 0
		if resp != nil {
			st = resp.StatusCode
		}
		return 0, false, &apiError{Method: http.MethodGet, Path: wsURL.Path, Status: st, Err: transportCause(err)}
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 20)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // pings: no pong within the liveness bound breaks the connection
		t := time.NewTicker(b.p.liveness / 3)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			pctx, pcancel := context.WithTimeout(cctx, b.p.liveness)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil && cctx.Err() == nil {
				conn.CloseNow()
				return
			}
		}
	}()
	var n int64
	for {
		_, msg, err := conn.Read(cctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return n, true, nil
			}
			return n, false, err
		}
		n += int64(len(msg))
		if skip > 0 {
			k := min(skip, int64(len(msg)))
			msg, skip = msg[k:], skip-k
		}
		dec.write(msg)
	}
}

// poll reads the command's record while it runs: an old daemon leaves the
// log's connection open after the command ended, so once the record has
// an exit code the log gets a grace to end and is then closed (stop). It
// also tells Daytona, now and then, that the box is busy.
func (pr *process) poll(ctx context.Context, stop context.CancelFunc, done chan struct{}) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if time.Since(last) >= activityEach {
			last = time.Now()
			actx, cancel := context.WithTimeout(ctx, pr.b.p.liveness)
			pr.b.KeepAlive(actx)
			cancel()
		}
		cctx, cancel := context.WithTimeout(ctx, pr.b.p.liveness)
		rec, err := pr.b.command(cctx, pr.sid, pr.cid)
		cancel()
		if err != nil || rec.ExitCode == nil {
			continue
		}
		select {
		case <-done:
		case <-time.After(drainGrace):
			stop()
		}
		return
	}
}

// outcome is the command's exit code from its record, which may trail the
// log by a moment; a log that broke is lost, unless a kill cut it once the
// group was dead.
func (pr *process) outcome(ctx context.Context, killed bool) (int, error) {
	b := pr.b
	start := time.Now()
	d := 20 * time.Millisecond
	for {
		rec, err := b.command(ctx, pr.sid, pr.cid)
		if err != nil {
			return -1, pr.lost(ctx, err)
		}
		if rec.ExitCode != nil {
			if pr.streamErr != nil && !killed {
				return -1, pr.lost(ctx, pr.streamErr)
			}
			return *rec.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, pr.lost(ctx, fmt.Errorf("the command's log ended but its record has no exit code after %v", time.Since(start).Round(time.Second)))
		case <-time.After(d):
		}
		d = min(2*d, time.Second)
	}
}

// lost classifies a command the host lost track of: Gone when the box has
// ended, else TransportLost.
func (pr *process) lost(ctx context.Context, err error) error {
	if pr.b.ended(ctx) {
		return providers.E(providers.Gone, "daytona.Exec", err).WithBox(pr.b.id)
	}
	return providers.E(providers.TransportLost, "daytona.Exec", err).WithBox(pr.b.id)
}

// killGroup runs killScript through process/execute on the command whose
// files start with t.
func (b *Box) killGroup(ctx context.Context, t string) error {
	const op = "daytona.Kill"
	code, out, err := b.run(ctx, op, killScript, []string{t}, runOpts{idempotent: true})
	return shell.KillExit(op, b.id, code, out, err)
}
