package fake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestClockTimers(t *testing.T) {
	tests := []struct {
		name     string
		after    time.Duration
		advances []time.Duration
		want     bool
	}{
		{"not yet", time.Minute, []time.Duration{59 * time.Second}, false},
		{"exactly", time.Minute, []time.Duration{time.Minute}, true},
		{"in steps", time.Minute, []time.Duration{30 * time.Second, 30 * time.Second}, true},
		{"past", time.Minute, []time.Duration{time.Hour}, true},
		{"zero fires at once", 0, nil, true},
		{"negative fires at once", -time.Second, nil, true},
		{"no advance", time.Nanosecond, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClock(t0)
			ch := c.After(tt.after)
			var sum time.Duration
			for _, d := range tt.advances {
				c.Advance(d)
				sum += d
			}
			if got := fired(ch); got != tt.want {
				t.Errorf("fired = %v, want %v", got, tt.want)
			}
			if got := c.Now(); !got.Equal(t0.Add(sum)) {
				t.Errorf("Now = %v, want %v", got, t0.Add(sum))
			}
		})
	}
}

func TestClockStopOrderAndAfterFunc(t *testing.T) {
	c := fake.NewClock(t0)
	a, b := c.NewTimer(2*time.Second), c.NewTimer(time.Second)
	if c.Pending() != 2 {
		t.Fatalf("Pending = %d, want 2", c.Pending())
	}
	if !a.Stop() || a.Stop() {
		t.Fatal("Stop should report true once, then false")
	}
	ran := make(chan time.Time, 1)
	c.AfterFunc(time.Second, func() { ran <- c.Now() })
	c.Advance(5 * time.Second)
	if fired(a.C) {
		t.Error("a stopped timer fired")
	}
	if got := <-b.C; !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("timer got %v, want the clock's time after Advance", got)
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
	if b.Stop() {
		t.Error("Stop after firing reported true")
	}
	if c.Pending() != 0 {
		t.Errorf("Pending = %d after all fired", c.Pending())
	}
}

func TestClockSleep(t *testing.T) {
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want providers.Code
	}{
		{"advanced", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, 0},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, providers.Aborted},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, providers.Timeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClock(t0)
			ctx, cancel := tt.ctx()
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- c.Sleep(ctx, "test.Sleep", time.Hour) }()
			if tt.want == 0 {
				if err := c.BlockUntil(ctx, 1); err != nil {
					t.Fatal(err)
				}
				c.Advance(time.Hour)
			}
			err := <-errc
			if got := providers.CodeOf(err); got != tt.want {
				t.Errorf("Sleep = %v (code %v), want code %v", err, got, tt.want)
			}
			if tt.want == providers.Aborted && !errors.Is(err, context.Canceled) {
				t.Errorf("Sleep = %v, want context.Canceled in its chain", err)
			}
		})
	}
}

func TestRealClockFollowsWallClockAndAdvances(t *testing.T) {
	c := fake.RealClock()
	if d := time.Since(c.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("RealClock is %v off the wall clock", d)
	}
	long := c.After(time.Hour)
	short := c.After(time.Millisecond)
	select {
	case <-short:
	case <-time.After(10 * time.Second):
		t.Fatal("a 1ms timer on the running clock did not fire by wall time")
	}
	c.Advance(time.Hour)
	select {
	case <-long:
	case <-time.After(10 * time.Second):
		t.Fatal("Advance(1h) did not fire the 1h timer")
	}
	if d := c.Now().Sub(time.Now()); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("after Advance(1h) the clock is %v ahead, want about an hour", d)
	}
}

func TestClockWithTimeout(t *testing.T) {
	clk := fake.NewClock(t0)
	_, b := newBox(t, providers.Spec{}, fake.WithClock(clk))
	pending := clk.Pending()
	ctx, cancel := clk.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr, err := b.Exec(ctx, argv("sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := clk.BlockUntil(context.Background(), pending+1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(29 * time.Second)
	select {
	case <-ctx.Done():
		t.Fatal("ctx ended before its time on the fake clock")
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Second)
	if _, err := pr.Wait(); !providers.IsCode(err, providers.Timeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want Timeout", err)
	}

	// cancel and the parent end it too, as Canceled.
	ctx2, cancel2 := clk.WithTimeout(context.Background(), time.Hour)
	cancel2()
	<-ctx2.Done()
	parent, cancelParent := context.WithCancel(context.Background())
	ctx3, cancel3 := clk.WithTimeout(parent, time.Hour)
	defer cancel3()
	cancelParent()
	<-ctx3.Done()
	if !errors.Is(ctx2.Err(), context.Canceled) || !errors.Is(ctx3.Err(), context.Canceled) {
		t.Errorf("Err = %v and %v, want Canceled", ctx2.Err(), ctx3.Err())
	}
}
