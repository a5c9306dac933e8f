package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A name holding '=' or a Unicode format character is refused by new,
// attach and mkdir with EINVAL, and err says why.
func TestBoxNameKeysAndFormatCharactersRefused(t *testing.T) {
	mnt := mount(t)
	ctl := filepath.Join(mnt, "ctl")
	for _, tc := range []struct{ name, says string }{
		{"a=b", "'='"},
		{"evil\u202etxt", "U+202E"},
		{"zero\u200bwidth", "U+200B"},
	} {
		err := os.Mkdir(filepath.Join(mnt, tc.name), 0o755)
		assert.ErrorIs(t, err, syscall.EINVAL, "mkdir %q", tc.name)
		assert.Contains(t, readErr(mnt), tc.says, "mkdir %q", tc.name)
		if !strings.Contains(tc.name, "=") { // a ctl word with '=' is a key, not a name
			err = writeFile(t, ctl, "new "+tc.name+"\n")
			assert.ErrorIs(t, err, syscall.EINVAL, "new %q", tc.name)
			assert.Contains(t, readErr(mnt), tc.says, "new %q", tc.name)
			err = writeFile(t, ctl, "attach "+tc.name+" provider=local id=x\n")
			assert.ErrorIs(t, err, syscall.EINVAL, "attach %q", tc.name)
			assert.Contains(t, readErr(mnt), tc.says, "attach %q", tc.name)
		}
	}
	assert.Equal(t, "", readFile(t, ctl), "no box was made")
}
