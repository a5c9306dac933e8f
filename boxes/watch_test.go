package boxes_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// watching is a provider whose boxes have a watch of their own, driven by
// the test: each Watch call takes its fate from runs.
type watching struct {
	*fake.Provider
	runs chan watchRun
}

// watchRun is what one Watch of the box does: report lost changes before
// it is ready (early) or after, then end when ctx does or end is closed.
type watchRun struct {
	early bool
	lose  chan struct{}
	end   chan struct{}
}

func (p watching) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	b, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return watchingBox{b, p.runs}, nil
}

type watchingBox struct {
	providers.Box
	runs chan watchRun
}

func (b watchingBox) Watch(ctx context.Context, root string, ready func(), changed func([]providers.Change, bool)) error {
	var run watchRun
	select {
	case run = <-b.runs:
	case <-ctx.Done():
		return nil
	}
	if run.early {
		changed(nil, true)
	}
	ready()
	select {
	case <-run.lose:
		changed(nil, true)
		<-ctx.Done()
		return nil
	case <-run.end:
		return providers.Errorf(providers.TransportLost, "test", "the watch's stream broke")
	case <-ctx.Done():
		return nil
	}
}

type freshFacts struct {
	Freshness     string  `json:"freshness"`
	FreshnessMs   float64 `json:"freshnessMs"`
	FreshnessNote string  `json:"freshnessNote"`
}

func freshnessOf(t *testing.T, b *boxes.Box) freshFacts {
	t.Helper()
	raw, err := b.FactsJSON(t.Context())
	require.NoError(t, err)
	var f freshFacts
	require.NoError(t, json.Unmarshal(raw, &f), "%s", raw)
	return f
}

// waitFresh waits for the box's freshness to be mode, said with note.
func waitFresh(t *testing.T, b *boxes.Box, mode, note string) freshFacts {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f := freshnessOf(t, b)
		if f.Freshness == mode && strings.Contains(f.FreshnessNote, note) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("freshness %+v, want %s (%q)", f, mode, note)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A box with a watch is served by it (facts.json says "watch"); when the
// watch loses changes the box falls back to the attribute timeout and
// says so, and a new watch is set; a box whose watch is turned off, by
// the mount or by its own new message, says "timeout" and why.
func TestFreshness(t *testing.T) {
	ctx := t.Context()
	p := watching{fake.New(), make(chan watchRun, 4)}
	open := func(noWatch bool) *boxes.Manager {
		m, err := boxes.New(boxes.Options{StateDir: t.TempDir(), DefaultProvider: "fake", Logger: quiet(), NoWatch: noWatch,
			AttrTimeout: 3 * time.Second, OpenProvider: func(string) (providers.Provider, error) { return p, nil }})
		require.NoError(t, err)
		t.Cleanup(func() { m.Shutdown(context.Background()) })
		return m
	}
	m := open(false)
	require.NoError(t, m.Create(ctx, "a", "", providers.Spec{}))
	b := m.Lookup("a")

	first := watchRun{lose: make(chan struct{}), end: make(chan struct{})}
	p.runs <- first
	f := waitFresh(t, b, boxes.FreshWatch, "")
	assert.Positive(t, f.FreshnessMs)
	assert.Less(t, f.FreshnessMs, 1000.0)
	assert.Empty(t, f.FreshnessNote)

	close(first.lose)
	f = waitFresh(t, b, boxes.FreshTimeout, "lost changes")
	assert.Equal(t, 3000.0, f.FreshnessMs)

	// The watch set again serves again.
	second := watchRun{lose: make(chan struct{}), end: make(chan struct{})}
	p.runs <- second
	waitFresh(t, b, boxes.FreshWatch, "")
	close(second.end)
	waitFresh(t, b, boxes.FreshTimeout, "stream broke")

	// A tree the watch cannot cover from the start: timeouts, said so.
	p.runs <- watchRun{early: true, lose: make(chan struct{}), end: make(chan struct{})}
	waitFresh(t, b, boxes.FreshTimeout, "more directories")

	off := open(true)
	require.NoError(t, off.Create(ctx, "b", "", providers.Spec{}))
	f = freshnessOf(t, off.Lookup("b"))
	assert.Equal(t, boxes.FreshTimeout, f.Freshness)
	assert.Contains(t, f.FreshnessNote, "off for the mount")

	require.NoError(t, m.CreateWith(ctx, "c", "", providers.Spec{}, boxes.Settings{Watch: boxes.WatchOff}))
	f = freshnessOf(t, m.Lookup("c"))
	assert.Equal(t, boxes.FreshTimeout, f.Freshness)
	assert.Contains(t, f.FreshnessNote, "off for this box")
}
