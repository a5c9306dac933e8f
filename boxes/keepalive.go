package boxes

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
)

// keepAliveEvery is how often, at most, a box in use through the mount
// tells a provider that ends boxes it finds idle (providers.KeepAliver)
// that it is in use: well inside Daytona's 15 idle minutes. Reads served
// from the host's cache and a shell waiting at its prompt make no call to
// the box, and the provider would count them idle.
const keepAliveEvery = 5 * time.Minute

// inUse notes that the box is used, and tells the provider so when it is
// due, in the background: an operation never waits for it.
func (b *Box) inUse() {
	now := b.m.opts.Now()
	b.mu.Lock()
	ka, ok := b.box.(providers.KeepAliver)
	due := ok && now.Sub(b.keptAlive) >= keepAliveEvery
	if due {
		b.keptAlive = now
	}
	b.mu.Unlock()
	if !due {
		return
	}
	guard.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.m.opts.OpTimeout)
		defer cancel()
		if err := ka.KeepAlive(ctx); err != nil {
			b.m.log.Warn("telling the provider the box is in use failed", "box", b.name, "err", err)
		}
	}, b.panicked)
}
