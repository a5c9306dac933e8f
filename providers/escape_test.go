package providers

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOctalEscape(t *testing.T) {
	in := "plain \\ back\nnew \x00\x01\xff ünï"
	got := OctalEscape(in)
	for i := 0; i < len(got); i++ {
		assert.True(t, got[i] >= 0x20 && got[i] < 0x7f, "byte %q of %q is not printable ASCII", got[i], got)
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to decode with printf")
	}
	// What a box-side script does with it: printf %b, a trailing x kept
	// so command substitution cannot eat newlines (NUL is shell-unsafe,
	// so it is left out here).
	in = "plain \\ back\nnew \x01\xff ünï\n"
	out, err := exec.Command("sh", "-c", `printf '%b' "$1"`, "sh", OctalEscape(in)).Output()
	require.NoError(t, err)
	assert.Equal(t, in, string(out))
}
