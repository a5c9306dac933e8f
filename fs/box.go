package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// Box states as the namespace shows them.
const (
	stateDeclared = "declared" // named by the config, made at first use
	stateCreating = "creating"
	stateReady    = "ready"
	stateGone     = "gone" // destroyed, or found ended
)

// boxState is one named box: its provider's Box, the hands that reach into
// it, the cache of its workspace, its commands, its health.
type boxState struct {
	fs   *FS
	name string

	connectMu sync.Mutex // one connect at a time
	dirMu     sync.Mutex // guards dir: its node is made once

	mu      sync.Mutex
	rec     record
	state   string
	box     providers.Box
	hands   *hands.Hands
	cache   *cache.Cache
	facts   providers.Facts
	errText string
	health  health
	inos    *inoTable
	cmds    *cmdTable

	dir      *boxDir   // its node, once the kernel looked it up
	workRoot *workNode // its work/ node

	stopWatch context.CancelFunc // ends the watch of the workspace; nil without one
}

// health is whether the box answers. After a failure that says the box (not
// the request) is in trouble, calls fail fast until a probe succeeds.
type health struct {
	bad     bool
	since   time.Time
	lastErr error
	probing bool
	fails   int
}

func (f *FS) newBoxState(r record) *boxState {
	b := &boxState{fs: f, name: r.Name, rec: r, state: stateReady}
	if r.Spec != nil && r.ID == "" {
		b.state = stateDeclared
	}
	b.inos = newInoTable(r.Provider + "/" + r.ID)
	b.cmds = newCmdTable(b, filepath.Join(f.opts.StateDir, "cmds", safeKey(r.Name)))
	return b
}

func safeKey(s string) string {
	return strings.NewReplacer("/", "_", "\x00", "_").Replace(s)
}

func (b *boxState) setBox(box providers.Box) {
	b.mu.Lock()
	b.box = box
	b.state = stateReady
	b.rec.ID = box.ID()
	if seed := b.rec.Provider + "/" + box.ID(); b.inos.seed != seed {
		b.inos = newInoTable(seed)
	}
	b.mu.Unlock()
}

func (b *boxState) setErr(err error) {
	if err == nil {
		return
	}
	b.mu.Lock()
	b.errText = err.Error()
	b.mu.Unlock()
	var e *providers.Error
	attrs := []any{"box", b.name, "code", providers.CodeOf(err).String(), "err", err}
	if errors.As(err, &e) {
		attrs = append(attrs, "op", e.Op, "path", e.Path)
	}
	b.fs.log.Warn("box operation failed", attrs...)
}

// connect makes sure the box exists and its hands and cache are open: a
// declared box is made, a recorded one attached, the journal pushed.
func (b *boxState) connect(ctx context.Context) error {
	b.mu.Lock()
	if b.cache != nil {
		b.mu.Unlock()
		return nil
	}
	if b.state == stateGone {
		b.mu.Unlock()
		return providers.Errorf(providers.Gone, "fs.connect", "box %q is gone", b.name)
	}
	b.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*b.fs.opts.OpTimeout)
	defer cancel()
	h, err := b.handsOnly(ctx)
	if err != nil {
		return err
	}
	b.connectMu.Lock()
	defer b.connectMu.Unlock()
	b.mu.Lock()
	if b.cache != nil {
		b.mu.Unlock()
		return nil
	}
	rec := b.rec
	b.mu.Unlock()
	root := h.Facts().Workspace
	if root == "" {
		return providers.Errorf(providers.Unsupported, "fs.connect", "box %q reports no workspace", b.name)
	}
	c, err := cache.Open(h, cache.Options{
		Dir:         filepath.Join(b.fs.opts.StateDir, "cache", safeKey(rec.Provider+"-"+rec.ID)),
		Root:        root,
		Box:         b.name,
		AttrTimeout: b.fs.opts.AttrTimeout,
		Logger:      b.fs.log,
		Overwrote: func(rel string) {
			// Logged by the cache; err tells a reader of the box.
			b.mu.Lock()
			b.errText = fmt.Sprintf("work/%s: the push at close replaced a change the box made to the file after this host read it (the later close wins)", rel)
			b.mu.Unlock()
		},
	})
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.cache = c
	if b.fs.opts.Watch && h.Via() == hands.ViaAgent {
		c.Watched()
		wctx, stop := context.WithCancel(context.Background())
		b.stopWatch = stop
		go b.watch(wctx, h, c, root)
	}
	b.mu.Unlock()
	if len(c.Dirty()) > 0 {
		if err := c.Recover(ctx); err != nil {
			b.setErr(fmt.Errorf("journaled writes from an earlier run not pushed yet: %w", err))
		}
	}
	return nil
}

// attachOrCreate finds the box again by its recorded id, or makes a
// declared one and records its id before anything runs in it.
func (b *boxState) attachOrCreate(ctx context.Context) (providers.Box, error) {
	b.mu.Lock()
	rec := b.rec
	b.mu.Unlock()
	p, err := b.fs.provider(rec.Provider)
	if err != nil {
		return nil, err
	}
	var box providers.Box
	if rec.ID == "" && rec.Spec != nil {
		box, err = p.Create(ctx, *rec.Spec)
		if err != nil {
			return nil, err
		}
		rec.ID, rec.Created, rec.Spec = box.ID(), time.Now().UTC(), nil
		if err := b.fs.saveRecord(rec); err != nil {
			b.fs.log.Error("box record not saved", "box", b.name, "err", err)
		}
		b.mu.Lock()
		b.rec = rec
		b.mu.Unlock()
	} else {
		box, err = p.Attach(ctx, rec.ID)
		if err != nil {
			if providers.CodeOf(err) == providers.NotFound {
				b.markGone(providers.E(providers.Gone, "fs.attach", err))
			}
			return nil, err
		}
	}
	b.setBox(box)
	return box, nil
}

// parts returns the open hands and cache, connecting first.
func (b *boxState) parts(ctx context.Context) (*hands.Hands, *cache.Cache, error) {
	if err := b.connect(ctx); err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == stateGone {
		return nil, nil, providers.Errorf(providers.Gone, "fs", "box %q is gone", b.name)
	}
	return b.hands, b.cache, nil
}

func (b *boxState) markGone(err error) {
	b.mu.Lock()
	b.state = stateGone
	b.health.lastErr = err
	b.mu.Unlock()
}

// do runs one operation on the box within the operation bound. A mutation
// is not abandoned when the caller is interrupted (it finishes, and its true
// result is answered); anything else is. Failures that mean the box, not the
// request, is in trouble mark it unhealthy: later calls fail fast until a
// background probe gets an answer.
func (b *boxState) do(ctx context.Context, mutation bool, extra time.Duration, fn func(ctx context.Context) error) error {
	b.mu.Lock()
	if b.state == stateGone {
		err := b.health.lastErr
		b.mu.Unlock()
		if err == nil || providers.CodeOf(err) != providers.Gone {
			err = providers.Errorf(providers.Gone, "fs", "box %q is gone", b.name)
		}
		return err
	}
	if b.health.bad {
		err := b.health.lastErr
		b.mu.Unlock()
		return providers.E(0, "fs", err).WithBox(b.name)
	}
	b.mu.Unlock()
	if mutation {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, b.fs.opts.OpTimeout+extra)
	defer cancel()
	err := fn(ctx)
	if err != nil {
		switch providers.CodeOf(err) {
		case providers.Timeout, providers.Liveness, providers.TransportLost, providers.Unavailable:
			if ctx.Err() == context.Canceled {
				break // the caller gave up; says nothing of the box
			}
			if gone := b.checkGone(); gone != nil {
				return gone
			}
			b.unhealthy(err)
		case providers.Gone:
			b.markGone(err)
		}
	}
	return err
}

// checkGone asks the provider whether a box that stopped answering still
// exists; a box found ended or removed is marked gone (ENODEV from then on)
// and its error returned.
func (b *boxState) checkGone() error {
	b.mu.Lock()
	box := b.box
	b.mu.Unlock()
	if box == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := box.Status(ctx)
	var gone error
	switch {
	case err != nil && (providers.CodeOf(err) == providers.Gone || providers.CodeOf(err) == providers.NotFound):
		gone = providers.E(providers.Gone, "fs", err).WithBox(b.name)
	case err == nil && st.State == providers.StateEnded:
		gone = providers.Errorf(providers.Gone, "fs", "box %q ended: %s", b.name, st.Reason)
	}
	if gone != nil {
		b.markGone(gone)
		b.setErr(gone)
	}
	return gone
}

func (b *boxState) unhealthy(err error) {
	b.mu.Lock()
	if b.health.bad {
		b.mu.Unlock()
		return
	}
	b.health = health{bad: true, since: time.Now(), lastErr: err, probing: true}
	b.mu.Unlock()
	b.setErr(fmt.Errorf("box not answering, failing fast until it does: %w", err))
	go b.probe()
}

// probe asks the box for its workspace's attributes every few seconds until
// it answers (healthy again) or is found gone.
func (b *boxState) probe() {
	delay := time.Second
	for {
		time.Sleep(delay)
		if delay < 10*time.Second {
			delay *= 2
		}
		b.mu.Lock()
		h, c := b.hands, b.cache
		gone := b.state == stateGone
		b.mu.Unlock()
		if gone || h == nil || c == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.fs.opts.OpTimeout)
		_, err := h.Lstat(ctx, c.Root())
		cancel()
		if err == nil {
			b.mu.Lock()
			b.health = health{}
			b.mu.Unlock()
			c.Invalidate()
			b.fs.log.Info("box answers again", "box", b.name)
			return
		}
		if providers.CodeOf(err) == providers.Gone || b.checkGone() != nil {
			b.markGone(err)
			return
		}
		b.mu.Lock()
		b.health.lastErr = err
		b.health.fails++
		b.mu.Unlock()
	}
}

// flush pushes the box's dirty files.
func (b *boxState) flush(ctx context.Context) error {
	b.mu.Lock()
	c := b.cache
	b.mu.Unlock()
	if c == nil {
		return nil
	}
	return b.do(ctx, true, time.Minute, c.FlushAll)
}

// close ends the channel to the box; the box keeps running.
func (b *boxState) close() {
	b.cmds.detach()
	b.mu.Lock()
	h, c := b.hands, b.cache
	b.hands, b.cache = nil, nil
	if b.stopWatch != nil {
		b.stopWatch()
		b.stopWatch = nil
	}
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if h != nil {
		h.Close()
	}
}

// destroy ends the box. A declared box never made is not made to be
// destroyed: it is only marked gone.
func (b *boxState) destroy(ctx context.Context) error {
	b.mu.Lock()
	box := b.box
	declared := b.rec.ID == "" && b.rec.Spec != nil
	b.mu.Unlock()
	if declared {
		b.markGone(providers.Errorf(providers.Gone, "fs", "box %q was destroyed before it was made", b.name))
		return nil
	}
	if box == nil {
		if err := b.connect(ctx); err != nil && providers.CodeOf(err) != providers.Gone {
			return err
		}
		b.mu.Lock()
		box = b.box
		b.mu.Unlock()
	}
	b.cmds.killAll(ctx)
	b.close()
	if box != nil {
		if err := box.Destroy(ctx); err != nil && providers.CodeOf(err) != providers.Gone {
			return err
		}
	}
	b.markGone(providers.Errorf(providers.Gone, "fs", "box %q was destroyed", b.name))
	b.fs.log.Info("box destroyed", "box", b.name)
	return nil
}

// statusLine renders the box's ctl: one key=value line.
func (b *boxState) statusLine() string {
	b.mu.Lock()
	state, prov, id := b.state, b.rec.Provider, b.rec.ID
	c := b.cache
	bad := b.health.bad
	via := ""
	if b.hands != nil {
		via = b.hands.Via()
	}
	b.mu.Unlock()
	dirty := 0
	if c != nil {
		dirty = len(c.Dirty())
	}
	if bad && state == stateReady {
		state = "unhealthy"
	}
	last, lastStatus := b.cmds.last()
	fields := []string{
		"state=" + state,
		"provider=" + prov,
		"id=" + id,
		fmt.Sprintf("dirty=%d", dirty),
	}
	if via != "" {
		fields = append(fields, "via="+via)
	}
	if last > 0 {
		fields = append(fields, fmt.Sprintf("last_cmd=%d", last), "last_status="+strings.ReplaceAll(lastStatus, " ", "_"))
	}
	return strings.Join(fields, " ") + "\n"
}

// factsJSON renders facts.json: the provider's facts plus what the host
// knows of the box's health and cache.
func (b *boxState) factsJSON(ctx context.Context) ([]byte, error) {
	b.mu.Lock()
	facts, h, c := b.facts, b.hands, b.cache
	health := b.health
	state, rec := b.state, b.rec
	b.mu.Unlock()
	if h == nil && state != stateGone && state != stateDeclared {
		if err := b.connect(ctx); err == nil {
			b.mu.Lock()
			facts, h, c = b.facts, b.hands, b.cache
			b.mu.Unlock()
		}
	}
	out := struct {
		providers.Facts
		Name     string   `json:"name"`
		State    string   `json:"state"`
		Via      string   `json:"via,omitempty"`
		Health   string   `json:"health"`
		Since    string   `json:"unhealthySince,omitempty"`
		LastErr  string   `json:"lastError,omitempty"`
		Dirty    []string `json:"dirtyFiles"`
		Commands int      `json:"commands"`
	}{Facts: facts, Name: b.name, State: state, Health: "ok", Dirty: []string{}}
	if out.Facts.Provider == "" {
		out.Facts.Provider, out.Facts.ID = rec.Provider, rec.ID
	}
	if out.Facts.Ports == nil {
		out.Facts.Ports = []int{}
	}
	if h != nil {
		out.Via = h.Via()
	}
	if health.bad {
		out.Health = "unhealthy"
		out.Since = health.since.UTC().Format(time.RFC3339)
	}
	if health.lastErr != nil {
		out.LastErr = health.lastErr.Error()
	}
	if c != nil {
		out.Dirty = append(out.Dirty, c.Dirty()...)
	}
	out.Commands = b.cmds.count()
	buf, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(buf, '\n'), nil
}

// watch has the agent report what changes in the box's workspace, and
// drops what the host knows of each changed path at once (the cache's and
// the kernel's), so a change not made through exec (a background job, a
// docker exec, another mount) shows at the next look instead of after the
// attribute timeout. A watch that stops is started again, after a pause
// that grows while it keeps failing; meanwhile the attribute timeout keeps
// the host's view as fresh as without a watch.
func (b *boxState) watch(ctx context.Context, h *hands.Hands, c *cache.Cache, root string) {
	go func() {
		// Reports held as echoes of the host's own changes fall due.
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.notifyBoxChanges(c.DueEchoes())
			}
		}
	}()
	pause := time.Second
	for ctx.Err() == nil {
		started := time.Now()
		watched := false
		err := h.Watch(ctx, root, func() { watched = true }, func(paths []string, all bool) {
			if all {
				c.BoxChanged(nil, true)
				b.notifyAll()
				return
			}
			b.notifyBoxChanges(c.BoxChanged(paths, false))
		})
		if ctx.Err() != nil || providers.IsCode(err, providers.Unsupported) {
			return
		}
		if watched {
			// What changes while no watch runs is not reported.
			c.BoxChanged(nil, true)
			b.notifyAll()
		}
		b.fs.log.Debug("workspace watch ended; starting it again", "box", b.name, "err", err, "after", pause)
		if time.Since(started) > time.Minute {
			pause = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Minute)
	}
}

// notifyBoxChanges tells the kernel to ask again about each changed path:
// its name in its directory (a name made, removed or replaced), its
// attributes and pages, and its directory's attributes. No lock is held.
func (b *boxState) notifyBoxChanges(rels []string) {
	if len(rels) == 0 || !b.fs.mounted() {
		return
	}
	for _, rel := range rels {
		if n := b.findNode(rel); n != nil {
			n.NotifyContent(0, 0)
		}
		if rel == "" {
			continue
		}
		dir, name := splitRel(rel)
		if parent := b.findNode(dir); parent != nil {
			parent.NotifyEntry(name)
			parent.NotifyContent(-1, 0)
		}
	}
}
