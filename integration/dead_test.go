package integration

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

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// boxID reads the provider's id of a box from its ctl.
func boxID(t *testing.T, b *boxT) string {
	t.Helper()
	st, err := os.ReadFile(filepath.Join(b.dir, "ctl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(st)) {
		if v, ok := strings.CutPrefix(f, "id="); ok {
			return v
		}
	}
	t.Fatalf("no id in ctl: %q", st)
	return ""
}

// dockerCLI pauses, unpauses or removes a container through the Engine
// API, not the docker command: a fork while a file on the mount is open
// closes a copy of its descriptor in the child, and that close is a flush
// (the push this test wants to happen later).
func dockerCLI(t *testing.T, verb, id string) {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch verb {
	case "pause":
		err = cli.ContainerPause(ctx, id)
	case "unpause":
		err = cli.ContainerUnpause(ctx, id)
	case "rm":
		err = cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	}
	if err != nil {
		t.Fatalf("docker %s %s: %v", verb, id, err)
	}
}

// bounded runs fn in a goroutine and fails the test if it does not return
// within limit: a caller stuck in the kernel would hang the test instead.
func bounded(t *testing.T, what string, limit time.Duration, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fn() }()
	select {
	case err := <-done:
		t.Logf("%s: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
		return err
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
		return nil
	}
}

func health(t *testing.T, b *boxT) string {
	t.Helper()
	var f struct{ Health string }
	data, err := os.ReadFile(filepath.Join(b.dir, "facts.json"))
	if err != nil {
		return "error: " + err.Error()
	}
	json.Unmarshal(data, &f)
	return f.Health
}

func waitHealth(t *testing.T, b *boxT, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for health(t, b) != want {
		if time.Now().After(deadline) {
			t.Fatalf("health never became %q (is %q)", want, health(t, b))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestDeadDockerBox pauses a Docker box mid-read, mid-write and mid-readdir,
// then removes it behind boxfs's back: every call returns an error within
// the bound, close() reports the lost write, the data survives the pause,
// and the mount still unmounts (checked at cleanup).
func TestDeadDockerBox(t *testing.T) {
	const opTimeout = 4 * time.Second
	const limit = opTimeout + 10*time.Second
	m := startMount(t, "docker", opTimeout)
	b := m.newBox(t, "dead", "provider=docker")
	id := boxID(t, b)
	b.must(t, "mkdir -p d && echo from-box > d/f && seq 1 1000 > big")

	// Mid-read.
	dockerCLI(t, "pause", id)
	err := bounded(t, "read while paused", limit, func() error {
		_, err := os.ReadFile(filepath.Join(b.work, "d", "f"))
		return err
	})
	if err == nil {
		t.Error("read from a paused box succeeded")
	} else if !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("read from a paused box: %v", err)
	}
	if h := health(t, b); h != "unhealthy" {
		t.Errorf("facts.json health %q while paused", h)
	}
	// Later calls fail fast while the box is unhealthy.
	err = bounded(t, "second read while paused", 3*time.Second, func() error {
		_, err := os.ReadFile(filepath.Join(b.work, "big"))
		return err
	})
	if err == nil {
		t.Error("second read from a paused box succeeded")
	}
	dockerCLI(t, "unpause", id)
	waitHealth(t, b, "ok")
	if got, err := os.ReadFile(filepath.Join(b.work, "d", "f")); err != nil || string(got) != "from-box\n" {
		t.Errorf("read after unpause: %q %v", got, err)
	}

	// Mid-write while paused: close says the push did not land; the data
	// stays dirty and reaches the box once it runs again.
	f, err := os.Create(filepath.Join(b.work, "w.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("written while the box slept\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	dockerCLI(t, "pause", id)
	if err := bounded(t, "close while paused", limit, f.Close); err == nil {
		t.Error("close of a write to a paused box reported success")
	}
	if d, _ := os.ReadFile(filepath.Join(b.dir, "facts.json")); !strings.Contains(string(d), `"w.txt"`) {
		t.Errorf("w.txt not kept dirty after a failed push: %s", d)
	}
	dockerCLI(t, "unpause", id)
	waitHealth(t, b, "ok")
	if err := ctlWrite(filepath.Join(b.dir, "ctl"), "flush\n"); err != nil {
		t.Errorf("flush after unpause: %v", err)
	}
	if out := b.must(t, "cat w.txt"); out != "written while the box slept\n" {
		t.Errorf("box has %q", out)
	}

	// Mid-readdir.
	b.must(t, "mkdir fresh && touch fresh/a fresh/b")
	dockerCLI(t, "pause", id)
	err = bounded(t, "readdir while paused", limit, func() error {
		_, err := os.ReadDir(filepath.Join(b.work, "fresh"))
		return err
	})
	if err == nil {
		// The listing may have come with the command's refresh; ask for
		// something the host cannot have.
		err = bounded(t, "stat while paused", limit, func() error {
			_, err := os.Stat(filepath.Join(b.work, "fresh", "never-listed"))
			if errors.Is(err, syscall.ENOENT) {
				time.Sleep(1100 * time.Millisecond) // past the listing's timeout
				_, err = os.Stat(filepath.Join(b.work, "fresh", "never-listed-2"))
			}
			return err
		})
		if errors.Is(err, syscall.ENOENT) {
			t.Error("a paused box answered a lookup")
		}
	}
	dockerCLI(t, "unpause", id)
	waitHealth(t, b, "ok")

	// Removed behind boxfs's back, with a write open: close reports the
	// lost write, reads and listings fail, all within the bound.
	g, err := os.Create(filepath.Join(b.work, "lost.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write([]byte("this write has nowhere to go\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	dockerCLI(t, "rm", id)
	if err := bounded(t, "close after the box was removed", limit, g.Close); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("close of a write to a removed box: %v, want ENODEV", err)
	}
	err = bounded(t, "read of a removed box", limit, func() error {
		_, err := os.ReadFile(filepath.Join(b.work, "big"))
		return err
	})
	if !errors.Is(err, syscall.ENODEV) {
		t.Errorf("read of a removed box: %v, want ENODEV", err)
	}
	time.Sleep(1100 * time.Millisecond)
	err = bounded(t, "list a removed box", limit, func() error {
		_, err := os.ReadDir(filepath.Join(b.work, "d"))
		return err
	})
	if !errors.Is(err, syscall.ENODEV) {
		t.Errorf("listing of a removed box: %v, want ENODEV", err)
	}
	if st, _ := os.ReadFile(filepath.Join(b.dir, "ctl")); !strings.Contains(string(st), "state=gone") {
		t.Errorf("ctl of a removed box: %q", st)
	}
}
