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
// the process group PG and confirms the group gone, looking again at
// growing intervals (about 10 s in all) and killing again each time. It
// returns 0 once no process of the group is left, 1 when one outlived the
// checks.
const KillGroup = `killgroup() {
	for s in 0.005 0.01 0.02 0.05 0.1 0.2 0.3 0.5 0.5 1 1 2 2 2; do
		kill -9 -"$1" 2>/dev/null
		kill -0 -"$1" 2>/dev/null || return 0
		sleep $s
	done
	kill -9 -"$1" 2>/dev/null
	! kill -0 -"$1" 2>/dev/null
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
