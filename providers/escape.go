package providers

import (
	"fmt"
	"strings"
)

// OctalEscape writes s for a box-side shell's printf %b: printable ASCII
// as itself, every other byte (and the backslash) as \0ooo. It carries
// arbitrary bytes (not UTF-8, control characters) through a channel that
// takes only UTF-8 text, such as a JSON or protobuf string, to a fixed
// script that decodes them.
func OctalEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\0%03o`, c)
		}
	}
	return b.String()
}
