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

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

// waits records what a provider's calls wait between attempts, without
// waiting.
type waits struct {
	mu sync.Mutex
	ds []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.ds = append(w.ds, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.ds...)
}

// openThrottled opens the provider on a fake that throttles its first
// calls, asking for delay, with the waits between attempts recorded.
func openThrottled(t *testing.T, calls int, delay time.Duration) (*Provider, *modaltest.Server, *waits) {
	srv, err := modaltest.New(modaltest.Options{ThrottledCalls: calls, ThrottleDelay: delay})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	p, err := New(providers.Config{Options: map[string]string{"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	w := &waits{}
	p.c.sleep = w.sleep
	return p, srv, w
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

// TestThrottled: a throttled Modal asks boxfs to come back later; boxfs
// waits as long as asked, each time, and the create succeeds.
func TestThrottled(t *testing.T) {
	p, srv, w := openThrottled(t, 2, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { b.Destroy(context.Background()) })
	assert.Equal(t, []time.Duration{3 * time.Second, 3 * time.Second}, w.all(), "waits between attempts")
	assert.Equal(t, 2, throttledAnswers(srv))
}

// TestThrottledTooLong: a delay longer than boxfs waits for a call (its
// throttle budget, or what is left of the caller's deadline) is not waited
// out: the create fails at once with Unavailable, a condition that passes.
func TestThrottledTooLong(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delay    time.Duration
		deadline time.Duration
	}{
		{"delay=10m", 10 * time.Minute, 2 * time.Minute},
		{"delay=30s/deadline=10s", 30 * time.Second, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, srv, w := openThrottled(t, 1, tc.delay)
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			_, err := p.Create(ctx, providers.Spec{Workspace: t.TempDir()})
			assert.True(t, providers.IsCode(err, providers.Unavailable), "a create throttled for %v: %v", tc.delay, err)
			assert.Empty(t, w.all(), "waits between attempts")
			assert.Equal(t, 1, throttledAnswers(srv))
			assert.Empty(t, srv.SandboxIDs())
		})
	}
}
