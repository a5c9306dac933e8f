package daytona_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/daytona"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
	"github.com/boxfs/boxfs/providers/providertest"
	"github.com/stretchr/testify/assert"
)

// harness is the conformance harness for a provider on the fake srv. Every
// box gets the run's own workspace: the fake's sandboxes share this
// machine's file system.
func harness(t *testing.T, srv *daytonatest.Server) providertest.Harness {
	open := func(t *testing.T) providers.Provider {
		p, err := daytona.New(providers.Config{Options: map[string]string{"api_url": srv.APIURL(), "api_key": srv.APIKey()}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return providertest.Harness{
		Provider:    open(t),
		Reopen:      open,
		Spec:        providers.Spec{Workspace: t.TempDir()},
		Unsupported: []string{"image", "cpus", "memoryMb", "gpu", "isolation", "ports", "mounts", "user", "capabilities"},
		Refused: map[string]providers.Spec{
			"lifetime=90s":           {Lifetime: 90 * time.Second},
			"network=allowlist/cidr": {Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"10.0.0.0/8"}}},
		},
		StagedStdin:   true,
		Lifetime:      time.Minute,
		LifetimeSlack: 30 * time.Second,
		LargeOutput:   8 << 20, // every 64 KiB of output costs the box two processes (see Exec)
	}
}

// TestConformance runs the suite against the fake twice, side by side
// (each waits out a box's lifetime of a minute): as the fake is, and with
// latency on every request and every seventh request failing: 429 with
// Retry-After, 502 before the request is handled, and 503 after it was
// (-short skips that one). Every call the provider made, and every answer
// of the fake, must be in the vendor's spec.
func TestConformance(t *testing.T) {
	var wg sync.WaitGroup
	side := func(name string, f func(*testing.T)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, f)
		}()
	}
	side("plain", func(t *testing.T) {
		conformance(t, daytonatest.Options{CreatingPolls: 2, ListDelay: 300 * time.Millisecond}, nil)
	})
	if !testing.Short() {
		side("faults", func(t *testing.T) {
			conformance(t, daytonatest.Options{CreatingPolls: 3, ListDelay: 500 * time.Millisecond, Latency: 5 * time.Millisecond}, faults())
		})
	}
	wg.Wait()
}

// faults fails every seventh request, in turn with 429 (Retry-After: 1),
// 502 before the request is handled, and 503 after it was.
func faults() daytonatest.FaultFunc {
	var k atomic.Int64
	return func(r *http.Request, n int) daytonatest.Fault {
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
	}
}

func conformance(t *testing.T, opts daytonatest.Options, f daytonatest.FaultFunc) {
	srv := daytonatest.New(opts)
	t.Cleanup(srv.Close)
	srv.SetFault(f)
	providertest.Run(t, harness(t, srv))
	srv.SetFault(nil)
	answers := map[int]int{}
	for _, r := range srv.Requests() {
		answers[r.Status]++
	}
	t.Logf("%d requests, answered: %v", len(srv.Requests()), answers)
	assert.Empty(t, srv.SandboxIDs(), "sandboxes left on the fake")
	for _, err := range srv.SpecErrors() {
		t.Errorf("spec: %v", err)
	}
}
