// Package shell holds what boxfs's POSIX sh scripts in boxes share: the
// escape that carries any bytes through a provider's argv, mode octals,
// and the kill of a process group confirmed gone.
package shell

import (
	"fmt"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// Escape makes s safe to pass through any provider's argv (JSON
// included) and inside single or double quotes: bytes outside printable
// ASCII, the backslash and both quotes become \0ooo, which printf %b in
// the box decodes. A string with none of them comes back as it is.
func Escape(s string) string {
	i := 0
	for i < len(s) && !escaped(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		if c := s[i]; escaped(c) {
			fmt.Fprintf(&b, `\0%03o`, c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func escaped(c byte) bool {
	return c < 0x20 || c > 0x7e || c == '\\' || c == '\'' || c == '"'
}

// Octal renders a file's permission and special bits as chmod and mkdir
// -m take them: a leading 0 and four digits, so GNU chmod clears a
// directory's setuid and setgid bits when asked to.
func Octal(m providers.FileMode) string {
	return fmt.Sprintf("0%04o", providers.UnixMode(m)&0o7777)
}

// KillGroup defines the sh function killgroup PG: it sends SIGKILL to
// the process group PG and to the process PG itself (a leader that has not
// made its group yet), and confirms both gone, looking again at growing
// intervals (about 10 s in all) and killing again each time. It returns 0
// once no process of the group is left, 1 when one outlived the checks.
// A zombie counts as gone: it runs nothing, and only its parent can reap
// it. It also defines groupalive PG, the check itself, which reads /proc.
// Both keep to variables named _k*, so a caller's own are left alone.
const KillGroup = `groupalive() {
	for _kf in /proc/[0-9]*/stat; do
		read -r _kl <"$_kf" 2>/dev/null || continue
		_kq=${_kf#/proc/}
		_kq=${_kq%/stat}
		_kl=${_kl##*) }
		_ks=${_kl%% *}
		_kl=${_kl#* }
		_kl=${_kl#* }
		_kg=${_kl%% *}
		[ "$_kg" = "$1" ] || [ "$_kq" = "$1" ] || continue
		[ "$_ks" = Z ] || [ "$_ks" = X ] || return 0
	done
	return 1
}
killgroup() {
	for _kd in 0 0.005 0.01 0.02 0.05 0.1 0.2 0.3 0.5 0.5 1 1 2 2 2; do
		kill -9 -"$1" 2>/dev/null
		kill -9 "$1" 2>/dev/null
		groupalive "$1" || return 0
		sleep $_kd
	done
	! groupalive "$1"
}
`

// Unescape is the inverse of Escape, as printf %b reads it: each \0 with
// up to three octal digits after it is the byte they give. Any other
// backslash is an error (Escape writes none).
func Unescape(s string) (string, error) {
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i = 0; i < len(s); i++ {
		if s[i] != '\\' {
			b = append(b, s[i])
			continue
		}
		if i+1 >= len(s) || s[i+1] != '0' {
			return "", fmt.Errorf("shell: %q: a backslash not followed by 0", s)
		}
		i++
		v, n := 0, 0
		for n < 3 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7' {
			v = v*8 + int(s[i+1]-'0')
			i++
			n++
		}
		if v > 0xff {
			return "", fmt.Errorf("shell: %q: an escape past \\0377", s)
		}
		b = append(b, byte(v))
	}
	return string(b), nil
}

// KillExit classifies how a kill script built on KillGroup ended: exit 0
// (the group is gone) and 3 (nothing recorded: the command had ended) are
// success, and so is a box that is Gone (nothing of it runs); exit 4 (a
// process outlived killgroup) is Liveness; err, when the script did not
// run to an exit, keeps its code; anything else is Unknown, with the
// script's output.
func KillExit(op, box string, code int, out []byte, err error) error {
	if err != nil {
		if providers.IsCode(err, providers.Gone) {
			return nil
		}
		return providers.E(0, op, err).WithBox(box)
	}
	switch code {
	case 0, 3:
		return nil
	case 4:
		return providers.Errorf(providers.Liveness, op, "process group still alive after SIGKILL and ~10 s").WithBox(box)
	}
	return providers.Errorf(providers.Unknown, op, "kill script exited %d: %s", code, strings.TrimSpace(string(out))).WithBox(box)
}
