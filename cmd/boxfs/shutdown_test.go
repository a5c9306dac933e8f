package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/boxes"
	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// lockedBuffer is a log written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestShutdownWithHungBoxEndsWithinBound ends a mount whose box never
// answers the push of a journaled file (the call ignores every
// deadline): the end returns within its bound, logs what still runs, and
// leaves the mount detached and the file in the box's journal for the
// next mount.
func TestShutdownWithHungBoxEndsWithinBound(t *testing.T) {
	needMount(t)
	fp := fake.New()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// Every push hangs, whichever way the cache sends it.
	fp.On(fake.Match{Op: "WriteFile"}).Stall(release)
	fp.On(fake.Match{Op: "PutArchive"}).Stall(release)

	logs := &lockedBuffer{}
	var w io.Writer = logs
	if testing.Verbose() {
		w = io.MultiWriter(logs, os.Stderr)
	}
	log := slog.New(slog.NewTextHandler(w, nil))
	state := t.TempDir()
	m, err := boxes.New(boxes.Options{
		StateDir:        state,
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		WriteBehind:     true, // close returns at the journal; the push hangs later
		OpTimeout:       time.Minute,
		Logger:          log,
	})
	must(t, err)
	mnt := t.TempDir()
	server, err := boxfs.New(m).Mount(mnt, boxfs.MountOptions{})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(mnt, "ctl"), []byte("new a\n"), 0))
	must(t, os.WriteFile(filepath.Join(mnt, "a", "work", "kept.txt"), []byte("journaled"), 0o644))

	const bound = 2 * time.Second
	start := time.Now()
	endMount(log, m, server, mnt, true, bound)
	if d := time.Since(start); d > bound+10*time.Second {
		t.Errorf("the end of the mount took %v, bound %v", d, bound)
	}
	out := logs.String()
	for _, want := range []string{"shutdown passed its bound", "providers/fake.outcome.before"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if isMountpoint(mnt) {
		t.Errorf("%s still mounted after the end", mnt)
	}
	// The file stays journaled: the next mount pushes it.
	journals, _ := filepath.Glob(filepath.Join(state, "cache", "*", "journal.log"))
	found := false
	for _, j := range journals {
		b, _ := os.ReadFile(j)
		if strings.Contains(string(b), "kept.txt") {
			found = true
		}
	}
	if !found {
		t.Errorf("kept.txt is in no journal under %s (journals: %v)", state, journals)
	}
}
