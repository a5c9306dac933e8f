package hands

import (
	"context"

	"github.com/boxfs/boxfs/providers"
)

// useAgent opens the agent channel and checks that it answers.
func (h *Hands) useAgent(ctx context.Context, opts Options) error {
	return providers.Errorf(providers.Unsupported, "hands.New", "the agent channel is not built yet")
}
