package fs

import (
	"bytes"
	"strings"
	"testing"
)

// The debug log keeps requests, answers and sizes, never data bytes.
func TestRedactDebug(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`rx 12: WRITE n5 {Fh 1 [0 +8) L 0 WRONLY} "TOKEN=s3"... 42b p123`, `rx 12: WRITE n5 {Fh 1 [0 +8) L 0 WRONLY} [42 bytes] p123`},
		{`rx 90: WRITE n19 {Fh 1 [0 +13) L 0 WRONLY,LARGEFILE}"TOKEN=s3"... 13b p1863`, `rx 90: WRITE n19 {Fh 1 [0 +13) L 0 WRONLY,LARGEFILE} [13 bytes] p1863`},
		{`rx 22: SETXATTR n2 {sz 5} "user.k" "value" 5b p1`, `rx 22: SETXATTR n2 {sz 5} "user.k" [5 bytes] p1`},
		{`rx 13: WRITE n5 {Fh 1 [0 +3) L 0 WRONLY} "a\"b" 3b p9`, `rx 13: WRITE n5 {Fh 1 [0 +3) L 0 WRONLY} [3 bytes] p9`},
		{`tx 12:     OK, {42}`, `tx 12:     OK, {42}`},
		{`tx 14:     OK, 42b data "TOKEN=s3"...`, `tx 14:     OK, 42b data`},
		{`tx 15:     OK, 5b data "hello"`, `tx 15:     OK, 5b data`},
		{`rx 16: LOOKUP n1 ["work"] 5b p1`, `rx 16: LOOKUP n1 ["work"] 5b p1`},
		{`rx 17: LOOKUP n1  "work"  p1863`, `rx 17: LOOKUP n1  "work"  p1863`},
	} {
		if got := string(redactDebug([]byte(tc.in))); got != tc.want {
			t.Errorf("redactDebug(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
	var buf bytes.Buffer
	debugLogger(&buf).Println(`rx 12: WRITE n5 {Fh 1} "s3cret!!"... 42b p123`)
	if strings.Contains(buf.String(), "s3cret") || !strings.Contains(buf.String(), "[42 bytes]") {
		t.Errorf("logged %q", buf.String())
	}
}
