// Package wrapper holds the POSIX sh script by which providers run a
// command in a box as its own process group, the script that kills that
// group, and the host's reading of the script's output.
package wrapper

import (
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// Script runs every command a provider execs. The text is the same each
// time and everything comes as positional parameters, so argv reaches the
// command byte for byte and no shell parses it:
//
//	$1 this script  $2 "1" once setsid was tried  $3 the pid file's name
//	$4 the directory ("" stays where the exec API started it)
//	$5 "1" when the pairs and argv are octal-escaped
//	$6 "1" when stderr joins stdout  $7 the count of NAME=value pairs
//	that follow, then argv
//
// Exec APIs carry strings that must be UTF-8; other bytes travel as \0ooo
// escapes that printf %b turns back into bytes. The shell makes sure it
// leads its own process group (re-running itself under setsid if the
// runtime did not make it a session leader), records the group in
// /tmp/.boxfs-UID/ (per user: a directory another user made cannot stand
// in the way), exports the pairs, enters the directory and writes one
// marker byte on stdout: providers.MarkerStarted, or the marker of a
// directory that is missing/not a directory/not enterable, or
// MarkerNoRecord (a command that could not be killed is not started). The
// command runs as a child, so the shell can drop the pid file and pass on
// its status (128+n for signal n). Last, it writes the trailer on stdout
// and on stderr, by which the host knows the output arrived whole.
const Script = `if [ "$2" = 0 ] && ! kill -0 -$$ 2>/dev/null; then
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
if [ -n "$d" ] && ! cd "$d" 2>/dev/null; then
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

// KillScript kills the process group recorded under the pid file's name
// $1 and confirms it gone (shell.KillGroup). Its exit status is what
// shell.KillExit reads: 0 gone; 3 nothing recorded (the command had
// ended); 4 still there.
const KillScript = shell.KillGroup + `f=/tmp/.boxfs-$(id -u 2>/dev/null)/$1
p=$(cat "$f" 2>/dev/null)
case $p in ''|*[!0-9]*|0|1) exit 3 ;; esac
killgroup "$p" || exit 4
rm -f "$f"
`

// MarkerNoRecord is Script's marker when it cannot record the command's
// group (the others are providers.Marker*).
const MarkerNoRecord = 4

// pidPrefix starts the name of every pid file Script writes.
const pidPrefix = "exec-"

// Command is one command run through Script.
type Command struct {
	// Argv is the exec's argv: /bin/sh, Script and its parameters.
	Argv []string
	// Name is the name the command's group is recorded under: the
	// parameter of KillScript, and what the trailer carries.
	Name string
}

// NewCommand builds the Command that runs req in dir. req must be valid
// (providers.ExecRequest.Validate). req.Env travels as NAME=value pairs;
// when any pair or argument is not UTF-8, all of them travel escaped.
// Stderr joins stdout when both are the same writer.
func NewCommand(req providers.ExecRequest, dir string) Command {
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
	join := req.Stdout != nil && req.Stdout == req.Stderr
	name := pidPrefix + providers.NewID(8)
	argv := []string{"/bin/sh", "-c", `eval "$1"`, "boxfs-exec", Script, "0",
		name, dir, flag(escaped), flag(join), strconv.Itoa(len(req.Env))}
	return Command{Argv: append(argv, args...), Name: name}
}

// KillArgv is the argv that runs KillScript on the group recorded under
// name.
func KillArgv(name string) []string {
	return []string{"/bin/sh", "-c", KillScript, "boxfs-kill", name}
}

func flag(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// Marker is the error of Script's own marker for providers.GroupHooks:
// MarkerNoRecord is Unsupported; any other is left unknown (nil).
func Marker(op, box string) func(m byte) error {
	return func(m byte) error {
		if m != MarkerNoRecord {
			return nil
		}
		return providers.Errorf(providers.Unsupported, op, "the box's /tmp is not writable: the command's process group cannot be recorded, so it could not be killed").WithBox(box)
	}
}
