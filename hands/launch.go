package hands

import (
	"context"

	"github.com/boxfs/boxfs/providers"
)

// AgentPath returns the box-side path of the static boxfs binary the
// agent channel runs, "" without the channel: a launch's supervisor can
// run from it.
func (h *Hands) AgentPath() string {
	if h.channel == nil {
		return ""
	}
	return h.channel.BinaryPath()
}

// Exec runs argv in the box as Run does, for a caller that speaks
// providers.ExecRequest (package launch): through the agent's command
// stream where the box has one, metered, under the liveness bound.
func (h *Hands) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	return h.Run(ctx, Command{Argv: req.Argv, Env: req.Env, Dir: req.Dir, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
}
