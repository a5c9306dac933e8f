package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine"
)

// TestProgressCounts: a seed's and a pull's progress callback sees the
// archive's bytes, and the seed's total estimate (tarSize) is the tar's
// size for plain files.
func TestProgressCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := boxes.New(boxes.Options{StateDir: t.TempDir(), DefaultProvider: "local", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, err)
	must(t, m.Create(ctx, "p", "", providers.Spec{Lifetime: 5 * time.Minute}))
	t.Cleanup(func() {
		m.Destroy(context.Background(), "p")
		m.Shutdown(context.Background())
	})
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "d", "a.bin"), bytes.Repeat([]byte{7}, 300_000), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "b.txt"), []byte("b"), 0o644))

	var seen atomic.Int64
	rc, err := m.SeedProgress(ctx, "p", src, syncengine.SeedOptions{}, func(n int64) { seen.Store(n) })
	must(t, err)
	if rc.Bytes != 300_001 {
		t.Errorf("seed moved %d file bytes, want 300001", rc.Bytes)
	}
	est := tarSize(src)
	if got := seen.Load(); got < rc.Bytes || got > est+10*512 {
		t.Errorf("seed progress saw %d bytes; want between the file bytes %d and about the estimate %d", got, rc.Bytes, est)
	}

	seen.Store(0)
	rc, err = m.PullProgress(ctx, "p", t.TempDir(), syncengine.PullOptions{}, func(n int64) { seen.Store(n) })
	must(t, err)
	if got := seen.Load(); rc.Archives != 1 || got < rc.Bytes {
		t.Errorf("pull progress saw %d bytes for %d file bytes in %d archives", got, rc.Bytes, rc.Archives)
	}
}

func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, "seed b", 1000)
	p.last = p.last.Add(-time.Minute) // due
	p.update(500)
	p.finish()
	if got := buf.String(); !strings.HasPrefix(got, "seed b: 500 B of ~1000 B (50%)") || strings.Count(got, "\n") != 1 {
		t.Errorf("plain progress line: %q", got)
	}
	buf.Reset()
	p.update(600) // not due again yet
	if buf.Len() != 0 {
		t.Errorf("progress printed again at once: %q", buf.String())
	}
}
