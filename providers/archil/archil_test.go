package archil_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/archil"
	"github.com/boxfs/boxfs/providers/archil/archiltest"
	"github.com/boxfs/boxfs/providers/providertest"
)

// open opens a provider on the fake srv's disk named "work", made on
// first use, with extra options.
func open(t *testing.T, srv *archiltest.Server, extra map[string]string) *archil.Provider {
	t.Helper()
	o := map[string]string{"api_url": srv.URL(), "s3_url": srv.URL(), "api_key": srv.APIKey(), "disk": "work", "create_disk": "true"}
	for k, v := range extra {
		o[k] = v
	}
	p, err := archil.New(providers.Config{Options: o})
	require.NoError(t, err)
	return p
}

func harness(t *testing.T, srv *archiltest.Server) providertest.Harness {
	return providertest.Harness{
		Provider:    open(t, srv, nil),
		Unsupported: []string{"image", "snapshot", "gpu", "network", "ports", "env", "mounts", "workspace", "user", "capabilities"},
		Refused: map[string]providers.Spec{
			"isolation=container": {Isolation: providers.IsolationContainer},
			"cpus=4":              {CPUs: 4},
			"memoryMb=8192":       {MemoryMB: 8192},
			"region=other":        {Region: "aws-eu-west-1"},
		},
		NoStdin:       true,
		OutputAtEnd:   true,
		Serial:        true,
		Lifetime:      3 * time.Second,
		LifetimeSlack: 10 * time.Second,
		LargeOutput:   8 << 20,
	}
}

func TestConformance(t *testing.T) {
	srv := archiltest.New(archiltest.Options{CreatingPolls: 2, SharedMode: true})
	t.Cleanup(srv.Close)
	providertest.Run(t, harness(t, srv))
	assertNoBoxesLeft(t, srv)
}

// TestConformanceFaults runs the suite with latency on every request, a
// queue before every command, and every seventh request failing: 429, 502
// before the request is handled, and 503 after it was.
func TestConformanceFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite with faults is long; -short skips it")
	}
	srv := archiltest.New(archiltest.Options{CreatingPolls: 3, Latency: 2 * time.Millisecond, QueueLatency: 20 * time.Millisecond, SharedMode: true})
	t.Cleanup(srv.Close)
	var k atomic.Int64
	srv.SetFault(func(r *http.Request, n int) archiltest.Fault {
		if n%7 != 0 {
			return archiltest.Fault{}
		}
		switch k.Add(1) % 3 {
		case 0:
			return archiltest.Fault{Status: http.StatusTooManyRequests}
		case 1:
			return archiltest.Fault{Status: http.StatusBadGateway}
		}
		return archiltest.Fault{Status: http.StatusServiceUnavailable, After: true}
	})
	providertest.Run(t, harness(t, srv))
	srv.SetFault(nil)
	answers := map[int]int{}
	for _, r := range srv.Requests() {
		answers[r.Status]++
	}
	t.Logf("%d requests, answered: %v", len(srv.Requests()), answers)
	assertNoBoxesLeft(t, srv)
}

// assertNoBoxesLeft checks that the work disk holds no box's directory
// or record after the suite destroyed its boxes.
func assertNoBoxesLeft(t *testing.T, srv *archiltest.Server) {
	t.Helper()
	ids := srv.DiskIDs()
	require.Len(t, ids, 1, "the suite's provider makes one work disk")
	for _, d := range []string{"boxes", "boxes.records", "boxes.cmds"} {
		ents, _ := readDir(srv.DiskDir(ids[0]) + "/" + d)
		assert.Empty(t, ents, "left in %s", d)
	}
}
