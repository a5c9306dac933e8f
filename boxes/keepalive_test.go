package boxes_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// idleEnder is a provider whose boxes are ended when they look idle, as
// Daytona's are: they count the KeepAlive calls they get.
type idleEnder struct {
	*fake.Provider
	kept *atomic.Int32
}

type idleBox struct {
	providers.Box
	kept *atomic.Int32
}

func (b idleBox) KeepAlive(context.Context) error { b.kept.Add(1); return nil }

func (p idleEnder) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	b, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return idleBox{b, p.kept}, nil
}

// A box in use through the mount tells a provider that ends idle boxes
// that it is in use, once per keep-alive interval however much it is
// used, and never while it is not used.
func TestKeepAliveWhileInUse(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	kept := &atomic.Int32{}
	p := idleEnder{fake.New(), kept}
	m, err := boxes.New(boxes.Options{
		StateDir:        t.TempDir(),
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return p, nil },
		Now:             clock,
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, m.Create(ctx, "b", "", providers.Spec{}))
	b := m.Lookup("b")
	use := func() { require.NoError(t, b.Do(ctx, false, 0, func(context.Context) error { return nil })) }
	wait := func(want int32) {
		t.Helper()
		require.Eventually(t, func() bool { return kept.Load() == want }, 10*time.Second, 5*time.Millisecond, "keep-alives: %d, want %d", kept.Load(), want)
	}

	use()
	use()
	wait(1)
	advance(4 * time.Minute)
	use()
	advance(2 * time.Minute) // 6 minutes since the first
	use()
	use()
	wait(2)
	advance(time.Hour) // idle: nothing is said
	require.Equal(t, int32(2), kept.Load())
	use()
	wait(3)
}
