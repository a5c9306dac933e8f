package hands

import (
	"context"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/providers"
)

// useAgent opens the agent channel, checks that it answers and takes it.
func (h *Hands) useAgent(ctx context.Context, opts Options) error {
	ch := h.newChannel(opts)
	if err := ch.Open(ctx); err != nil {
		ch.Close()
		return err
	}
	h.agentCh = ch
	h.cur.Store(h.agentRoute(ch))
	return nil
}

// newChannel returns the agent channel to the box, not opened.
func (h *Hands) newChannel(opts Options) *agent.Channel {
	// The channel adds the box to its own log lines.
	return agent.NewChannel(h.box, agent.ChannelOptions{Binary: opts.AgentBinary, Liveness: h.liveness, Logger: opts.Logger, OnExec: opts.OnExec, Facts: &h.facts,
		InstalledAt: opts.AgentAt})
}

// agentRoute is the agent path over ch.
func (h *Hands) agentRoute(ch *agent.Channel) *route {
	return &route{via: ViaAgent, files: agentFiles{ch}, walker: ch, archiver: h.boxArchiver(), channel: ch}
}

// AgentStats reports the agent channel's counters (round trips, restarts,
// the last error), for facts.json; ok is false when hands does not use the
// agent (nor is starting it: Up then says whether it is up yet).
func (h *Hands) AgentStats() (stats agent.Stats, ok bool) {
	if ch := h.path().channel; ch != nil {
		return ch.Stats(), true
	}
	if h.AgentStarting() {
		return h.agentCh.Stats(), true
	}
	return agent.Stats{}, false
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
