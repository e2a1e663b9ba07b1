package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The janitor drops exactly the keys whose bucket is full again, on its own.
func TestMemoryJanitorDropsFullBuckets(t *testing.T) {
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	swept := make(chan struct{})
	m := newMemory(MemoryConfig{SweepInterval: time.Millisecond, Now: clock.Now}, func() { swept <- struct{}{} })
	defer func() {
		// The hook blocks the janitor until received; drain it while closing.
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-swept:
				case <-stop:
					return
				}
			}
		}()
		m.Close()
		close(stop)
	}()
	// A sweep that began after every step before it: the first signal may
	// come from a sweep already under way, the second cannot.
	sweepNow := func() { <-swept; <-swept }

	ctx := context.Background()
	short := Limit{Rate: 10, Period: time.Second, Burst: 10} // one event: full after 100 ms
	long := PerMinute(1)                                     // one event: full after 1 min
	for i := range 5 {
		if _, err := m.Allow(ctx, fmt.Sprint("short", i), short); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Allow(ctx, "long", long); err != nil {
		t.Fatal(err)
	}
	sweepNow()
	if n := m.Len(); n != 6 {
		t.Fatalf("Len before any bucket refilled = %d, want 6", n)
	}
	clock.Advance(100 * time.Millisecond)
	sweepNow()
	if n := m.Len(); n != 1 {
		t.Fatalf("Len after the short buckets refilled = %d, want 1 (the long one)", n)
	}
	// The dropped keys start from a full bucket, as they would have anyway.
	if res, _ := m.Allow(ctx, "short0", short); res.Remaining != short.Burst-1 {
		t.Errorf("dropped key: Remaining = %d, want %d", res.Remaining, short.Burst-1)
	}
	clock.Advance(time.Minute)
	sweepNow()
	if n := m.Len(); n != 0 {
		t.Fatalf("Len after every bucket refilled = %d, want 0", n)
	}
}

// After a spike of keys drains, the map is rebuilt so its memory follows.
func TestMemorySweepShrinksMap(t *testing.T) {
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	m := newMemory(MemoryConfig{SweepInterval: time.Hour, Now: clock.Now}, nil)
	defer m.Close()
	ctx := context.Background()
	l := PerSecond(1)
	for i := range 4 * shrinkFloor {
		if _, err := m.Allow(ctx, fmt.Sprint("k", i), l); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	before := m.buckets
	peak := m.peak
	m.mu.Unlock()
	if peak != 4*shrinkFloor {
		t.Fatalf("peak = %d, want %d", peak, 4*shrinkFloor)
	}

	clock.Advance(time.Second)
	if _, err := m.Allow(ctx, "survivor", l); err != nil {
		t.Fatal(err)
	}
	m.sweep()

	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.buckets) != 1 || m.buckets["survivor"] == nil {
		t.Fatalf("after sweep: %d keys, want only the survivor", len(m.buckets))
	}
	if m.peak != 1 {
		t.Errorf("peak after rebuild = %d, want 1", m.peak)
	}
	if fmt.Sprintf("%p", m.buckets) == fmt.Sprintf("%p", before) {
		t.Errorf("map was not rebuilt after draining from %d keys to 1", peak)
	}
}

// Allow runs on every API request: on a known key it must not allocate.
func TestMemoryAllowDoesNotAllocateForKnownKey(t *testing.T) {
	m := NewMemory(MemoryConfig{})
	defer m.Close()
	ctx := context.Background()
	l := PerMinute(100)
	m.Allow(ctx, "k", l)
	if n := testing.AllocsPerRun(100, func() { m.Allow(ctx, "k", l) }); n != 0 {
		t.Errorf("Allow on a known key allocates %v times, want 0", n)
	}
}
