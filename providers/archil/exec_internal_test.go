package archil

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQuote checks that every byte but NUL passes through quote exactly,
// as bash reads the word back.
func TestQuote(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	var all []byte
	for c := 1; c < 256; c++ {
		all = append(all, byte(c))
	}
	for _, s := range []string{"", "plain_word-1.2", "two words", "it's \"q\"", "$HOME `x` \\", "new\nline", string(all)} {
		out, err := exec.Command(bash, "-c", "printf %s "+quote(s)).Output()
		require.NoError(t, err, "bash on %q", quote(s))
		assert.Equal(t, s, string(out), "through quote(%q)", s)
	}
}

func TestParseAnswer(t *testing.T) {
	for _, tt := range []struct {
		name, stdout string
		want         answer
		ok           bool
	}{
		{"rc", "boxfs:rc 3 \n", answer{state: "rc", rc: 3}, true},
		{"rc why", "noise\nboxfs:rc 137 killed\n", answer{state: "rc", rc: 137, why: "killed"}, true},
		{"inline", "boxfs:rc 0 \nboxfs:out aGk=\nboxfs:err \n", answer{state: "rc", out: []byte("hi"), err: []byte{}, inline: true}, true},
		{"busy", "boxfs:busy\n", answer{state: "busy"}, true},
		{"gone", "boxfs:gone\n", answer{state: "gone"}, true},
		{"none", "hello\n", answer{}, false},
		{"rc out of range", "boxfs:rc 256 \n", answer{}, false},
		{"rc not a number", "boxfs:rc x \n", answer{}, false},
		{"bad base64", "boxfs:rc 0 \nboxfs:out !!\n", answer{state: "rc"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseAnswer(tt.stdout)
			assert.Equal(t, tt.ok, ok)
			if ok {
				assert.Equal(t, tt.want, got)
			}
		})
	}
}
