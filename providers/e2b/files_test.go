package e2b_test

import (
	"context"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
)

func workspace(t *testing.T, b providers.Box) string {
	t.Helper()
	f, err := b.Facts(ctx(t))
	require.NoError(t, err)
	return f.Workspace
}

// TestReadFile reads files through envd's /files: whole, at offsets (a
// Range request), past the end, and a missing one (ENOENT).
func TestReadFile(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{}).(*e2b.Box)
	ws := workspace(t, b)
	run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", `printf '0123456789' >f; ln -s f link`}})

	rc, err := b.ReadFile(ctx(t), path.Join(ws, "link"))
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.Equal(t, "0123456789", string(data))

	p := make([]byte, 4)
	n, err := b.ReadAt(ctx(t), path.Join(ws, "f"), p, 3)
	assert.NoError(t, err)
	assert.Equal(t, "3456", string(p[:n]))
	n, err = b.ReadAt(ctx(t), path.Join(ws, "f"), p, 8)
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, "89", string(p[:n]))
	n, err = b.ReadAt(ctx(t), path.Join(ws, "f"), p, 10)
	assert.Equal(t, io.EOF, err)
	assert.Zero(t, n)

	_, err = b.ReadFile(ctx(t), path.Join(ws, "missing"))
	assert.ErrorIs(t, err, syscall.ENOENT)
	_, err = b.ReadFile(ctx(t), ws)
	assert.True(t, providers.IsCode(err, providers.Unsupported), "ReadFile of a directory is left to the script: %v", err)
}

// TestWatch follows changes made in the box by commands boxfs did not
// make through files: each shows as a path relative to the root.
func TestWatch(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{}).(*e2b.Box)
	ws := workspace(t, b)
	run(t, b, providers.ExecRequest{Argv: []string{"mkdir", "-p", "sub"}})

	var mu sync.Mutex
	var seen []string
	ready := make(chan struct{})
	wctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		ended <- b.Watch(wctx, ws, func() { close(ready) }, func(changes []providers.Change, all bool) {
			paths := providers.Paths(changes)
			mu.Lock()
			seen = append(seen, paths...)
			mu.Unlock()
		})
	}()
	select {
	case <-ready:
	case err := <-ended:
		t.Fatalf("Watch ended before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Watch not ready in 30 s")
	}
	saw := func(want ...string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range want {
				if !slices.Contains(seen, w) {
					return false
				}
			}
			return true
		}
	}
	// What a new directory holds before its own watch is set may go
	// unreported (as with envd's inotify); the directory itself is.
	run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", `echo x >top; mkdir sub/new; rm top`}})
	require.Eventually(t, saw("top", "sub/new"), 30*time.Second, 10*time.Millisecond)
	run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", `echo y >sub/new/deep`}})
	require.Eventually(t, saw("sub/new/deep"), 30*time.Second, 10*time.Millisecond)
	cancel()
	assert.NoError(t, <-ended, "Watch ends with nil when its ctx ends")

	// A box that goes ends the watch with Gone.
	go func() {
		ended <- b.Watch(context.Background(), ws, nil, func([]providers.Change, bool) {})
	}()
	time.Sleep(200 * time.Millisecond)
	srv.KillSandbox(b.ID())
	select {
	case err := <-ended:
		assert.True(t, providers.IsCode(err, providers.Gone), "Watch of a box that ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Watch did not end within 30 s of its box's end")
	}
}

// TestAgentChannel runs hands over the agent channel on one long-lived
// envd process: the static boxfs binary is uploaded through stdin, started
// with stdin and no deadline, and serves file operations.
func TestAgentChannel(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{})
	h, err := hands.New(ctx(t), b, hands.Options{AgentBinary: boxfsbin.Path(t), Force: hands.ViaAgent})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	assert.Equal(t, hands.ViaAgent, h.Via())
	ws := h.Facts().Workspace
	name := path.Join(ws, "agent.txt")
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	fi, err := h.WriteFileStat(ctx(t), name, strings.NewReader("through the agent"), providers.WriteOptions{Perm: 0o640, ForceMode: true, Mtime: mtime})
	require.NoError(t, err)
	assert.Equal(t, providers.FileMode(0o640), fi.Mode.Perm())
	assert.True(t, fi.Mtime.Equal(mtime), "mtime %v", fi.Mtime)
	rc, err := h.ReadFile(ctx(t), name)
	require.NoError(t, err)
	data, _ := io.ReadAll(rc)
	rc.Close()
	assert.Equal(t, "through the agent", string(data))
	ents, err := h.ReadDir(ctx(t), ws)
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(ents, func(e providers.FileInfo) bool { return e.Name == "agent.txt" }))
	_, err = h.Stat(ctx(t), path.Join(ws, "missing"))
	assert.ErrorIs(t, err, syscall.ENOENT)
	st, ok := h.AgentStats()
	require.True(t, ok)
	assert.True(t, st.Up)
	assert.Equal(t, 1, st.Uploads)

	// Changes made behind boxfs's back reach the agent's watch.
	var mu sync.Mutex
	var seen []string
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go h.Watch(wctx, ws, func() { close(ready) }, func(changes []providers.Change, all bool) {
		paths := providers.Paths(changes)
		mu.Lock()
		seen = append(seen, paths...)
		mu.Unlock()
	})
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's watch was not ready in 30 s")
	}
	run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", "echo z >behind"}})
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(seen, "behind")
	}, 30*time.Second, 10*time.Millisecond)
}
