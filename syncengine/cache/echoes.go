package cache

import (
	"context"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// A watch's report of a path the host changed just before is held as the
// likely echo of that change (BoxChanged), and taken only once the host has
// left the path alone for mineWindow (DueEchoes). A box that changes a file
// right after the host wrote it (a formatter, a build, an agent's tool in
// the box) would then show its change that much later, and a burst of the
// host's own writes would have its directories listed again when the
// reports fall due. VerifyEchoes asks the box about the held reports
// instead, as many as fit in a time budget per call: a path the box shows
// as the host left it was the echo, and its report is dropped; any other
// was changed by the box, and is taken at once. A box that answers a stat
// without a round trip (a local box) has all of a burst's reports checked;
// over a slow link few are, and the rest wait for mineWindow, so a burst
// costs no round trip per file there.

const (
	// echoSettle is how long after the host's change its report is asked
	// about: the answer of the host's own operation is recorded by then.
	echoSettle = 20 * time.Millisecond
	// echoBudget is how long one VerifyEchoes may spend asking the box
	// (at least one stat is asked).
	echoBudget = 10 * time.Millisecond
	// echoBatchMax bounds the reports one VerifyEchoes takes to check.
	echoBatchMax = 4096
)

// EchoHeld is signalled when a report is held: a VerifyEchoes once it has
// settled (EchoWait) checks it.
func (c *Cache) EchoHeld() <-chan struct{} { return c.echoHeld }

// EchoWait is how long until a held report can be checked: echoSettle
// after the host's change it may echo, 0 when one can be now (or none is
// held).
func (c *Cache) EchoWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	wait := time.Duration(0)
	for rel := range c.echoes {
		d := echoSettle - now.Sub(c.mine[rel])
		if d <= 0 {
			return 0
		}
		if wait == 0 || d < wait {
			wait = d
		}
	}
	return wait
}

// VerifyEchoes asks the box about the held reports (see above) and returns
// the paths it made stale.
func (c *Cache) VerifyEchoes(ctx context.Context) []string {
	type check struct {
		rel   string
		at    time.Time // the host's change the report was held for
		a     attrEntry
		known bool
		fi    providers.FileInfo
		err   error
	}
	c.mu.Lock()
	if len(c.echoes) == 0 {
		c.mu.Unlock()
		return nil
	}
	// As many as the last call asked within its budget, twice that while
	// they all fit.
	batch := c.echoBatch
	if batch == 0 {
		batch = 64
	}
	now := c.now()
	var checks []check
	for rel := range c.echoes {
		if len(checks) == batch {
			break
		}
		at := c.mine[rel]
		if now.Sub(at) < echoSettle {
			continue
		}
		if f := c.file(rel); f != nil {
			if _, dirty := f.localAttr(); dirty {
				continue // the box has not got the host's bytes yet
			}
		}
		a, known := c.attrGet(rel)
		if !known {
			dir, name := split(rel)
			if d := c.dir(dir); d != nil {
				if fi, ok := d.entries[name]; ok {
					a, known = attrEntry{fi: fi}, true
				}
			}
		}
		checks = append(checks, check{rel: rel, at: at, a: a, known: known})
	}
	c.mu.Unlock()
	t := c.beginFetch()
	start := time.Now()
	asked := 0
	for asked < len(checks) && (asked == 0 || time.Since(start) < echoBudget) {
		checks[asked].fi, checks[asked].err = c.remote.Lstat(ctx, c.abs(checks[asked].rel))
		asked++
	}
	checks = checks[:asked]

	c.mu.Lock()
	defer c.mu.Unlock()
	// Nothing else happened while the checks ran: no fetch, report, walk
	// or change of the host's (each moves the generation), so their
	// answers are the newest the cache has.
	quiet := c.fm.tick == uint64(t)
	c.fm.end()
	switch {
	case time.Since(start) >= echoBudget:
		c.echoBatch = asked
	case asked == batch:
		c.echoBatch = min(2*batch, echoBatchMax)
	}
	var changed []string
	for _, ck := range checks {
		if !c.echoes[ck.rel] || !c.mine[ck.rel].Equal(ck.at) {
			continue // taken meanwhile, or the host changed it again
		}
		var same bool
		switch {
		case ck.err == nil && ck.fi.IsDir():
			// A directory's times and size change with its entries, each
			// of which is reported on its own; the host's copy of them is
			// its own estimate. Only its mode is its own.
			same = ck.known && !ck.a.neg && ck.a.fi.Mode == ck.fi.Mode
		case ck.err == nil:
			same = ck.known && !ck.a.neg && ck.a.fi.Mode.Type() == ck.fi.Mode.Type() && !differs(ck.a.fi, ck.fi)
		case providers.CodeOf(ck.err) == providers.NotFound:
			same = !ck.known || ck.a.neg
		default:
			continue // not known: the report waits for mineWindow
		}
		delete(c.echoes, ck.rel)
		if same {
			continue
		}
		now := c.now()
		c.boxChangedLocked(ck.rel, now)
		changed = append(changed, ck.rel)
		// The check's answer is the box's, as new as the change reported
		// (it was asked after the report came): kept, when nothing newer
		// came meanwhile (a box still changing the path, a refresh after a
		// command), so the host's next look at the path costs no round
		// trip. A directory's listing is asked again.
		switch {
		case !quiet:
		case ck.err == nil && !ck.fi.IsDir():
			_, ck.fi.Name = split(ck.rel)
			c.recordLocked(ck.rel, ck.fi, now)
		case ck.err != nil:
			c.setAttrLocked(ck.rel, attrEntry{at: now, neg: true})
		}
	}
	return changed
}
