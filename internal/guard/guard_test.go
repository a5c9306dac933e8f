package guard_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
)

func TestRun(t *testing.T) {
	assert.NoError(t, guard.Run(func() {}))
	err := guard.Run(func() { panic("boom") })
	assert.True(t, providers.IsCode(err, providers.Unknown))
	assert.Contains(t, err.Error(), "panic: boom")
	assert.Contains(t, err.Error(), "guard_test.go", "the stack says where")

	caught := make(chan error, 1)
	guard.Go(func() {
		var m map[string]int
		m["x"]++ // a nil map: a runtime panic
	}, func(err error) { caught <- err })
	assert.Contains(t, (<-caught).Error(), "nil map")
}
