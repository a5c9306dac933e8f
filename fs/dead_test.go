package fs_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

const opTimeout = 2 * time.Second

// mountFake serves a namespace over the scriptable fake provider, its
// caches on clk.
func mountFake(t *testing.T, clk *fake.Clock) (string, *fake.Provider) {
	t.Helper()
	fp := fake.New()
	mnt, _ := serve(t, boxes.Options{
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		AttrTimeout:     time.Second,
		OpTimeout:       opTimeout,
		Now:             clk.Now,
	})
	return mnt, fp
}

// within runs fn and fails the test if it takes longer than the bound.
func within(t *testing.T, what string, fn func() error) error {
	t.Helper()
	start := time.Now()
	err := fn()
	if d := time.Since(start); d > opTimeout+3*time.Second {
		t.Errorf("%s took %v, over the bound", what, d)
	}
	return err
}

func waitHealthy(t *testing.T, box string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var facts struct{ Health string }
		b, err := os.ReadFile(filepath.Join(box, "facts.json"))
		if err == nil && json.Unmarshal(b, &facts) == nil && facts.Health == "ok" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the box never became healthy again")
}

// probeAnswered reports whether, among the calls after the first mark
// calls, an Lstat of the workspace answered after the hung fetch: the
// health probe's (while the box is unhealthy, nothing else reaches it).
func probeAnswered(fp *fake.Provider, mark int) bool {
	hung := false
	for _, c := range fp.Calls()[mark:] {
		switch {
		case c.Op == "ReadFile" && c.Path == "/work/f":
			hung = true
		case hung && c.Op == "Lstat" && c.Path == "/work" && c.Code == 0:
			return true
		}
	}
	return false
}

func TestHungBoxAnswersWithinBound(t *testing.T) {
	clk := fake.NewClock(time.Now())
	mnt, fp := mountFake(t, clk)
	box := newBox(t, mnt, "a")
	w := filepath.Join(box, "work")
	require.NoError(t, os.WriteFile(filepath.Join(w, "f"), []byte("content"), 0o644))

	// Mid-read: the box stops answering reads. The box's copy is made
	// newer and the attribute timeout let pass before the read, outside
	// the bound, which is the read's alone; the hang is scripted for this
	// file's fetch, last, so no background call can take it first.
	os.WriteFile(filepath.Join(box, "ctl"), []byte("sync\n"), 0) // drop the host's copy's validity
	// A new size: no mtime granularity can make it look unchanged.
	fp.Boxes()[0].Files().WriteFile(context.Background(), "/work/f", strings.NewReader("changed, and longer"), 0o644)
	clk.Advance(2 * time.Second) // past the attribute timeout
	// Every fetch of f hangs until the read is done (a retry, too).
	hang := fp.On(fake.Match{Op: "ReadFile", Path: "/work/f"}).Hang()
	mark := len(fp.Calls())
	err := within(t, "read", func() error {
		_, err := os.ReadFile(filepath.Join(w, "f"))
		return err
	})
	fp.ClearRules()
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("read from a hung box: %v, want ETIMEDOUT (the hang was hit %d times; calls since: %v)", err, hang.Hits(), fp.Calls()[mark:])
	}
	// While unhealthy, calls fail fast; facts.json says so, until the
	// background probe (its first a second after the timeout) gets an
	// answer, which can come before this look: "ok"
	// is right only once the probe's Lstat of the workspace has answered.
	var facts struct{ Health, LastError string }
	b, _ := os.ReadFile(filepath.Join(box, "facts.json"))
	if json.Unmarshal(b, &facts); facts.Health != "unhealthy" && !(facts.Health == "ok" && probeAnswered(fp, mark)) {
		t.Errorf("facts.json health %q after a timeout", facts.Health)
	}
	waitHealthy(t, box)

	// Mid-write: the push at close hangs; close reports it, the data stays.
	fp.On(fake.Match{Op: "WriteFile"}).Hang().Once()
	err = within(t, "close", func() error {
		g, err := os.Create(filepath.Join(w, "g"))
		if err != nil {
			return err
		}
		g.Write([]byte("unsaved"))
		return g.Close()
	})
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("close of a write to a hung box: %v, want ETIMEDOUT", err)
	}
	// The data stayed: the release after close tries the push again (the
	// hang was scripted once), or the flush below does.
	waitHealthy(t, box)
	if err := os.WriteFile(filepath.Join(box, "ctl"), []byte("flush\n"), 0); err != nil {
		t.Errorf("flush after recovery: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(w, "g")); string(got) != "unsaved" {
		t.Errorf("g reads %q", got)
	}

	// Mid-readdir. The hang is scripted for the new directory's own
	// listing, after the sync, so no background listing of the parent can
	// take it first.
	os.WriteFile(filepath.Join(box, "ctl"), []byte("sync\n"), 0)
	clk.Advance(2 * time.Second)
	mk := filepath.Join(w, "sub")
	fp.Boxes()[0].Files().Mkdir(context.Background(), "/work/sub", 0o755)
	fp.On(fake.Match{Op: "ReadDir", Path: "/work/sub"}).Hang().Once()
	err = within(t, "readdir", func() error {
		_, err := os.ReadDir(mk)
		return err
	})
	if err == nil {
		t.Error("readdir of a hung box succeeded")
	}
	waitHealthy(t, box)

	// The box goes away: ENODEV, at once.
	fp.Boxes()[0].Vanish()
	err = within(t, "read of a vanished box", func() error {
		_, err := os.ReadFile(filepath.Join(w, "g"))
		if err == nil {
			os.WriteFile(filepath.Join(box, "ctl"), []byte("sync\n"), 0)
			_, err = os.ReadFile(filepath.Join(w, "g"))
		}
		return err
	})
	if err == nil {
		t.Error("a vanished box still serves reads")
	}
}
