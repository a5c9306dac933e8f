package wrapper

import (
	"bytes"
	"testing"
)

// TestTrailerCut splits streams at every pair of places and checks that the
// trailer is taken out wherever it falls, that what only looks like its
// start is passed on, and that a stream without it says so.
func TestTrailerCut(t *testing.T) {
	end := trailer("exec-0123abcd")
	cases := []struct {
		name, in, want string
		seen           bool
	}{
		{"at the end", "hello\x00world" + string(end), "hello\x00world", true},
		{"alone", string(end), "", true},
		{"in the middle", "before" + string(end) + "after", "beforeafter", true},
		{"twice", "a" + string(end) + "b" + string(end), "ab" + string(end), true},
		{"missing", "all of it but the trailer", "all of it but the trailer", false},
		{"cut short", "data" + string(end[:len(end)-1]), "data" + string(end[:len(end)-1]), false},
		{"start repeated", "\x1e\x1eexec-\x1e" + string(end), "\x1e\x1eexec-\x1e", true},
		{"empty", "", "", false},
	}
	for _, c := range cases {
		in := []byte(c.in)
		for i := 0; i <= len(in); i++ {
			for j := i; j <= len(in); j++ {
				var got bytes.Buffer
				tc := &trailerCut{put: func(b []byte) { got.Write(b) }, trailer: end}
				for _, part := range [][]byte{in[:i], in[i:j], in[j:]} {
					// The stream reuses its buffer: scribble on it after
					// each write.
					buf := bytes.Clone(part)
					if n, err := tc.Write(buf); n != len(buf) || err != nil {
						t.Fatalf("%s: Write = %d, %v", c.name, n, err)
					}
					for k := range buf {
						buf[k] = '!'
					}
				}
				tc.end()
				if got.String() != c.want || tc.seen != c.seen {
					t.Fatalf("%s split at %d,%d: got %q (trailer seen %v), want %q (%v)", c.name, i, j, got.String(), tc.seen, c.want, c.seen)
				}
			}
		}
	}
}
