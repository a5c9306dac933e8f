package archil

import (
	"fmt"
	"sort"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// What a command's call carries besides the command.
const (
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
