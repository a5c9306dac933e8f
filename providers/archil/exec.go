package archil

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// longerWork is what a Timeout at the platform's bound tells the user to
// do instead.
const longerWork = "Archil runs no command for longer; split the work into steps that each end within it " +
	"(only files persist between commands), or run it where processes live on, " +
	"e.g. as a launch (boxfs launch) in a box of a provider whose facts say liveProcesses"

// Bounds of a command's call.
const (
	// killBound is how long a killed command's answer is waited for.
	killBound = 30 * time.Second
	// answerSlack is how long past a command's own deadline its answer may
	// take (queue, boot, writing its output).
	answerSlack = 2 * time.Minute
	// inlineMax is the most output the answer carries itself (as base64);
	// more is fetched from its objects.
	inlineMax = 256 << 10
	// basePath is a command's PATH.
	basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// wrapper runs one command of a box in the container of one exec call.
// Before it the call sets box, cid (the command's id), dir, secs (its own
// deadline), why (what passing it means), merge (one stream for stdout
// and stderr), inline, owns (disk paths outside the box's directory the
// command changes: a staged upload), envs and the argv ("$@"). It answers
// on the call's stdout with lines "boxfs:..." (the command's output goes
// to objects): gone (no record: the box ended), dup (this command already
// started: a retried call), busy (another command holds the box), or "rc
// N WHY" with, when small, the output as base64.
//
// The disk is mounted shared, and a container may change only what it
// owns: a path it checked out (archil checkout) or one below it, or a
// directory it made. So the wrapper changes nothing before it owns it.
// The command's own files go in a directory it makes, boxes.cmds/<box>/<cid>/
// (its marker, output and status); making it is what tells a retried call
// (dup). The box's lock is a directory it makes too, boxes.cmds/<box>/lock
// (broken once past the time written in it, the command's deadline and a
// little more, by when the platform has ended the command's container
// whatever happened in it: checked out first). It then checks out the
// box's directory, which is also the box's checkout across clients, and
// the paths in owns; old files of the box's commands are removed each
// checked out. Where the container has no archil client (a disk not
// mounted shared) there is nothing to check out.
//
// The command runs as its own process group; a watcher kills the group
// when the host asks (a <cid>.kill object beside the command's directory,
// which the host may write while the command owns its directory), when the
// record goes (destroy), or at the deadline, noting why in the container's
// own /tmp, which a destroy cannot remove. The status also lands in
// <cid>/rc, so a call whose answer was lost can be settled from the
// object. A command that finds the record gone when it ends removes the
// box's directories itself (checked out), which it may have written after
// the destroy removed them.
const wrapper = `
exec 3>&1 >/dev/null 2>&1 </dev/null
top=$PWD
B=boxes/$box
D=boxes.cmds/$box
C=$D/$cid
R=boxes.records/$box.json
L=$D/lock
say() { printf 'boxfs:%s\n' "$*" >&3; }
sz() { if [ -f "$1" ]; then wc -c <"$1"; else echo 0; fi; }
co=
command -v archil >/dev/null && co=1
own() { [ -z "$co" ] || archil checkout "$top/$1"; }
[ -f "$R" ] || { say gone; exit 0; }
mkdir -p -- "$D" || { say fail mkdir; exit 0; }
if ! mkdir -- "$C"; then
	if [ ! -f "$R" ]; then say gone; elif [ -e "$C/run" ]; then say dup; else say fail; fi
	exit 0
fi
: >"$C/run"
printf -v now '%(%s)T' -1
if ! mkdir -- "$L"; then
	u=$(cat -- "$L/until")
	case $u in '' | *[!0-9]*) u=$((now + 1)) ;; esac
	if [ "$u" -lt "$now" ]; then
		if [ -n "$co" ]; then
			if own "$L"; then
				u=$(cat -- "$L/until")
				case $u in '' | *[!0-9]*) u=$((now + 1)) ;; esac
				[ "$u" -ge "$now" ] || rm -rf -- "$L"
				archil checkin "$top/$L"
			fi
		elif mv -- "$L" "$L.stale.$cid"; then
			rm -rf -- "$L.stale.$cid"
		fi
	fi
	mkdir -- "$L" || { rm -rf -- "$C"; say busy; exit 0; }
fi
echo $((now + secs + 15)) >"$L/until"
own "$B" || { rm -rf -- "$L" "$C"; say busy; exit 0; }
for o in "${owns[@]}"; do
	own "$o" || { rm -rf -- "$L" "$C"; say busy; exit 0; }
done
for o in $(find "$D" -mindepth 1 -maxdepth 1 -mmin +15 ! -name lock); do
	own "$o" && rm -rf -- "$o"
done
end=$((now + secs))
wf=/tmp/boxfs-$cid.why
set -m
if [ "$merge" = 1 ]; then
	( cd -- "$dir" && exec env -i PATH=` + basePath + ` HOME="$top/$B" TMPDIR=/tmp "${envs[@]}" "$@" ) 3>&- >"$C/out" 2>&1 &
else
	( cd -- "$dir" && exec env -i PATH=` + basePath + ` HOME="$top/$B" TMPDIR=/tmp "${envs[@]}" "$@" ) 3>&- >"$C/out" 2>"$C/err" &
fi
pid=$!
(
	while sleep 0.1; do
		w=
		if [ -e "$D/$cid.kill" ]; then w=killed
		elif [ ! -f "$R" ]; then w=gone
		elif printf -v t '%(%s)T' -1 && [ "$t" -ge "$end" ]; then w=$why
		fi
		[ -n "$w" ] || continue
		echo "$w" >"$wf"
		kill -KILL -- "-$pid"
		exit 0
	done
) 3>&- &
wp=$!
set +m
wait "$pid"
rc=$?
kill -KILL -- "-$wp"
wait "$wp"
w=
[ -f "$wf" ] && read -r w <"$wf"
rm -f -- "$wf"
[ -n "$w" ] || [ -f "$R" ] || w=gone
kill -KILL -- "-$pid"
n=0
while kill -0 -- "-$pid" && [ $n -lt 200 ]; do sleep 0.05; n=$((n + 1)); done
printf '%s %s\n' "$rc" "$w" >"$C/rc.tmp" && mv -f -- "$C/rc.tmp" "$C/rc"
rm -rf -- "$L"
[ -z "$co" ] || archil checkin "$top/$B"
say "rc $rc $w"
if command -v base64 >/dev/null && [ $(($(sz "$C/out") + $(sz "$C/err"))) -le "$inline" ]; then
	say "out $(base64 -w0 <"$C/out")"
	[ "$merge" = 1 ] || say "err $(base64 -w0 <"$C/err")"
fi
[ -f "$R" ] || { own "$B" && own "$D" && rm -rf -- "$B" "$D"; }
`

// quote renders s as one bash word: $'...' with every byte outside a
// small safe set as \xHH, so any bytes (but NUL) pass exactly through the
// JSON command string.
func quote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_./:=@%+,-", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// execResult is the vendor's ExecDiskResult.
type execResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Timing   struct {
		TotalMs   int64 `json:"totalMs"`
		QueueMs   int64 `json:"queueMs"`
		ExecuteMs int64 `json:"executeMs"`
	} `json:"timing"`
}

// post sends one exec call. It counts for st as billed unless it was
// refused (a 4xx answer other than 504's timeout, which ran).
func (p *Provider) post(ctx context.Context, disk string, st *boxState, command string) (execResult, error) {
	var res execResult
	_, err := p.c.control(ctx, http.MethodPost, "/api/disks/"+disk+"/exec", nil, map[string]string{"command": command}, &res, false)
	if err == nil {
		if st != nil {
			st.calls.Add(1)
		}
		return res, nil
	}
	if s := statusOf(err); st != nil && (s == 0 || s >= 500) {
		st.calls.Add(1)
	}
	return res, wrap("archil.exec", "", err)
}

// maintain runs an idempotent command of boxfs's own on the disk (no
// wrapper, no checkout), retried when no answer came, and returns its
// stdout; an exit other than 0 is an error.
func (p *Provider) maintain(ctx context.Context, disk string, st *boxState, op, command string) (string, error) {
	for attempt := 1; ; attempt++ {
		res, err := p.post(ctx, disk, st, command)
		if err == nil && res.ExitCode == 0 {
			return res.Stdout, nil
		}
		if err == nil {
			return "", providers.Errorf(providers.Unknown, op, "boxfs's command exited %d: %s", res.ExitCode, clip(res.Stderr))
		}
		// No answer, a 429 or a 5xx: send it again. A 504 ran into the
		// platform's limit, and would again.
		if s := statusOf(err); s != 0 && (!retryableStatus(s) || s == http.StatusGatewayTimeout) || attempt >= maxTries || ctx.Err() != nil {
			return "", wrap(op, "", err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return "", wrap(op, "", err)
		}
	}
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// checkExec refuses a request the box cannot run, before any call.
func checkExec(op, box string, req providers.ExecRequest) error {
	if err := req.Validate(); err != nil {
		return providers.E(0, op, err).WithBox(box)
	}
	if req.Stdin != nil {
		return providers.Errorf(providers.Unsupported, op, "an archil command has no stdin; move bytes through files").WithBox(box)
	}
	return nil
}

// Exec starts a command. Commands of one box run one at a time, in the
// order Exec was called in this process, and one at a time across
// processes (the box's checkout, waited for up to queue_wait). The
// command's output arrives when it ends. A cancelled ctx or Kill asks the
// command's wrapper to kill its process group, and Wait returns once its
// call answers, that is once the group is gone.
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "archil.Exec"
	if err := checkExec(op, b.id, req); err != nil {
		return nil, err
	}
	if !b.p.execEnabled() {
		return nil, providers.Errorf(providers.Unsupported, op, "region %s does not run commands", b.p.region).WithBox(b.id)
	}
	if err := b.checkLifetime(ctx, op); err != nil {
		return nil, err
	}
	start, release := b.st.take()
	pr := &process{b: b, ctx: ctx, req: req, kill: make(chan struct{}), done: make(chan struct{})}
	go pr.run(start, release)
	return pr, nil
}

// process is one command.
type process struct {
	b        *Box
	ctx      context.Context
	req      providers.ExecRequest
	kill     chan struct{}
	killOnce sync.Once
	byKill   atomic.Bool
	done     chan struct{}
	code     int
	err      error
}

func (pr *process) run(start <-chan struct{}, release func()) {
	defer close(pr.done)
	const op = "archil.Exec"
	select {
	case <-start:
	case <-pr.ctx.Done():
		go func() { <-start; release() }()
		pr.err = wrap(op, pr.b.id, pr.ctx.Err())
		return
	case <-pr.kill:
		go func() { <-start; release() }()
		pr.err = providers.Errorf(providers.Aborted, op, "killed before it started").WithBox(pr.b.id)
		return
	}
	defer release()
	pr.code, pr.err = pr.b.command(pr.ctx, pr.kill, pr.req)
	if pr.err == nil && pr.code == killedCode && !pr.byKill.Load() && pr.ctx.Err() != nil {
		pr.err = wrap(op, pr.b.id, pr.ctx.Err())
	}
}

// Wait waits for the command's end and its output.
func (pr *process) Wait() (int, error) {
	<-pr.done
	return pr.code, pr.err
}

// Kill asks the command's wrapper to kill its group and waits for its
// call to answer. A command that has ended is not an error.
func (pr *process) Kill(ctx context.Context) error {
	pr.byKill.Store(true)
	pr.killOnce.Do(func() { close(pr.kill) })
	select {
	case <-pr.done:
		return nil
	case <-ctx.Done():
		return wrap("archil.Kill", pr.b.id, ctx.Err())
	}
}

// killedCode is a command's exit when its wrapper killed it.
const killedCode = 128 + 9

// answer is what a wrapper said.
type answer struct {
	state    string // gone, dup, busy, rc, fail
	rc       int
	why      string
	out, err []byte
	inline   bool
}

func parseAnswer(stdout string) (answer, bool) {
	var a answer
	for _, line := range strings.Split(stdout, "\n") {
		rest, ok := strings.CutPrefix(line, "boxfs:")
		if !ok {
			continue
		}
		word, arg, _ := strings.Cut(rest, " ")
		switch word {
		case "gone", "dup", "busy", "fail":
			a.state = word
		case "rc":
			n, why, _ := strings.Cut(arg, " ")
			rc, err := strconv.Atoi(n)
			if err != nil || rc < 0 || rc > 255 {
				return a, false
			}
			a.state, a.rc, a.why = "rc", rc, strings.TrimSpace(why)
		case "out", "err":
			data, err := base64.StdEncoding.DecodeString(arg)
			if err != nil {
				return a, false
			}
			if word == "out" {
				a.out, a.inline = data, true
			} else {
				a.err = data
			}
		}
	}
	return a, a.state != ""
}

// commandText is the exec call's command for req, as command cid; owns
// are the disk-relative paths outside the box's directory it changes.
func (b *Box) commandText(cid string, req providers.ExecRequest, secs int, why string, owns []string) string {
	// The command starts at the disk's root: a directory under it is
	// disk-relative, the workspace boxes/<id>.
	dir := providers.ExecRequest{Dir: req.Dir}.WorkDir(boxesDir + "/" + b.id)
	if rest, ok := strings.CutPrefix(dir, b.rec.Root+"/"); ok && b.rec.Root != "" {
		dir = rest
	}
	merge := "0"
	if req.Stdout != nil && req.Stdout == req.Stderr {
		merge = "1"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "box=%s cid=%s dir=%s secs=%d why=%s merge=%s inline=%d\n", quote(b.id), quote(cid), quote(dir), secs, why, merge, inlineMax)
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sb.WriteString("envs=(")
	for _, k := range keys {
		sb.WriteString(" " + quote(k+"="+req.Env[k]))
	}
	sb.WriteString(" )\nowns=(")
	for _, o := range owns {
		sb.WriteString(" " + quote(o))
	}
	sb.WriteString(" )\nset --")
	for _, a := range req.Argv {
		sb.WriteString(" " + quote(a))
	}
	sb.WriteString("\n" + wrapper)
	return sb.String()
}

// deadline is a command's own, in whole seconds: inside the platform's
// limit, and not before the box's lifetime ends (the second it ends in is
// counted whole: rounded down, a command began 2.3 s before the end
// would have ended 0.3 s early). why says which of the two it is.
func (b *Box) deadline() (int, string) {
	secs, why := int((b.p.maxExec-execMargin)/time.Second), "deadline"
	if left := int((b.rec.Ends.Sub(b.p.now()) + time.Second - 1) / time.Second); left < secs {
		secs, why = max(left, 1), "ended"
	}
	return secs, why
}

// command runs one command in this process's turn and returns its exit;
// owns are the disk-relative paths outside the box's directory it changes
// (the wrapper checks them out).
func (b *Box) command(ctx context.Context, kill <-chan struct{}, req providers.ExecRequest, owns ...string) (int, error) {
	const op = "archil.Exec"
	cid := providers.NewID(8)
	secs, why := b.deadline()
	text := b.commandText(cid, req, secs, why, owns)
	busyUntil := time.Now().Add(b.p.queueWait)
	tries := 0
	for {
		a, err := b.call(ctx, kill, cid, text, time.Duration(secs)*time.Second)
		if err != nil {
			return -1, err
		}
		switch a.state {
		case "gone":
			b.st.ended.Store(true)
			return -1, providers.Errorf(providers.Gone, op, "the box's record is gone: it was destroyed").WithBox(b.id)
		case "fail":
			return -1, providers.Errorf(providers.Unknown, op, "the command's wrapper could not set up its files on the disk").WithBox(b.id)
		case "busy":
			tries++
			if time.Now().After(busyUntil) {
				return -1, providers.Errorf(providers.Unavailable, op, "another process's command has held the box for over %v", b.p.queueWait).WithBox(b.id)
			}
			if err := b.pause(ctx, kill, min(backoff(tries), time.Second)); err != nil {
				return -1, wrap(op, b.id, err)
			}
			continue
		}
		return b.finish(ctx, cid, req, a)
	}
}

// pause waits d, or until ctx ends or a kill comes.
func (b *Box) pause(ctx context.Context, kill <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-kill:
		return context.Canceled
	case <-t.C:
		return nil
	}
}

// call makes the command's exec call and reads the wrapper's answer. When
// ctx ends or a kill comes while it runs, it asks the wrapper to kill the
// command and waits (bounded) for the answer. A call whose answer is lost
// is settled from the command's status object, waiting for it while the
// command may still run; one that never started is sent again (its id
// keeps a second start from running it twice).
func (b *Box) call(ctx context.Context, kill <-chan struct{}, cid, text string, secs time.Duration) (answer, error) {
	const op = "archil.Exec"
	for attempt := 1; ; attempt++ {
		res, err := b.postWatched(ctx, kill, cid, text, secs)
		if err == nil {
			a, ok := parseAnswer(res.Stdout)
			if !ok {
				return a, providers.Errorf(providers.Unknown, op, "the command's call answered without a status (exit %d): %s", res.ExitCode, clip(res.Stderr)).WithBox(b.id)
			}
			if a.state == "dup" {
				return b.awaitStatus(ctx, kill, cid, secs)
			}
			return a, nil
		}
		if !providers.IsCode(err, providers.Unavailable) && !providers.IsCode(err, providers.TransportLost) && !providers.IsCode(err, providers.Timeout) {
			return answer{}, err
		}
		if ctx.Err() != nil {
			return answer{}, wrap(op, b.id, ctx.Err())
		}
		// No answer, a 5xx or the platform's timeout: the command may
		// have run, or may run still.
		if a, found, serr := b.status(ctx, cid); serr == nil && found {
			return a, nil
		}
		if statusOf(err) == http.StatusGatewayTimeout {
			return answer{}, providers.Errorf(providers.Timeout, op, "the platform cut the command off at its bound (max_exec %v): %s", b.p.maxExec, longerWork).WithBox(b.id)
		}
		if started, serr := b.started(ctx, cid); serr == nil && started {
			return b.awaitStatus(ctx, kill, cid, secs)
		}
		if attempt >= maxTries {
			return answer{}, err
		}
		if err := b.pause(ctx, kill, backoff(attempt)); err != nil {
			return answer{}, wrap(op, b.id, err)
		}
	}
}

// postWatched sends the call; when ctx ends or a kill comes first, it
// writes the command's .kill object and waits up to killBound more.
func (b *Box) postWatched(ctx context.Context, kill <-chan struct{}, cid, text string, secs time.Duration) (execResult, error) {
	const op = "archil.Exec"
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), secs+answerSlack)
	defer cancel()
	type result struct {
		res execResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b.p.post(hctx, b.disk, b.st, text)
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
	case <-kill:
	}
	if err := b.askKill(ctx, cid); err != nil {
		b.p.log.Warn("archil: could not ask a command to stop", "box", b.id, "err", err)
	}
	t := time.NewTimer(killBound)
	defer t.Stop()
	select {
	case r := <-done:
		return r.res, r.err
	case <-t.C:
		return execResult{}, providers.Errorf(providers.Liveness, op, "a killed command's call did not answer within %v", killBound).WithBox(b.id)
	}
}

// cmdKey is the object of a command's file name (run, out, err, rc), in
// the directory the command makes and owns.
func (b *Box) cmdKey(cid, name string) string { return cmdsDir + "/" + b.id + "/" + cid + "/" + name }

// killKey is the object that asks a command to stop: beside its directory,
// which the command owns while it runs, so that the host may write it.
func (b *Box) killKey(cid string) string { return cmdsDir + "/" + b.id + "/" + cid + ".kill" }

// askKill writes the command's .kill object, which its watcher acts on.
func (b *Box) askKill(ctx context.Context, cid string) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return b.p.c.putObject(kctx, b.disk, b.killKey(cid), strings.NewReader("kill\n"), 5)
}

// status reads a command's status object.
func (b *Box) status(ctx context.Context, cid string) (answer, bool, error) {
	resp, err := b.p.c.getObject(context.WithoutCancel(ctx), b.disk, b.cmdKey(cid, "rc"), nil)
	if statusOf(err) == http.StatusNotFound {
		return answer{}, false, nil
	}
	if err != nil {
		return answer{}, false, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return answer{}, false, err
	}
	a, ok := parseAnswer("boxfs:rc " + strings.TrimSpace(string(data)))
	if !ok {
		return answer{}, false, fmt.Errorf("archil: command status object %q", data)
	}
	return a, true, nil
}

// recordGone reports whether the box's record is known to be gone (a
// failure to read it says nothing).
func (b *Box) recordGone(ctx context.Context) bool {
	if b.st.ended.Load() {
		return true
	}
	_, err := b.p.readRecord(context.WithoutCancel(ctx), b.disk, b.id)
	return statusOf(err) == http.StatusNotFound
}

// started reports whether a command's wrapper got as far as marking it.
func (b *Box) started(ctx context.Context, cid string) (bool, error) {
	resp, err := b.p.c.getObject(context.WithoutCancel(ctx), b.disk, b.cmdKey(cid, "run"), nil)
	if statusOf(err) == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return true, nil
}

// awaitStatus polls a command's status object until the command's own
// deadline has surely passed, asking it to stop when ctx ends or a kill
// comes. A box whose record is gone meanwhile was destroyed: its
// directories, the status object's with them, are gone too.
func (b *Box) awaitStatus(ctx context.Context, kill <-chan struct{}, cid string, secs time.Duration) (answer, error) {
	const op = "archil.Exec"
	until := time.Now().Add(secs + answerSlack)
	asked := false
	for d := 200 * time.Millisecond; time.Now().Before(until); d = min(d*2, 2*time.Second) {
		a, found, err := b.status(ctx, cid)
		if err == nil && found {
			return a, nil
		}
		if err == nil && b.recordGone(ctx) {
			return answer{state: "gone"}, nil
		}
		if err := b.pause(ctx, kill, d); err != nil && !asked {
			asked = true
			if kerr := b.askKill(ctx, cid); kerr != nil {
				return answer{}, wrap(op, b.id, kerr)
			}
			until = time.Now().Add(killBound)
			ctx = context.WithoutCancel(ctx)
			kill = nil
		}
	}
	return answer{}, providers.Errorf(providers.OutcomeUnknown, op, "command %s started but its status never came", cid).WithBox(b.id)
}

// finish hands a command's output to its writers and turns its status
// into Wait's answer.
func (b *Box) finish(ctx context.Context, cid string, req providers.ExecRequest, a answer) (int, error) {
	const op = "archil.Exec"
	if err := b.output(ctx, cid, req, a); err != nil {
		return -1, err
	}
	switch a.why {
	case "":
		return a.rc, nil
	case "killed":
		return killedCode, nil
	case "gone":
		b.st.ended.Store(true)
		return -1, providers.Errorf(providers.Gone, op, "the box was destroyed while the command ran").WithBox(b.id)
	case "ended":
		b.endLazily(ctx, false)
		return -1, providers.Errorf(providers.Gone, op, "the box's lifetime ended while the command ran").WithBox(b.id)
	case "deadline":
		return -1, providers.Errorf(providers.Timeout, op, "the command ran into its deadline, %v inside the platform's bound of %v on one command: %s", execMargin, b.p.maxExec, longerWork).WithBox(b.id)
	}
	return -1, providers.Errorf(providers.Unknown, op, "the command ended for a reason not known: %q", a.why).WithBox(b.id)
}

// output copies the command's stdout and stderr to the request's writers:
// from the answer where it carried them, else from their objects, which
// are then deleted.
func (b *Box) output(ctx context.Context, cid string, req providers.ExecRequest, a answer) error {
	const op = "archil.Exec"
	merge := req.Stdout != nil && req.Stdout == req.Stderr
	if a.inline {
		if err := write(req.Stdout, a.out); err != nil {
			return providers.E(providers.Unknown, op, err).WithBox(b.id)
		}
		if !merge {
			if err := write(req.Stderr, a.err); err != nil {
				return providers.E(providers.Unknown, op, err).WithBox(b.id)
			}
		}
		return nil
	}
	streams := []struct {
		ext string
		w   io.Writer
	}{{"out", req.Stdout}}
	if !merge {
		streams = append(streams, struct {
			ext string
			w   io.Writer
		}{"err", req.Stderr})
	}
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.fetch(ctx, b.cmdKey(cid, s.ext), s.w)
		}()
	}
	wg.Wait()
	for _, s := range streams {
		if err := b.p.c.deleteObject(context.WithoutCancel(ctx), b.disk, b.cmdKey(cid, s.ext)); err != nil {
			b.p.log.Debug("archil: deleting a command's output", "box", b.id, "err", err)
		}
	}
	for _, err := range errs {
		if err != nil {
			return wrap(op, b.id, err)
		}
	}
	return nil
}

// fetch copies one output object to w (nil: discard). A missing one (the
// box was removed meanwhile) is no output.
func (b *Box) fetch(ctx context.Context, key string, w io.Writer) error {
	resp, err := b.p.c.getObject(context.WithoutCancel(ctx), b.disk, key, nil)
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if w == nil {
		w = io.Discard
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

func write(w io.Writer, b []byte) error {
	if w == nil || len(b) == 0 {
		return nil
	}
	_, err := io.Copy(w, bytes.NewReader(b))
	return err
}
