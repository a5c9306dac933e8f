package agent

import (
	"bytes"
	"context"
	"errors"
	"path"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// checkScript runs the agent binary once it is found trustworthy:
// sh -c CHECK boxfs-agent BIN ARG... execs BIN ARG... when BIN is a
// regular file, not a symbolic link, owned by root or the uid running it,
// and not writable by its group or others, and every directory from / to
// BIN's is not a symbolic link, is owned by root or that uid, and is not
// writable by its group or others unless sticky. Then no other user of
// the box but root can have written the file or can put another in its
// place, and the agent's own -sha256 check is one a trusted binary makes.
// It exits checkMissing when BIN is not there, checkUnsafeFile when BIN
// fails, and checkUnsafeDir when a directory above it fails (or the uid
// cannot be learned), saying why on stderr after checkMark.
const checkScript = `set -f
b=$1
bad() {
	printf 'boxfs-agent-check: %s\n' "$2" >&2
	exit "$1"
}
uid=$(id -u) || bad 86 "id -u failed"
case $uid in '' | *[!0-9]*) bad 86 "id -u said $uid" ;; esac
case $b in /*) ;; *) bad 86 "$b is not an absolute path" ;; esac
om() {
	set -- $(ls -ldn -- "$1")
	m=$1 o=$3
}
dir() {
	[ -L "$1" ] && bad 86 "$1 is a symbolic link"
	[ -d "$1" ] || bad 86 "$1 is not a directory"
	om "$1"
	[ "$o" = 0 ] || [ "$o" = "$uid" ] || bad 86 "$1 is owned by uid $o, not root or $uid"
	w=0
	case $m in ?????w*) w=1 ;; esac
	case $m in ????????w*) w=1 ;; esac
	case $m in ?????????[tT]*) w=0 ;; esac
	[ "$w" = 0 ] || bad 86 "$1 is writable by its group or others and not sticky"
}
dir /
p=
r=${b#/}
r=${r%/*}
case $b in /*/*) ;; *) r= ;; esac
while [ -n "$r" ]; do
	c=${r%%/*}
	case $r in */*) r=${r#*/} ;; *) r= ;; esac
	[ -n "$c" ] || continue
	p=$p/$c
	dir "$p"
done
[ -L "$b" ] && bad 84 "$b is a symbolic link"
[ -e "$b" ] || exit 85
[ -f "$b" ] || bad 84 "$b is not a regular file"
om "$b"
[ "$o" = 0 ] || [ "$o" = "$uid" ] || bad 84 "$b is owned by uid $o, not root or $uid"
case $m in ?????w* | ????????w*) bad 84 "$b is writable by its group or others" ;; esac
exec "$@"`

// How checkScript ends when it does not run the binary.
const (
	checkUnsafeFile = 84
	checkMissing    = 85
	checkUnsafeDir  = 86
	checkMark       = "boxfs-agent-check: "
)

// agentArgv is the command that runs the agent binary at dest with args:
// through checkScript in a box with a shell. A box without one cannot
// check a file it holds: there the channel runs only a copy it has just
// written (see openAt).
func agentArgv(facts providers.Facts, dest string, args ...string) []string {
	argv := append([]string{dest}, args...)
	if !facts.HasShell() {
		return argv
	}
	return append([]string{facts.Shell, "-c", checkScript, "boxfs-agent"}, argv...)
}

// checkError is a start that checkScript refused: Code is its exit.
type checkError struct {
	Code int
	Why  string
}

func (e *checkError) Error() string {
	if e.Code == checkMissing {
		return "the agent binary is not there"
	}
	return "the agent binary is not trusted: " + e.Why
}

// checkFailure returns the checkError of an agent start that ended with
// code and stderr, or nil when checkScript did not refuse it.
func checkFailure(code int, stderr string) *checkError {
	switch code {
	case checkMissing:
		return &checkError{Code: code}
	case checkUnsafeFile, checkUnsafeDir:
		if i := strings.LastIndex(stderr, checkMark); i >= 0 {
			return &checkError{Code: code, Why: strings.TrimSpace(stderr[i+len(checkMark):])}
		}
	}
	return nil
}

// refusedAs reports how checkScript refused the start that returned err
// (0: it did not).
func refusedAs(err error) int {
	var ce *checkError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// privateScript makes a directory only its owner may enter under $1 and
// prints its path.
const privateScript = `umask 077
mktemp -d "$1/.boxfs-agent.XXXXXXXX"`

// privateDir makes a fresh directory only the box's user may enter, in
// dir, for a binary the shared name in dir cannot be trusted at.
func (ch *Channel) privateDir(ctx context.Context, facts providers.Facts, dir string) (string, error) {
	const op = "agent.privateDir"
	var out, stderr bytes.Buffer
	proc, err := ch.exec(ctx, providers.ExecRequest{
		Argv:   []string{facts.Shell, "-c", privateScript, "boxfs-agent", dir},
		Dir:    "/",
		Stdout: &out,
		Stderr: &stderr,
	})
	if err != nil {
		return "", providers.E(0, op, err)
	}
	code, err := proc.Wait()
	if err != nil {
		return "", providers.E(0, op, err)
	}
	p := strings.TrimSpace(out.String())
	if code != 0 || !path.IsAbs(p) || path.Dir(p) != path.Clean(dir) {
		return "", providers.Errorf(providers.Unknown, op, "making a private directory in %s exited %d: %s %s", dir, code, p, strings.TrimSpace(stderr.String()))
	}
	return p, nil
}
