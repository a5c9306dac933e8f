package hands

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// Command is one command to run in the box: a command line (Line) or an
// argv (Argv), exactly one of them.
type Command struct {
	// Line runs in the box's shell (Facts.Shell: bash if the box has it,
	// else sh).
	Line string
	// Argv runs as is, byte for byte.
	Argv []string
	// Env is the command's environment on top of the box's fixed base.
	Env map[string]string
	// Dir is the working directory; "" is the workspace.
	Dir string
	// Stdin is read until EOF; nil is an empty stdin.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it comes; nil discards it.
	Stdout, Stderr io.Writer
}

// recordScript runs a command under a record of it in the box: DIR ID OWNER
// ARGV... It writes DIR/ID ("pgid pid starttime owner"), runs ARGV (not
// exec'd, so the record goes when ARGV ends), and passes on its status.
const recordScript = decodeArgs + `dir=$1
id=$2
own=$3
shift 3
pg=$$
st=0
if [ -r /proc/$$/stat ]; then
	read -r _ _ _ _ pg _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ st _ < /proc/$$/stat
fi
mkdir -p -- "$dir" 2>/dev/null
printf '%s %s %s %s\n' "$pg" "$$" "$st" "$own" > "$dir/$id.tmp" 2>/dev/null && mv -f -- "$dir/$id.tmp" "$dir/$id"
"$@"
rc=$?
rm -f -- "$dir/$id"
exit $rc
`

// listScript prints every record under DIR: "ID\0CONTENT\0". It runs
// after the scripts' prelude.
const listScript = `dir=$1
[ -d "$dir" ] || exit 0
for f in "$dir"/*; do
	[ -f "$f" ] || continue
	case $f in *.tmp) continue ;; esac
	printf '%s\0' "${f##*/}"
	cat -- "$f"
	printf '\0'
done
`

// endScript ends the group of each record DIR/ID given, confirming it gone
// (killgroup), and removes the record. It exits 1 when a group outlived
// the checks. It runs after the scripts' prelude, which decodes its
// arguments.
const endScript = shell.KillGroup + `dir=$1
shift
rc=0
for id in "$@"; do
	f=$dir/$id
	pg=
	read -r pg pid st own < "$f" 2>/dev/null
	case $pg in '' | *[!0-9]* | 0 | 1) rm -f -- "$f"; continue ;; esac
	if [ -r "/proc/$pid/stat" ] && [ "$st" != 0 ]; then
		read -r _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ now _ < "/proc/$pid/stat"
		[ "$now" = "$st" ] || { rm -f -- "$f"; continue; }
	fi
	if killgroup "$pg"; then
		rm -f -- "$f"
	else
		rc=1
	fi
done
exit $rc
`

// cmdDir is where a box's command records live.
func (h *Hands) cmdDir() string {
	if !h.Facts().HasShell() || h.Facts().TmpDir == "" {
		return ""
	}
	return strings.TrimSuffix(h.Facts().TmpDir, "/") + "/.boxfs/cmds"
}

// Run starts a command in the box as its own process group. Its output
// streams to cmd.Stdout and cmd.Stderr. The command ends when it exits, when
// the process's Kill is called, or when ctx is done: the provider then kills
// the whole group and confirms it, and Wait returns Aborted or Timeout. When
// the command shows no output for the liveness bound, hands asks the
// provider for the box's status; when that gets no answer within the bound
// either, the command is ended and Wait returns Liveness (Gone when the box
// has gone).
func (h *Hands) Run(ctx context.Context, cmd Command) (providers.Process, error) {
	const op = "hands.Run"
	if (cmd.Line == "") == (len(cmd.Argv) == 0) {
		return nil, providers.Errorf(providers.Invalid, op, "a command needs a Line or an Argv, not both").WithBox(h.box.ID())
	}
	argv := cmd.Argv
	if cmd.Line != "" {
		shell := h.Facts().Shell
		if shell == "" {
			shell = "sh"
		}
		argv = []string{shell, "-c", cmd.Line}
	}
	var id string
	wrapped := argv
	if dir := h.cmdDir(); dir != "" {
		id = providers.NewID(12)
		wrapped = []string{"sh", "-c", recordScript, "boxfs-cmd", shell.Escape(dir), id, shell.Escape(h.owner)}
		for _, a := range argv {
			wrapped = append(wrapped, shell.Escape(a))
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	act := newActivity()
	stdout, stderr := cmd.Stdout, cmd.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	req := providers.ExecRequest{
		Argv:   wrapped,
		Env:    cmd.Env,
		Dir:    cmd.Dir,
		Stdout: actWriter{stdout, act},
		Stderr: actWriter{stderr, act},
	}
	if cmd.Stdin != nil {
		req.Stdin = actReader{cmd.Stdin, act}
	}
	var viaAgent atomic.Bool
	var abandoned func()
	if id != "" {
		// A wrapper that started after Run gave up was killed with its
		// group and may have left its record.
		abandoned = func() {
			if viaAgent.Load() {
				return // the agent confirms its kills and clears the record
			}
			ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), h.liveness)
			h.endRecords(ectx, []string{id})
			ecancel()
		}
	}
	p, err := startLive(rctx, h.execFor(argv, id, &viaAgent), req, h.liveness, abandoned)
	if err != nil {
		cancel()
		return nil, providers.E(0, op, err).WithBox(h.box.ID())
	}
	rp := &process{h: h, p: p, id: id, viaAgent: viaAgent.Load(), done: make(chan struct{})}
	go func() {
		defer cancel()
		rp.code, rp.err = waitLive(rctx, cancel, p, act, h.liveness, h.probe)
		if rp.err != nil {
			rp.err = providers.E(0, op, rp.err).WithBox(h.box.ID())
		}
		// The agent confirms a killed group gone itself, unless its
		// stream died or stopped answering.
		confirmed := rp.viaAgent && !providers.IsCode(rp.err, providers.TransportLost) && !providers.IsCode(rp.err, providers.Liveness)
		if rp.err == nil || id == "" || confirmed {
			close(rp.done)
			return
		}
		// Ended by ctx or the liveness bound: the wrapper died with its
		// group and left its record; confirm the group gone and clear it.
		// After a cancel or a deadline the box still answers, so Wait
		// returns once that is done: a caller that goes on to look finds
		// no trace of the command. A box that stopped answering would
		// hold Wait for another bound, so Wait returns first there.
		ctxEnded := providers.IsCode(rp.err, providers.Aborted) || providers.IsCode(rp.err, providers.Timeout)
		if !ctxEnded {
			close(rp.done)
		}
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), h.liveness)
		if _, err := h.endRecords(ectx, []string{id}); err != nil {
			h.log.Warn("hands: could not confirm an ended command's group gone", "err", err)
		}
		ecancel()
		if ctxEnded {
			close(rp.done)
		}
	}()
	return rp, nil
}

// execFor returns how Run starts a command: through the agent's command
// stream when the box has the agent (argv as is; the agent writes the
// command's record itself), else, or when that stream is not up, the
// provider's exec of req.Argv (argv wrapped in recordScript).
func (h *Hands) execFor(argv []string, id string, viaAgent *atomic.Bool) execFunc {
	if h.channel == nil {
		return h.exec
	}
	return func(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
		areq := req
		areq.Argv = argv
		if areq.Dir == "" {
			areq.Dir = h.Facts().Workspace
		}
		var rec *agent.Record
		if id != "" {
			rec = &agent.Record{Dir: h.cmdDir(), ID: id, Owner: h.owner}
		}
		if areq.Dir != "" {
			p, err := h.channel.Exec(ctx, areq, rec)
			if !providers.IsCode(err, providers.Unavailable) {
				viaAgent.Store(err == nil)
				return p, err
			}
			h.log.Debug("hands: the agent's command stream is not up; the provider runs the command", "err", err)
		}
		return h.exec(ctx, req)
	}
}

// probe vouches for a silent command's box: nil while the provider says it
// runs.
func (h *Hands) probe(ctx context.Context) error {
	st, err := h.box.Status(ctx)
	if err != nil {
		return err
	}
	if st.State == providers.StateEnded {
		return providers.Errorf(providers.Gone, "hands.Run", "the box has ended: %s", st.Reason)
	}
	return nil
}

// process is a command started by Run.
type process struct {
	h  *Hands
	p  providers.Process
	id string // its record in the box; "" without one
	// viaAgent: the agent's command stream runs it (and confirms kills).
	viaAgent bool
	done     chan struct{}
	code     int
	err      error
}

// Wait waits for the command's end; see Run.
func (rp *process) Wait() (int, error) {
	<-rp.done
	return rp.code, rp.err
}

// Kill ends the command's whole group through the provider, then makes
// sure through the command's record in the box that none of it runs.
func (rp *process) Kill(ctx context.Context) error {
	const op = "hands.Kill"
	if err := rp.p.Kill(ctx); err != nil {
		return providers.E(0, op, err).WithBox(rp.h.box.ID())
	}
	if rp.id == "" || rp.viaAgent {
		return nil
	}
	select {
	case <-rp.done:
		// Ended by itself or by the kill; a killed wrapper leaves its
		// record, which endScript clears.
	default:
	}
	if _, err := rp.h.endRecords(ctx, []string{rp.id}); err != nil {
		return providers.E(0, op, err).WithBox(rp.h.box.ID())
	}
	return nil
}

// endRecords ends the groups of the records ids.
func (h *Hands) endRecords(ctx context.Context, ids []string) (int, error) {
	const op = "hands.EndLeftCommands"
	if len(ids) == 0 {
		return 0, nil
	}
	args := append([]string{h.cmdDir()}, ids...)
	_, err := h.sh.run(ctx, op, "", endScript, nil, io.Discard, args...)
	if err != nil {
		if providers.IsCode(err, providers.Unknown) {
			return 0, providers.Errorf(providers.Unknown, op, "a command group outlived its kill: %v", err).WithBox(h.box.ID())
		}
		return 0, err
	}
	return len(ids), nil
}

// EndLeftCommands ends the command groups that host processes which no
// longer run left behind in the box, and returns how many it ended. A
// record written by a host process of this machine that has since ended (or
// before this machine's last boot) is left behind; records of live host
// processes, and of other machines, are kept.
func (h *Hands) EndLeftCommands(ctx context.Context) (int, error) {
	const op = "hands.EndLeftCommands"
	dir := h.cmdDir()
	if dir == "" {
		return 0, nil
	}
	out, err := h.sh.run(ctx, op, dir, listScript, nil, nil, dir)
	if err != nil {
		return 0, err
	}
	f := strings.Split(string(out), "\x00")
	var left []string
	for i := 0; i+1 < len(f); i += 2 {
		id, rec := f[i], strings.Fields(f[i+1])
		if len(rec) != 4 {
			left = append(left, id) // a broken record: endScript removes it
			continue
		}
		if ownerLeft(rec[3]) {
			left = append(left, id)
		}
	}
	n, err := h.endRecords(ctx, left)
	if err != nil {
		return n, err
	}
	if n > 0 {
		h.log.Info("hands: ended commands a dead host left behind", "n", n)
	}
	return n, nil
}

// ownerLeft reports whether the host process named by owner (as hostOwner
// writes it) is known to be gone.
func ownerLeft(owner string) bool {
	host, boot, pid, start, ok := parseOwner(owner)
	if !ok {
		return false
	}
	me, myBoot, _, _, _ := parseOwner(hostOwner())
	if host != me {
		return false
	}
	if boot != myBoot {
		return true
	}
	return !processRuns(pid, start)
}

func parseOwner(owner string) (host, boot, pid, start string, ok bool) {
	f := strings.Split(owner, "/")
	if len(f) != 4 {
		return "", "", "", "", false
	}
	return f[0], f[1], f[2], f[3], true
}

func formatOwner(host, boot string, pid int, start string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r <= ' ' || r == '/' || r > '~' {
				return '_'
			}
			return r
		}, s)
	}
	return fmt.Sprintf("%s/%s/%d/%s", clean(host), clean(boot), pid, clean(start))
}
