package hands

import (
	"context"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/providers"
)

// useAgent opens the agent channel and checks that it answers.
func (h *Hands) useAgent(ctx context.Context, opts Options) error {
	// A dynamic boxfs (built with cgo) runs only where the box's C library
	// does: asked before anything is uploaded.
	if err := agent.CheckLoader(ctx, h.box, opts.AgentBinary, opts.AgentAt, opts.OnExec); err != nil {
		h.agentOff = err.Error()
		return err
	}
	// The channel adds the box to its own log lines.
	ch := agent.NewChannel(h.box, agent.ChannelOptions{Binary: opts.AgentBinary, Liveness: h.liveness, Logger: opts.Logger, OnExec: opts.OnExec, Facts: &h.facts,
		InstalledAt: opts.AgentAt})
	if err := ch.Open(ctx); err != nil {
		ch.Close()
		return err
	}
	h.via = ViaAgent
	h.channel = ch
	h.closer = ch
	h.files = agentFiles{ch}
	h.walker = ch
	h.archiver = h.boxArchiver()
	return nil
}

// AgentStats reports the agent channel's counters (round trips, restarts,
// the last error), for facts.json; ok is false when hands does not use the
// agent.
func (h *Hands) AgentStats() (stats agent.Stats, ok bool) {
	if h.channel == nil {
		return agent.Stats{}, false
	}
	return h.channel.Stats(), true
}

// AgentOff says why the agent channel did not start in a box that would
// have been reached through it (for facts.json), "" when it did or was
// not tried.
func (h *Hands) AgentOff() string {
	return h.agentOff
}

// agentFiles is the channel, with Lstat completed: a symlink's Target is
// filled in with one more round trip when the agent's answer lacks it, as
// every other path fills it.
type agentFiles struct{ *agent.Channel }

// Lstat returns name's attributes, not following a final symlink, with a
// symlink's target.
func (a agentFiles) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	fi, err := a.Channel.Lstat(ctx, name)
	if err == nil && fi.IsSymlink() && fi.Target == "" {
		fi.Target, err = a.Channel.Readlink(ctx, name)
		if err != nil {
			return providers.FileInfo{}, err
		}
	}
	return fi, err
}
