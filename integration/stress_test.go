package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// stressBound is the request bound of TestManyBoxesUnderLoad's mount: far
// above what any of its requests needs, far below the default 5 minutes.
const stressBound = 20 * time.Second

func init() {
	// An in-process box service, as a cloud provider's fake is.
	fakeProviders["fakecloud"] = func(providers.Config) (providers.Provider, error) {
		return fake.New(fake.WithName("fakecloud")), nil
	}
	// A provider whose create does not answer within the request bound,
	// whatever its context says, as the stuck `new` of a real mount did:
	// it answers once the bound and a margin have passed since the
	// provider was opened (at the first new that names it).
	fakeProviders["stuck"] = func(providers.Config) (providers.Provider, error) {
		p := fake.New(fake.WithName("stuck"))
		release := make(chan struct{})
		time.AfterFunc(stressBound+10*time.Second, func() { close(release) })
		p.On(fake.Match{Op: "Create"}).Stall(release)
		return p, nil
	}
}

// TestManyBoxesUnderLoad makes, uses and destroys 200 boxes of three
// providers (local, Docker and an in-process service) in both write modes
// through ctl, four at a time, while a CPU-burning process competes for
// the machine: every write to a control file and every file written
// through the mount returns within the mount's request bound, and every
// box holds what was written to it. Then a request made to hang (a
// provider whose create stalls) is answered ETIMEDOUT at the bound, the
// daemon's goroutines are in its log, and the mount goes on answering.
func TestManyBoxesUnderLoad(t *testing.T) {
	requireProvider(t, "docker")
	m := startMountCfg(t, mountCfg{provider: "local", opTimeout: 15 * time.Second, attr: time.Second,
		env: []string{envBound + "=" + stressBound.String()}})

	burn := exec.Command("sh", "-c", "while :; do :; done")
	if err := burn.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { burn.Process.Kill(); burn.Wait() })

	const boxes = 200
	var mu sync.Mutex
	slowest := map[string]time.Duration{}
	timed := func(what, kind string, fn func() error) error {
		start := time.Now()
		err := fn()
		d := time.Since(start)
		mu.Lock()
		slowest[kind] = max(slowest[kind], d)
		mu.Unlock()
		if d > stressBound+5*time.Second {
			t.Errorf("%s took %v: past the request bound %v", what, d, stressBound)
		}
		return err
	}
	one := func(i int) error {
		name := fmt.Sprintf("s%03d", i)
		provider := "local"
		switch {
		case i%10 == 0:
			provider = "docker"
		case i%10 >= 7:
			provider = "fakecloud"
		}
		write := "through"
		if i%2 == 1 {
			write = "behind"
		}
		msg := fmt.Sprintf("new %s provider=%s write=%s\n", name, provider, write)
		if err := timed(strings.TrimSpace(msg), "new", func() error { return ctlWrite(filepath.Join(m.mnt, "ctl"), msg) }); err != nil {
			return fmt.Errorf("%s: %w", strings.TrimSpace(msg), err)
		}
		file := filepath.Join(m.mnt, name, "work", "f")
		want := "box " + name + " " + provider + " " + write + "\n"
		if err := timed("write "+file, "write", func() error { return os.WriteFile(file, []byte(want), 0o644) }); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
		if got, err := os.ReadFile(file); err != nil || string(got) != want {
			return fmt.Errorf("%s reads %q, %v; want %q", file, got, err, want)
		}
		ctl := filepath.Join(m.mnt, name, "ctl")
		if err := timed("destroy "+name, "destroy", func() error { return ctlWrite(ctl, "destroy\n") }); err != nil {
			return fmt.Errorf("destroy %s: %w", name, err)
		}
		return nil
	}

	work := make(chan int)
	errs := make(chan error, boxes)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := one(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	start := time.Now()
	for i := range boxes {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		e, _ := os.ReadFile(filepath.Join(m.mnt, "err"))
		t.Errorf("%v (err: %s)", err, e)
	}
	t.Logf("%d boxes made, written, read and destroyed in %v; slowest new %v, write %v, destroy %v",
		boxes, time.Since(start).Round(time.Millisecond), slowest["new"].Round(time.Millisecond),
		slowest["write"].Round(time.Millisecond), slowest["destroy"].Round(time.Millisecond))
	list, err := os.ReadFile(filepath.Join(m.mnt, "ctl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		if f := strings.Fields(l); len(f) == 4 && strings.HasPrefix(f[0], "s") && f[3] != "gone" {
			t.Errorf("after destroy the root ctl lists %q", l)
		}
	}

	// The stuck request: the write(2) answers ETIMEDOUT at the bound; the
	// close that follows waits, within a bound of its own, for the work
	// still running on the handle, so that it never reports success over
	// it.
	f, err := os.OpenFile(filepath.Join(m.mnt, "ctl"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hangErr error
	timed("write of a new to a stuck provider", "stuck", func() error {
		_, hangErr = f.Write([]byte("new hang provider=stuck\n"))
		return hangErr
	})
	timed("close after the stuck write", "close", f.Close)
	if !errors.Is(hangErr, syscall.ETIMEDOUT) {
		t.Fatalf("new with a provider that never answers: %v, want ETIMEDOUT", hangErr)
	}
	if slowest["stuck"] < stressBound {
		t.Errorf("the stuck new answered after %v, before its bound %v", slowest["stuck"], stressBound)
	}
	log := m.log.String()
	for _, want := range []string{"request passed its bound", "providers/fake.(*Provider).Create"} {
		if !strings.Contains(log, want) {
			t.Errorf("the daemon's log lacks %q", want)
		}
	}
	if _, err := os.ReadFile(filepath.Join(m.mnt, "ctl")); err != nil {
		t.Errorf("the root ctl after the stuck request: %v", err)
	}
}
