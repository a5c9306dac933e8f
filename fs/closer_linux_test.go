package fs

import (
	"strings"
	"testing"
)

func TestCloseCause(t *testing.T) {
	// stat builds a /proc/PID/stat line with the given flags and exit code.
	stat := func(comm string, flags, code string) []byte {
		f := make([]string, 50)
		for i := range f {
			f[i] = "0"
		}
		f[0] = "R"
		f[9-3] = flags
		f[52-3] = code
		return []byte("812 (" + comm + ") " + strings.Join(f, " ") + "\n")
	}
	for _, c := range []struct {
		name     string
		stat     []byte
		readable bool
		want     string // a part of the answer; "" for none
	}{
		{"close", stat("bash", "4194560", "0"), true, ""},
		{"exit=0", stat("bash", "4194564", "0"), true, ""},
		{"exit=3", stat("bash", "4194564", "768"), true, ""},
		{"killed", stat("bash", "4194564", "9"), true, "killed by signal 9"},
		{"core", stat("bash", "4194564", "139"), true, "killed by signal 11"},
		{"unreadable", stat("bash", "4194564", "0"), false, "may not read"},
		{"odd-comm", stat("a) b (c", "4194564", "15"), true, "killed by signal 15"},
		{"short", []byte("812 (bash) R 1 2"), true, "could not be read"},
		{"garbage", []byte("nothing"), true, "could not be read"},
	} {
		t.Run("case="+c.name, func(t *testing.T) {
			got := closeCause(c.stat, c.readable)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Errorf("closeCause = %q, want %q", got, c.want)
			}
		})
	}
}
