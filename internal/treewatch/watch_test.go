//go:build linux

package treewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// events gathers what a Watch reports.
type events struct {
	mu    sync.Mutex
	ready bool
	paths []string
	all   int
	early bool // all reported before ready
	ch    chan struct{}
}

func newEvents() *events { return &events{ch: make(chan struct{}, 1000)} }

func (e *events) options(limit int) Options {
	return Options{
		Limit: limit,
		Ready: func() { e.mu.Lock(); e.ready = true; e.mu.Unlock(); e.ch <- struct{}{} },
		Changed: func(paths []string, all bool) {
			e.mu.Lock()
			e.paths = append(e.paths, paths...)
			if all {
				e.all++
				e.early = e.early || !e.ready
			}
			e.mu.Unlock()
			e.ch <- struct{}{}
		},
		Skip: func(name string) bool { return filepath.Ext(name) == ".tmp" },
	}
}

// waitFor waits until cond holds of what was reported.
func (e *events) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		e.mu.Lock()
		ok := cond()
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-e.ch:
		case <-timeout:
			e.mu.Lock()
			defer e.mu.Unlock()
			t.Fatalf("%s: not reported within 10 s; paths %q, overflows %d", what, e.paths, e.all)
		}
	}
}

func (e *events) has(p string) bool {
	for _, q := range e.paths {
		if q == p {
			return true
		}
	}
	return false
}

// A change anywhere in the tree, in directories made after the watch
// began too, is reported by its path; skipped names are not; the watch
// ends when its context does.
func TestWatchReportsAndEnds(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	e := newEvents()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, root, e.options(0)) }()
	e.waitFor(t, "ready", func() bool { return e.ready })

	require.NoError(t, os.WriteFile(filepath.Join(root, "a", "b", "f"), []byte("1"), 0o644))
	e.waitFor(t, "a file made", func() bool { return e.has("a/b/f") })
	require.NoError(t, os.MkdirAll(filepath.Join(root, "n", "m"), 0o755))
	e.waitFor(t, "a directory made", func() bool { return e.has("n") })
	require.NoError(t, os.WriteFile(filepath.Join(root, "n", "m", "x.tmp"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "n", "m", "g"), nil, 0o644))
	e.waitFor(t, "a file in the new directory", func() bool { return e.has("n/m/g") })
	e.mu.Lock()
	assert.False(t, e.has("n/m/x.tmp"), "a skipped name was reported")
	assert.Zero(t, e.all, "overflows")
	e.mu.Unlock()

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not end with its context")
	}
}

// A tree with more directories than the limit is reported as an overflow
// before ready; a tree that outgrows it later, at the directory that
// does.
func TestWatchLimit(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a", "b", "c"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	e := newEvents()
	go Watch(t.Context(), root, e.options(2))
	e.waitFor(t, "ready", func() bool { return e.ready })
	e.mu.Lock()
	assert.True(t, e.early, "a tree past the limit is an overflow before ready")
	e.mu.Unlock()

	root2 := t.TempDir()
	e2 := newEvents()
	go Watch(t.Context(), root2, e2.options(3))
	e2.waitFor(t, "ready", func() bool { return e2.ready })
	require.NoError(t, os.Mkdir(filepath.Join(root2, "a"), 0o755))
	e2.waitFor(t, "a first directory", func() bool { return e2.has("a") })
	e2.mu.Lock()
	assert.Zero(t, e2.all, "within the limit")
	e2.mu.Unlock()
	require.NoError(t, os.MkdirAll(filepath.Join(root2, "b", "c"), 0o755))
	e2.waitFor(t, "the tree outgrew the limit", func() bool { return e2.all > 0 })
	e2.mu.Lock()
	assert.False(t, e2.early)
	e2.mu.Unlock()
}

// The root's removal ends the watch, reported as an overflow.
func TestWatchRootGone(t *testing.T) {
	root := filepath.Join(t.TempDir(), "r")
	require.NoError(t, os.Mkdir(root, 0o755))
	e := newEvents()
	done := make(chan error, 1)
	go func() { done <- Watch(t.Context(), root, e.options(0)) }()
	e.waitFor(t, "ready", func() bool { return e.ready })
	require.NoError(t, os.RemoveAll(root))
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not end when its root went away")
	}
	e.mu.Lock()
	assert.Positive(t, e.all)
	e.mu.Unlock()
}
