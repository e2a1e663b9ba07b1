package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ratelimit"
	"github.com/switchyard-dev/switchyard/ratelimit/ratelimittest"
)

func TestMemory(t *testing.T) {
	ratelimittest.RunClocked(t, func(t *testing.T, now func() time.Time) ratelimit.Limiter {
		m := ratelimit.NewMemory(ratelimit.MemoryConfig{Now: now})
		t.Cleanup(func() { m.Close() })
		return m
	})
}

// The same arithmetic as redis_rate's script, step by step, on a clock that
// only moves when told: 10/s (100 ms each) with a burst of 3.
func TestMemoryGCRASteps(t *testing.T) {
	clock := newFakeClock()
	m := ratelimit.NewMemory(ratelimit.MemoryConfig{Now: clock.Now})
	defer m.Close()
	l := ratelimit.Limit{Rate: 10, Period: time.Second, Burst: 3}
	ms := time.Millisecond
	steps := []struct {
		advance    time.Duration
		allowed    bool
		remaining  int
		retryAfter time.Duration
		resetAfter time.Duration
	}{
		{0, true, 2, 0, 100 * ms},
		{0, true, 1, 0, 200 * ms},
		{0, true, 0, 0, 300 * ms},
		{0, false, 0, 100 * ms, 300 * ms},
		{50 * ms, false, 0, 50 * ms, 250 * ms}, // a denial costs nothing
		{50 * ms, true, 0, 0, 300 * ms},
		{250 * ms, true, 1, 0, 150 * ms},
		{650 * ms, true, 2, 0, 100 * ms}, // full again: starts afresh
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		got, err := m.Allow(context.Background(), "k", l)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := ratelimit.Result{Allowed: s.allowed, Limit: l, Remaining: s.remaining, RetryAfter: s.retryAfter, ResetAfter: s.resetAfter}
		if got != want {
			t.Errorf("step %d (+%v):\n got %+v\nwant %+v", i, s.advance, got, want)
		}
	}
}

// A clock that steps back (a fake one, or a caller that read it before
// another) must not make a denied caller wait longer than one interval.
func TestMemoryClockNeverRunsBackwards(t *testing.T) {
	clock := newFakeClock()
	m := ratelimit.NewMemory(ratelimit.MemoryConfig{Now: clock.Now})
	defer m.Close()
	l := ratelimit.Limit{Rate: 10, Period: time.Second, Burst: 1}
	clock.Advance(time.Second)
	if res, _ := m.Allow(context.Background(), "k", l); !res.Allowed {
		t.Fatalf("first event denied: %+v", res)
	}
	clock.Advance(-500 * time.Millisecond)
	res, _ := m.Allow(context.Background(), "k", l)
	if res.Allowed || res.RetryAfter != 100*time.Millisecond {
		t.Fatalf("after the clock stepped back: %+v, want denied with RetryAfter 100ms", res)
	}
}

func TestMemoryCloseStopsJanitor(t *testing.T) {
	m := ratelimit.NewMemory(ratelimit.MemoryConfig{SweepInterval: time.Millisecond})
	if _, err := m.Allow(context.Background(), "k", ratelimit.PerMinute(1)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		m.Close()
		m.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if n := m.Len(); n != 0 {
		t.Errorf("Len after Close = %d, want 0", n)
	}
	// goleak in TestMain fails the package if the janitor survived Close.
}

func TestMemoryInFlight(t *testing.T) {
	ratelimittest.RunInFlight(t, func(t *testing.T) ratelimit.InFlight { return ratelimit.NewMemoryInFlight() })
}

func TestMemoryQuota(t *testing.T) {
	ratelimittest.RunQuota(t, func(t *testing.T) ratelimit.Quota { return ratelimit.NewMemoryQuota() })
}
