package hands

import "context"

// SetAgentHook makes the background agent start of a Hands opened with o
// call f before it opens the channel: f may block the start, or fail it.
func SetAgentHook(o *Options, f func(context.Context) error) { o.agentHook = f }
