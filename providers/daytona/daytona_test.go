package daytona_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/daytona"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
	"github.com/boxfs/boxfs/providers/providertest"
)

// harness is the conformance harness for a provider on the fake srv. Every
// box gets the run's own workspace: the fake's sandboxes share this
// machine's file system.
func harness(t *testing.T, srv *daytonatest.Server) providertest.Harness {
	p, err := daytona.New(providers.Config{Options: map[string]string{"api_url": srv.APIURL(), "api_key": srv.APIKey()}})
	if err != nil {
		t.Fatal(err)
	}
	return providertest.Harness{
		Provider:    p,
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

func TestConformance(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{CreatingPolls: 2, ListDelay: 300 * time.Millisecond})
	t.Cleanup(srv.Close)
	providertest.Run(t, harness(t, srv))
	if ids := srv.SandboxIDs(); len(ids) > 0 {
		t.Errorf("sandboxes left on the fake: %v", ids)
	}
}

// TestConformanceFaults runs the suite with latency on every request and
// every seventh request failing: 429 with Retry-After, 502 before the
// request is handled, and 503 after it was.
func TestConformanceFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite with faults is long; -short skips it")
	}
	srv := daytonatest.New(daytonatest.Options{CreatingPolls: 3, ListDelay: 500 * time.Millisecond, Latency: 5 * time.Millisecond})
	t.Cleanup(srv.Close)
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
	providertest.Run(t, harness(t, srv))
	srv.SetFault(nil)
	answers := map[int]int{}
	for _, r := range srv.Requests() {
		answers[r.Status]++
	}
	t.Logf("%d requests, answered: %v", len(srv.Requests()), answers)
	if ids := srv.SandboxIDs(); len(ids) > 0 {
		t.Errorf("sandboxes left on the fake: %v", ids)
	}
}
