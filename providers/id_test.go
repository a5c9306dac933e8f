package providers_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/boxfs/boxfs/providers"
)

func TestNewID(t *testing.T) {
	a, b := providers.NewID(8), providers.NewID(8)
	assert.Len(t, a, 16)
	assert.Regexp(t, `^[0-9a-f]{16}$`, a)
	assert.NotEqual(t, a, b, "two ids in a row")
	assert.Len(t, providers.NewID(12), 24)
}

func TestValidEnvName(t *testing.T) {
	for name, want := range map[string]bool{
		"PATH": true, "_x": true, "a1": true, "A_B_9": true,
		"": false, "1A": false, "A-B": false, "A=B": false, "A B": false, "é": false,
	} {
		assert.Equal(t, want, providers.ValidEnvName(name), "ValidEnvName(%q)", name)
	}
}
