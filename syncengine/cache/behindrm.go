package cache

import (
	"context"
	"sort"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The host's removes in write-behind. An unlink of a box file, or an rmdir
// of a box directory the host knows to be empty, is done on the host at
// once (the name is gone from what the host shows) and queued for the box:
// the next batch sends the queued removes first, in the order they were
// made (a directory's children before it), then the directories and files
// made here. A name the host removed and the box still has is hidden from
// every listing and stat of the box until the remove lands; a name made
// again here meanwhile (a file, a directory) is the host's and goes after
// the remove in the same batch. Each queued remove is a journal line, so a
// crash before it lands leaves it queued for the next mount.
//
// In write-through, with Options.PipelineRemoves, the same queue pipelines
// removes where the box is remote and answers batches of them (an agent):
// a sender sends what is queued at once, one batch at a time, so rm -rf of
// a tree costs a round trip per batch of the names removed while the last
// batch was out, not one per name (rmSender). Only one batch of removes is out at a time, in
// either mode: a remove sent twice must not land after what the host made
// under its name since.
//
// A remove the box refuses (a directory it filled meanwhile, a permission)
// is dropped from the queue: the name is asked of the box again (so it
// comes back as the box has it), PushFailed is told, and the next barrier
// fails with that error. A batch that fails as a whole (the box did not
// answer) keeps every remove queued, to be sent again.

// pendingRm is one remove queued for the box.
type pendingRm struct {
	dir bool   // rmdir; else unlink
	seq uint64 // its place in the queue (c.pseq)
	id  uint64 // its journal line
}

// RemoveError is a queued remove that failed: refused by the box (dropped
// from the queue; the name shows again as the box has it), or, Queued, a
// batch of removes the box did not answer (kept, sent again).
type RemoveError struct {
	Err    error
	Queued bool
}

func (e *RemoveError) Error() string { return e.Err.Error() }
func (e *RemoveError) Unwrap() error { return e.Err }

// rmOp is one queued remove's part of a batch.
type rmOp struct {
	rel string
	pr  *pendingRm
}

// goneLocked reports whether rel is a name the host removed and the box
// may still have: rel or a directory above it is queued for removal, and
// neither rel nor a directory between was made again here since. c.mu
// held.
func (c *Cache) goneLocked(rel string) bool {
	if c.prms.Len() == 0 {
		return false
	}
	for p := rel; ; p, _ = split(p) {
		if c.news.Has(p) {
			return false
		}
		if pd, ok := c.pdirs.Get(p); ok && pd.mkdir {
			return false
		}
		if c.prms.Has(p) {
			return true
		}
		if p == "" {
			return false
		}
	}
}

// goneUnderLocked returns the names the host removed and the box may
// still have under dir: its direct children when children, else all
// below it. c.mu held.
func (c *Cache) goneUnderLocked(dir string, children bool) []string {
	if c.prms.Len() == 0 {
		return nil
	}
	var out []string
	for _, p := range kept(c.prms, dir, children) {
		if c.goneLocked(p) {
			out = append(out, p)
		}
	}
	return out
}

// removeBehind unlinks rel, a file of the box with one name, on the host
// only and queues the unlink for the box. false: the box is asked now
// (write-through, a name of a hard link, a file the host does not know).
func (c *Cache) removeBehind(rel string) bool {
	if !c.queuesRemoves() || rel == "" {
		return false
	}
	c.mu.Lock()
	fi, ok := c.knownAttrLocked(rel)
	if !ok || fi.IsDir() || fi.Nlink > 1 || c.news.Has(rel) || c.pdirs.Has(rel) || c.goneLocked(rel) {
		c.mu.Unlock()
		return false
	}
	f := c.file(rel)
	if f != nil && f.hasAlias() {
		c.mu.Unlock()
		return false
	}
	c.files.Delete(rel)
	c.forgetLocked(rel)
	c.setAttrLocked(rel, attrEntry{at: c.now(), neg: true})
	c.dirTouchedLocked(rel)
	pr := c.queueRmLocked(rel, false)
	c.mu.Unlock()
	c.shownd.drop(rel)
	if f != nil {
		// Its queued writes go with it; an open handle keeps reading the
		// copy until it is released.
		f.unlinked(c)
	}
	c.journalRm(rel, pr)
	c.rmQueued()
	return true
}

// rmdirBehind removes rel, a directory of the box the host knows to be
// empty, on the host only and queues the rmdir for the box (after the
// removes of its children queued before it). false: the box is asked now.
func (c *Cache) rmdirBehind(rel string) bool {
	if !c.queuesRemoves() || rel == "" {
		return false
	}
	c.mu.Lock()
	fi, ok := c.knownAttrLocked(rel)
	pd, pending := c.pdirs.Get(rel)
	d := c.dir(rel)
	if !ok || !fi.IsDir() || (pending && pd.mkdir) || c.goneLocked(rel) ||
		!c.usable(d) || len(d.entries) > 0 || c.news.HasUnder(rel) || c.pdirs.HasUnder(rel) && !pending {
		c.mu.Unlock()
		return false
	}
	for _, p := range c.pdirs.Under(rel) {
		if p != rel {
			c.mu.Unlock()
			return false
		}
	}
	c.pdirs.Delete(rel) // its attributes, set here, go with it
	c.forgetLocked(rel)
	c.setAttrLocked(rel, attrEntry{at: c.now(), neg: true})
	c.dirTouchedLocked(rel)
	if dir, _ := split(rel); true {
		// One link fewer on the parent, as the box's rmdir will leave it.
		if a, ok := c.attrGet(dir); ok && !a.neg && a.fi.Nlink > 2 {
			a.fi.Nlink--
			c.setAttrLocked(dir, a)
		}
	}
	pr := c.queueRmLocked(rel, true)
	c.mu.Unlock()
	c.journalRm(rel, pr)
	c.rmQueued()
	return true
}

// queueRmLocked queues a remove of rel. c.mu held.
func (c *Cache) queueRmLocked(rel string, dir bool) *pendingRm {
	c.touchLocked(rel)
	c.pseq++
	c.nextID++
	pr := &pendingRm{dir: dir, seq: c.pseq, id: c.nextID}
	if old, ok := c.prms.Get(rel); ok {
		// The box's name was removed here, made again and removed again:
		// the first remove stands for both.
		pr.seq, pr.id = old.seq, old.id
	}
	c.prms.Set(rel, pr)
	return pr
}

// journalRm records the queued remove pr of rel.
func (c *Cache) journalRm(rel string, pr *pendingRm) {
	e := journalEntry{ID: pr.id, Path: rel, Remove: true, Dir: pr.dir}
	if err := c.jnl.put(e); err != nil {
		c.log.Error("journal write failed; a crash now would leave this name in the box", "path", rel, "err", err)
	}
}

// pendingRmOps returns the queued removes, in the order they were made.
func (c *Cache) pendingRmOps() []rmOp {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prms.Len() == 0 {
		return nil
	}
	ops := make([]rmOp, 0, c.prms.Len())
	c.prms.Range(func(rel string, pr *pendingRm) bool {
		ops = append(ops, rmOp{rel: rel, pr: pr})
		return true
	})
	sort.Slice(ops, func(i, j int) bool { return ops[i].pr.seq < ops[j].pr.seq })
	return ops
}

// queuesRemoves reports whether removes are queued, not sent at once.
func (c *Cache) queuesRemoves() bool { return c.behind != nil || c.rmsend != nil }

// rmQueued has a queued remove sent: with the next batch, or at once.
func (c *Cache) rmQueued() {
	if c.behind != nil {
		c.behind.changed()
	} else {
		c.rmsend.kick()
	}
}

// settleRms sends the queued removes when one is of rel or a directory
// above it: a name made in the box at once goes after them. Only the
// removes go: no content lock is taken, so an open's create never waits
// for another file's push.
func (c *Cache) settleRms(ctx context.Context, rel string) error {
	c.mu.Lock()
	touched := false
	if c.prms.Len() > 0 {
		for p := rel; ; p, _ = split(p) {
			if c.prms.Has(p) {
				touched = true
				break
			}
			if p == "" {
				break
			}
		}
	}
	c.mu.Unlock()
	if !touched {
		return nil
	}
	return c.sendRms(ctx)
}

// sendRms sends the queued removes now, and returns the first error.
func (c *Cache) sendRms(ctx context.Context) error {
	var first error
	c.pushRms(ctx, func(rel string, err error) {
		if first == nil {
			first = err
		}
	})
	return first
}

// pushRms sends the queued removes, through the remote's BatchRemover in
// one round trip where it has one, and records each answer; fail is told
// of each error. It reports false when the batch failed as a whole: the
// rest of the batch must wait, as it may need the removes done (a
// directory made again where one was removed).
func (c *Cache) pushRms(ctx context.Context, fail func(rel string, err error)) bool {
	c.rmMu.Lock()
	defer c.rmMu.Unlock()
	ops := c.pendingRmOps()
	if len(ops) == 0 {
		return true
	}
	rms := make([]providers.FileRemove, len(ops))
	rels := make([]string, len(ops))
	for i, op := range ops {
		rms[i] = providers.FileRemove{Name: c.abs(op.rel), Dir: op.pr.dir}
		rels[i] = op.rel
	}
	defer c.intend(rels...)()
	var errs []error
	var err error
	if br, ok := c.remote.(providers.BatchRemover); ok {
		errs, err = br.RemoveFiles(ctx, rms)
		if err == nil && len(errs) != len(rms) {
			err = providers.Errorf(providers.Unknown, "cache.push", "a batch of %d removes answered %d results", len(rms), len(errs))
		}
	} else {
		errs = make([]error, len(rms))
		for i, rm := range rms {
			if rm.Dir {
				errs[i] = c.remote.Rmdir(ctx, rm.Name)
			} else {
				errs[i] = c.remote.Remove(ctx, rm.Name)
			}
		}
	}
	if err != nil {
		// Which were done is not known: all stay queued (a remove done
		// twice answers NotFound, which is done).
		fail(ops[0].rel, &RemoveError{Err: err, Queued: true})
		return false
	}
	for i, op := range ops {
		e := errs[i]
		if providers.IsCode(e, providers.NotFound) {
			e = nil
		}
		if providers.IsCode(e, providers.Unavailable) {
			// Not the box's answer (a request of the batch lost): sent
			// again with the next.
			fail(op.rel, &RemoveError{Err: e, Queued: true})
			continue
		}
		c.rmPushed(op, e)
		if e != nil {
			fail(op.rel, &RemoveError{Err: e})
		}
	}
	return true
}

// rmPushed records the box's answer to op: done (err nil), or refused,
// which drops it from the queue and has the name asked of the box again.
func (c *Cache) rmPushed(op rmOp, err error) {
	c.mu.Lock()
	pr, ok := c.prms.Get(op.rel)
	if !ok || pr != op.pr {
		c.mu.Unlock()
		return
	}
	c.prms.Delete(op.rel)
	if err == nil && !c.goneLocked(op.rel) && !c.news.Has(op.rel) && !c.pdirs.Has(op.rel) {
		// As a push's answer: what a fetch begun before the remove
		// brought of the name does not bring it back (judgeMark).
		c.touchLocked(op.rel)
		c.fm.pushEnded(op.rel)
		// Whatever a report said of the name while the remove was
		// queued, the remove came after it.
		c.setAttrLocked(op.rel, attrEntry{at: c.now(), neg: true})
		if d := c.dir(pathDir(op.rel)); d != nil {
			_, name := split(op.rel)
			delete(d.entries, name)
		}
	}
	if err != nil {
		if c.rmErr == nil {
			c.rmErr = err
		}
		now := c.now()
		if !c.goneLocked(op.rel) && !c.news.Has(op.rel) && !c.pdirs.Has(op.rel) {
			c.attrs.Delete(op.rel)
			c.attrs.DeleteUnder(op.rel)
			if d := c.dir(pathDir(op.rel)); d != nil {
				d.fetched = time.Time{} // listed again
			}
			c.staleLocked(pathDir(op.rel), now)
		}
	}
	c.mu.Unlock()
	if err := c.jnl.drop(pr.id); err != nil {
		c.log.Error("journal write failed; a crash now would remove this name again", "path", op.rel, "err", err)
	}
}

// rmSender sends the removes queued in write-through as they come: a
// batch of what queued while the last one was out.
type rmSender struct {
	c    *Cache
	k    chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newRmSender(c *Cache) *rmSender {
	s := &rmSender{c: c, k: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *rmSender) kick() {
	select {
	case s.k <- struct{}{}:
	default:
	}
}

func (s *rmSender) run() {
	defer close(s.done)
	var retry time.Duration
	for {
		var wait <-chan time.Time
		if retry > 0 {
			wait = time.After(retry)
		}
		select {
		case <-s.stop:
			return
		case <-s.k:
		case <-wait:
		}
		c := s.c
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.BehindTimeout)
		ok := c.pushRms(ctx, func(rel string, err error) {
			if c.opts.PushFailed != nil {
				c.opts.PushFailed(rel, err)
			}
		})
		cancel()
		switch {
		case !ok:
			// The box did not answer: tried again after a pause that
			// grows while it keeps failing.
			retry = min(max(2*retry, time.Second), behindRetryMax)
			c.log.Warn("removes not sent; trying again", "after", retry)
		default:
			retry = 0
			c.mu.Lock()
			more := c.prms.Len() > 0
			c.mu.Unlock()
			if more {
				s.kick() // queued while this batch was out
			}
		}
	}
}

func (s *rmSender) close() {
	close(s.stop)
	<-s.done
}
