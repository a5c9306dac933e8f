package boxes

import (
	"context"
	"fmt"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/treewatch"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// Freshness modes, as facts.json says them.
const (
	// FreshWatch: a watch reports the box's changes as they happen.
	FreshWatch = "watch"
	// FreshTimeout: what the host has seen is asked of the box again once
	// older than the attribute timeout (and after each command run through
	// boxfs).
	FreshTimeout = "timeout"
)

// freshness is how the box's own changes reach the host now (b.mu).
type freshness struct {
	watching bool   // a healthy watch runs
	note     string // why not, when not
}

// Freshness says how a change made in the box behind boxfs's back reaches
// the host: FreshWatch or FreshTimeout, the longest it may take (not
// counting the trip from the box), and, with FreshTimeout, why the watch
// does not serve.
func (b *Box) Freshness() (mode string, bound time.Duration, note string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fresh.watching {
		return FreshWatch, treewatch.Latency, ""
	}
	note = b.fresh.note
	if note == "" {
		note = "the box is not connected yet"
	}
	return FreshTimeout, b.m.opts.AttrTimeout, note
}

func (b *Box) setFresh(f freshness) {
	b.mu.Lock()
	b.fresh = f
	b.mu.Unlock()
}

// Pauses before a watch that ended or lost changes is started again:
// watchPause, growing to watchMaxPause while it keeps ending; after the
// tree outgrew the watch as it was set up, watchFullPause (a new try
// walks the whole tree in the box again).
const (
	watchPause     = time.Second
	watchMaxPause  = time.Minute
	watchFullPause = 10 * time.Minute
)

// watch has the box report what changes in its workspace, and tells the
// view of each changed path at once (and the cache), so a change not made
// through exec (a background job, a docker exec, another mount) shows at
// the next look instead of after the attribute timeout. While the watch is
// healthy the cache trusts what it fetches until a report says otherwise
// (cache.Trust): no round trip revalidates a listing. A watch that
// stops or loses changes is started again; meanwhile the attribute timeout
// keeps the host's view as fresh as without a watch, and facts.json says
// so.
func (b *Box) watch(ctx context.Context, h *hands.Hands, c *cache.Cache, root string) {
	pause := watchPause
	for ctx.Err() == nil {
		started := time.Now()
		run := b.watchOnce(ctx, h, c, root)
		if ctx.Err() != nil {
			return
		}
		switch {
		case providers.IsCode(run.err, providers.Unsupported):
			b.setFresh(freshness{note: "the box cannot be watched: " + run.err.Error()})
			b.m.log.Info("workspace watch unsupported; attribute timeouts keep the view fresh", "box", b.name, "err", run.err)
			return
		case run.early:
			b.setFresh(freshness{note: fmt.Sprintf("the workspace has more directories than the watch can cover; it is tried again every %v", watchFullPause)})
			b.m.log.Warn("workspace too large to watch; attribute timeouts keep the view fresh", "box", b.name, "retry", watchFullPause)
			pause = watchFullPause
		case run.lost:
			b.setFresh(freshness{note: "the watch lost changes (too many at once, or the tree outgrew it); it is set again"})
			b.m.log.Info("workspace watch lost changes; setting it again", "box", b.name, "after", pause)
		default:
			msg := "the watch ended"
			if run.err != nil {
				msg += ": " + run.err.Error()
			}
			b.setFresh(freshness{note: msg + "; it is started again"})
			b.m.log.Debug("workspace watch ended; starting it again", "box", b.name, "err", run.err, "after", pause)
		}
		if run.ready && time.Since(started) > watchMaxPause {
			pause = watchPause // it served a while: not a failure that repeats
		}
		if run.ready && !run.lost {
			// What changes while no watch runs is not reported.
			c.BoxChanged(nil, true)
			b.allChanged()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		if pause < watchFullPause {
			pause = min(2*pause, watchMaxPause)
		} else {
			pause = watchPause
		}
	}
}

// watchRun is how one watch ended.
type watchRun struct {
	ready bool  // the tree was watched
	lost  bool  // changes were lost (everything was made stale)
	early bool  // lost before the tree was watched: it is too large
	err   error // why it ended
}

// watchOnce runs one watch until ctx ends, it fails, or it loses changes.
func (b *Box) watchOnce(ctx context.Context, h *hands.Hands, c *cache.Cache, root string) watchRun {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var run watchRun
	run.err = h.Watch(ctx, root, func() {
		if run.lost {
			return
		}
		run.ready = true
		c.Trust(true)
		b.setFresh(freshness{watching: true})
	}, func(changes []providers.Change, all bool) {
		if run.lost {
			return
		}
		if all {
			// Anything may have changed, and the watch may no longer
			// cover the tree: everything is asked again, and a new watch
			// is set.
			run.lost, run.early = true, !run.ready
			c.Trust(false)
			b.setFresh(freshness{note: "the watch lost changes; it is set again"})
			c.BoxChanged(nil, true)
			b.allChanged()
			cancel()
			return
		}
		b.pathsChanged(c.Reported(changes, false))
	})
	c.Trust(false)
	return run
}

func (b *Box) pathsChanged(rels []string) {
	if v := b.m.viewer(); v != nil && len(rels) > 0 {
		v.PathsChanged(b, rels)
	}
}

func (b *Box) allChanged() {
	if v := b.m.viewer(); v != nil {
		v.AllChanged(b)
	}
}
