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
// the box) would then show its change that much later. VerifyEchoes asks
// the box about the held reports instead, when there are few of them: a
// path the box shows as the host left it was the echo, and its report is
// dropped; any other was changed by the box, and is taken at once.

const (
	// echoVerifyMax is how many held reports VerifyEchoes asks the box
	// about; with more held (a burst of the host's own writes) they wait
	// for mineWindow, so the burst costs no round trip per file.
	echoVerifyMax = 64
	// echoSettle is how long after the host's change its report is asked
	// about: the answer of the host's own operation is recorded by then.
	echoSettle = 20 * time.Millisecond
)

// VerifyEchoes asks the box about the held reports (see above), when at
// most echoVerifyMax are held, and returns the paths it made stale.
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
	if len(c.echoes) == 0 || len(c.echoes) > echoVerifyMax {
		c.mu.Unlock()
		return nil
	}
	now := c.now()
	var checks []check
	for rel := range c.echoes {
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
	for i := range checks {
		checks[i].fi, checks[i].err = c.remote.Lstat(ctx, c.abs(checks[i].rel))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var changed []string
	for _, ck := range checks {
		if !c.echoes[ck.rel] || !c.mine[ck.rel].Equal(ck.at) {
			continue // taken meanwhile, or the host changed it again
		}
		var same bool
		switch {
		case ck.err == nil:
			same = ck.known && !ck.a.neg && ck.a.fi.Mode.Type() == ck.fi.Mode.Type() && !differs(ck.a.fi, ck.fi)
		case providers.CodeOf(ck.err) == providers.NotFound:
			same = !ck.known || ck.a.neg
		default:
			continue // not known: the report waits for mineWindow
		}
		delete(c.echoes, ck.rel)
		if !same {
			c.boxChangedLocked(ck.rel, c.now())
			changed = append(changed, ck.rel)
		}
	}
	return changed
}
