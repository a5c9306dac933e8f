package fs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// testBound is the request bound of these tests: long enough for every
// request the box answers, short for one it never does.
const testBound = time.Second

// mountBounded serves a namespace over the fake provider with requests
// bounded by testBound, its log in the returned buffer.
func mountBounded(t *testing.T) (string, *fake.Provider, *syncBuf) {
	t.Helper()
	fp := fake.New()
	logs := &syncBuf{}
	var w io.Writer = logs
	if testing.Verbose() {
		w = io.MultiWriter(logs, os.Stderr)
	}
	mnt, _ := serveWith(t, boxes.Options{
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		AttrTimeout:     time.Second,
		OpTimeout:       time.Minute, // the box's own bound stays out of the way
		Logger:          slog.New(slog.NewTextHandler(w, nil)),
	}, boxfs.MountOptions{RequestBound: testBound})
	return mnt, fp, logs
}

// timed runs fn and fails the test unless it ended within the request
// bound and a margin for a loaded machine.
func timed(t *testing.T, what string, fn func() error) error {
	t.Helper()
	start := time.Now()
	err := fn()
	if d := time.Since(start); d > testBound+5*time.Second {
		t.Errorf("%s took %v, bound %v", what, d, testBound)
	}
	return err
}

// TestStuckRequestAnswersETIMEDOUT makes `new` hang in the provider past
// every deadline, as the stuck write did: the write to ctl answers
// ETIMEDOUT at the request bound, the log has the daemon's goroutines
// (the stuck call among them), and the mount goes on answering.
func TestStuckRequestAnswersETIMEDOUT(t *testing.T) {
	mnt, fp, logs := mountBounded(t)
	release := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	fp.On(fake.Match{Op: "Create"}).Stall(release).Once()

	err := timed(t, "new", func() error { return writeFile(t, filepath.Join(mnt, "ctl"), "new d\n") })
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("new with a stuck provider: %v, want ETIMEDOUT", err)
	}
	out := logs.String()
	require.Contains(t, out, "request passed its bound")
	// The dump names the stuck call: the fake's stall, under Create.
	require.Contains(t, out, "providers/fake.outcome.before")
	require.Contains(t, out, "providers/fake.(*Provider).Create")

	// The mount answers other requests meanwhile.
	_, err = os.ReadFile(filepath.Join(mnt, "ctl"))
	require.NoError(t, err)

	// Once the provider answers, the work behind the request ends: the
	// box is made and listed.
	close(release)
	released = true
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(mnt, "ctl"))
		return err == nil && strings.Contains(string(b), "d fake") && !strings.Contains(string(b), "creating")
	}, 20*time.Second, 50*time.Millisecond, "the late new never ended")
}

// TestStuckCloseReportsIt makes the push at close hang: close(2) answers
// ETIMEDOUT, not success, and the bytes reach the box once it answers.
// A second stuck request within the dump interval logs no second dump.
func TestStuckCloseReportsIt(t *testing.T) {
	mnt, fp, logs := mountBounded(t)
	box := newBox(t, mnt, "a")
	release := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	fp.On(fake.Match{Op: "WriteFile"}).Stall(release)

	for _, name := range []string{"f", "g"} {
		err := timed(t, "close", func() error {
			f, err := os.Create(filepath.Join(box, "work", name))
			if err != nil {
				return err
			}
			if _, err := f.WriteString("data of " + name); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		})
		if !errors.Is(err, syscall.ETIMEDOUT) {
			t.Fatalf("close of %s with a stuck push: %v, want ETIMEDOUT", name, err)
		}
	}
	out := logs.String()
	require.Equal(t, 2, strings.Count(out, "request passed its bound"), "log:\n%s", out)
	require.Equal(t, 1, strings.Count(out, `goroutines="goroutine `), "one dump per interval")
	require.Equal(t, 1, strings.Count(out, `goroutines="written at `), "the second names the first")

	close(release)
	released = true
	fb := fp.Boxes()[0]
	require.Eventually(t, func() bool {
		for _, name := range []string{"f", "g"} {
			r, err := fb.Files().ReadFile(context.Background(), "/work/"+name)
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(r)
			r.Close()
			if string(b) != "data of "+name {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the late pushes never landed")
}
