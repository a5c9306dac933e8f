package modal

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// fakeClock stands in for the clock and the waits of a provider's calls:
// a wait returns at once and moves the clock on by what was asked.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
	ds []time.Duration
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.ds = append(c.ds, d)
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.ds...)
}

// openThrottled opens the provider on a fake that throttles its first
// calls, asking for delay, with a fake clock. The clock starts at the real
// time, so a real context deadline is judged against it.
func openThrottled(t *testing.T, calls int, delay time.Duration) (*Provider, *modaltest.Server, *fakeClock) {
	srv, err := modaltest.New(modaltest.Options{ThrottledCalls: calls, ThrottleDelay: delay})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	p, err := New(providers.Config{Options: map[string]string{"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	clk := &fakeClock{t: time.Now()}
	p.c.sleep, p.c.now = clk.sleep, clk.now
	return p, srv, clk
}

func throttledAnswers(srv *modaltest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if r.Code == codes.ResourceExhausted {
			n++
		}
	}
	return n
}

// TestServerDelay: the delay is read from Modal's RPCRetryPolicy detail,
// whatever the status code, and is at least minServerDelay, as Modal's Go
// client reads it; no detail, no delay.
func TestServerDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		code  codes.Code
		secs  float32
		want  time.Duration
		ok    bool
		plain bool // no detail at all
	}{
		{name: "code=ResourceExhausted/secs=1.5", code: codes.ResourceExhausted, secs: 1.5, want: 1500 * time.Millisecond, ok: true},
		{name: "code=Unavailable/secs=3", code: codes.Unavailable, secs: 3, want: 3 * time.Second, ok: true},
		{name: "code=ResourceExhausted/secs=0", code: codes.ResourceExhausted, secs: 0, want: minServerDelay, ok: true},
		{name: "code=ResourceExhausted/no-detail", code: codes.ResourceExhausted, plain: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.New(tc.code, "throttled")
			if !tc.plain {
				var err error
				st, err = st.WithDetails(&pb.RPCRetryPolicy{RetryAfterSecs: tc.secs})
				require.NoError(t, err)
			}
			d, ok := serverDelay(st.Err())
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, d)
		})
	}
}

// TestThrottled: a throttled Modal asks boxfs to come back later; boxfs
// waits as long as asked, each time, counts the throttled attempts in the
// headers Modal's Go client sends, and the create succeeds.
func TestThrottled(t *testing.T) {
	p, srv, clk := openThrottled(t, 2, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { b.Destroy(context.Background()) })
	assert.Equal(t, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond}, clk.waits(), "waits between attempts")
	assert.Equal(t, 2, throttledAnswers(srv))

	// The first call was throttled twice and then answered, under one
	// idempotency key, with the throttled attempts counted apart from
	// retries.
	reqs := srv.Requests()
	i := 0
	for i < len(reqs) && reqs[i].Code != codes.ResourceExhausted {
		i++
	}
	require.Less(t, i+2, len(reqs))
	first := reqs[i : i+3]
	for n, r := range first {
		assert.Equal(t, first[0].Method, r.Method)
		assert.Equal(t, first[0].MD.Get("x-idempotency-key"), r.MD.Get("x-idempotency-key"), "attempt %d", n)
		assert.Equal(t, []string{"0"}, r.MD.Get("x-retry-attempt"), "attempt %d", n)
		assert.Equal(t, []string{[]string{"0", "1", "2"}[n]}, r.MD.Get("x-throttle-retry-attempt"), "attempt %d", n)
	}
	assert.Equal(t, codes.OK, first[2].Code)
	assert.Empty(t, first[0].MD.Get("x-throttle-retry-delay"))
	assert.Equal(t, []string{"1.500"}, first[1].MD.Get("x-throttle-retry-delay"))
	assert.Equal(t, []string{"3.000"}, first[2].MD.Get("x-throttle-retry-delay"))
}

// TestThrottledTooLong: boxfs waits as Modal asks only while the call stays
// within the caller's deadline and the profile's maxThrottleWait
// (MODAL_MAX_THROTTLE_WAIT, default throttleBudget, measured from the
// call's start as Modal's Go client measures it). A wait past either is
// not begun: the create fails then, Unavailable, a condition that passes.
func TestThrottledTooLong(t *testing.T) {
	for _, tc := range []struct {
		name     string
		calls    int
		delay    time.Duration
		deadline time.Duration
		maxWait  string // MODAL_MAX_THROTTLE_WAIT
		waits    []time.Duration
	}{
		{name: "delay=10m", calls: 1, delay: 10 * time.Minute, deadline: 20 * time.Minute},
		{name: "delay=30s/deadline=10s", calls: 1, delay: 30 * time.Second, deadline: 10 * time.Second},
		{name: "delay=3s/deadline=10s", calls: 5, delay: 3 * time.Second, deadline: 10 * time.Second,
			waits: []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second}},
		{name: "delay=2s/max=5", calls: 5, delay: 2 * time.Second, deadline: time.Minute, maxWait: "5",
			waits: []time.Duration{2 * time.Second, 2 * time.Second}},
		{name: "delay=1s/max=0", calls: 1, delay: time.Second, deadline: time.Minute, maxWait: "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.maxWait != "" {
				t.Setenv("MODAL_MAX_THROTTLE_WAIT", tc.maxWait)
			}
			p, srv, clk := openThrottled(t, tc.calls, tc.delay)
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			_, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
			assert.True(t, providers.IsCode(err, providers.Unavailable), "a create throttled for %v: %v", tc.delay, err)
			assert.Equal(t, tc.waits, clk.waits(), "waits between attempts")
			assert.Equal(t, len(tc.waits)+1, throttledAnswers(srv))
			assert.Empty(t, srv.SandboxIDs())
		})
	}
}

// TestMaxThrottleWait: MODAL_MAX_THROTTLE_WAIT is read as Modal's Go client
// reads it, whole seconds; a value that is not is refused.
func TestMaxThrottleWait(t *testing.T) {
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	opts := map[string]string{"token_id": "ak-1", "token_secret": "as-1"}
	for v, want := range map[string]time.Duration{"": throttleBudget, "0": 0, "90": 90 * time.Second} {
		t.Setenv("MODAL_MAX_THROTTLE_WAIT", v)
		prof, err := resolveProfile("test", opts)
		require.NoError(t, err, v)
		assert.Equal(t, want, prof.maxThrottleWait, "MODAL_MAX_THROTTLE_WAIT=%q", v)
	}
	for _, v := range []string{"-1", "1.5", "soon"} {
		t.Setenv("MODAL_MAX_THROTTLE_WAIT", v)
		_, err := resolveProfile("test", opts)
		assert.True(t, providers.IsCode(err, providers.Invalid), "MODAL_MAX_THROTTLE_WAIT=%q: %v", v, err)
	}
}
