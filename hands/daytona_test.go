package hands_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/daytona"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
)

// newDaytonaBox makes a Daytona box on an in-process fake of Daytona's API
// (whose sandboxes run their commands on this machine), its workspace a
// fresh directory. With faults, every seventh request fails (429 with
// Retry-After, 502, or 503 after it was handled) and each is delayed.
func newDaytonaBox(t *testing.T, faults bool) (providers.Box, *daytonatest.Server) {
	t.Helper()
	opts := daytonatest.Options{CreatingPolls: 1, ListDelay: 200 * time.Millisecond}
	if faults {
		opts.Latency = 3 * time.Millisecond
	}
	srv := daytonatest.New(opts)
	t.Cleanup(srv.Close)
	p, err := daytona.New(providers.Config{Options: map[string]string{"api_url": srv.APIURL(), "api_key": srv.APIKey()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	box, err := p.Create(ctx, providers.Spec{Lifetime: 30 * time.Minute, Workspace: t.TempDir(), Labels: map[string]string{"boxfs-test": "hands"}})
	if err != nil {
		t.Fatalf("daytona Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		box.Destroy(ctx)
	})
	if faults {
		var k atomic.Int64
		srv.SetFault(func(r *http.Request, n int) daytonatest.Fault {
			if n%7 != 0 {
				return daytonatest.Fault{}
			}
			switch k.Add(1) % 3 {
			case 0:
				return daytonatest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "1"}
			case 1:
				return daytonatest.Fault{Status: http.StatusBadGateway}
			}
			return daytonatest.Fault{Status: http.StatusServiceUnavailable, After: true}
		})
		t.Cleanup(func() { srv.SetFault(nil) })
	}
	return box, srv
}

// daytonaKnown are the steps where a Daytona box differs from the os
// package, with the reason.
var daytonaKnown = map[string]string{}

// TestDaytona runs the conformance table and the hostile names through a
// Daytona box on the fake: hands takes the native-ops path (the toolbox's
// file calls where they settle an answer, the scripts for the rest). Many
// operations still run a command in the box, so the hostile rows take the
// core names, and under -short only the conformance table without faults
// runs.
func TestDaytona(t *testing.T) {
	for _, faults := range []bool{false, true} {
		name := "faults=off"
		if faults {
			name = "faults=on"
		}
		t.Run(name, func(t *testing.T) {
			if faults && testing.Short() {
				t.Skip("-short: the fault rows are long")
			}
			for _, tc := range []struct {
				name string
				run  func(*testing.T, row)
			}{
				{"conformance", runConformance},
				{"hostile", func(t *testing.T, rw row) {
					if testing.Short() {
						t.Skip("-short: a command in the box per operation")
					}
					runHostile(t, rw, hostileCore)
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					box, srv := newDaytonaBox(t, faults)
					h, root := openOn(t, box, "", hands.Options{})
					if h.Via() != hands.ViaNativeOps {
						t.Fatalf("hands chose %q for a Daytona box, want %q", h.Via(), hands.ViaNativeOps)
					}
					known := daytonaKnown
					if tc.name == "hostile" {
						known = nil
					}
					tc.run(t, row{name: "daytona", files: h, walker: h, root: root, partial: true, known: known})
					logCalls(t, srv)
					for _, dir := range []string{"/", h.Facts().Workspace, root} {
						if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
							t.Errorf("a name ran as a command in the box: %s/pwned exists", dir)
						}
					}
				})
			}
		})
	}
}

// logCalls logs how many of each toolbox call the row made, and how many
// were answered with a failure: what went native and what ran a command.
func logCalls(t *testing.T, srv *daytonatest.Server) {
	calls := map[string]int{}
	failed := map[int]int{}
	for _, r := range srv.Requests() {
		_, rest, ok := strings.Cut(strings.TrimPrefix(r.Path, "/toolbox/"), "/")
		if !ok || !strings.HasPrefix(r.Path, "/toolbox/") {
			rest = strings.TrimPrefix(r.Path, "/api/")
		}
		parts := strings.Split(rest, "/")
		for i := 1; i < len(parts); i++ {
			if parts[i-1] == "session" || parts[i-1] == "command" {
				parts[i] = "{id}"
			}
		}
		rest = strings.Join(parts, "/")
		calls[r.Method+" "+rest]++
		if r.Status >= 400 {
			failed[r.Status]++
		}
	}
	keys := make([]string, 0, len(calls))
	for k := range calls {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %5d %s", calls[k], k)
	}
	t.Logf("calls to the fake (answers >= 400: %v):%s", failed, b.String())
}

// TestDaytonaCrossDevice: a rename from the workspace to /dev/shm is EXDEV
// through a Daytona box too: the toolbox's move would copy, so hands' script
// answers.
func TestDaytonaCrossDevice(t *testing.T) {
	var shm, tmp syscall.Stat_t
	if err := syscall.Stat("/dev/shm", &shm); err != nil || syscall.Stat(t.TempDir(), &tmp) != nil || shm.Dev == tmp.Dev {
		t.Skipf("/dev/shm is not a file system of its own here (%v)", err)
	}
	box, _ := newDaytonaBox(t, false)
	h, root := openOn(t, box, "", hands.Options{})
	ctx := context.Background()
	if err := h.WriteFile(ctx, root+"/f", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := "/dev/shm/.boxfs-xdev-daytona-" + box.ID()
	if errno, _ := providers.ErrnoOf(h.Rename(ctx, root+"/f", other)); errno != syscall.EXDEV {
		t.Errorf("rename across file systems: errno %v, want EXDEV", errno)
	}
	if _, err := h.Lstat(ctx, other); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("something landed at %s: %v", other, err)
		h.Remove(ctx, other)
	}
	if _, err := h.Stat(ctx, root+"/f"); err != nil {
		t.Errorf("the source is gone: %v", err)
	}
}
