// Package ratelimittest is the behavioural suite every ratelimit.Limiter
// must pass. Each implementation's tests call Run with a factory, so Memory
// and Redis are held to one contract.
package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ratelimit"
)

// Run runs the suite. newLimiter must return a limiter with no state for any
// key the suite uses, and arrange (with t.Cleanup) to release whatever it
// made; the suite may Close the limiter itself first, so Close must be
// idempotent. Subtests run in parallel, each with its own limiter.
//
// Limits that must not refill mid-test use an interval of seconds. The
// refill test uses 5/s and waits out the RetryAfter and ResetAfter that the
// limiter itself returned, in real time: Run is for a limiter on a clock the
// test cannot hold (Redis TIME), and a run held up between calls (a loaded
// machine) proves nothing either way, so that test is tried again on a
// fresh key. A limiter whose clock can be injected runs RunClocked instead.
func Run(t *testing.T, newLimiter func(t *testing.T) ratelimit.Limiter) {
	run(t, func(t *testing.T) (ratelimit.Limiter, *Clock) { return newLimiter(t), nil })
}

// RunClocked runs the suite on a limiter that reads the clock newLimiter is
// given: a Clock of the subtest's, which moves only when the suite waits,
// so the refill test is exact and runs once however slow the machine.
func RunClocked(t *testing.T, newLimiter func(t *testing.T, now func() time.Time) ratelimit.Limiter) {
	run(t, func(t *testing.T) (ratelimit.Limiter, *Clock) {
		c := NewClock()
		return newLimiter(t, c.Now), c
	})
}

func run(t *testing.T, newLimiter func(t *testing.T) (ratelimit.Limiter, *Clock)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, lim ratelimit.Limiter, clock *Clock)
	}{
		{"BurstThenDenied", unclocked(testBurstThenDenied)},
		{"BurstDefaultsToRate", unclocked(testBurstDefaultsToRate)},
		{"RefillsAfterRetryAfter", testRefills},
		{"KeysIndependent", unclocked(testKeysIndependent)},
		{"ZeroLimitAlwaysAllowed", unclocked(testZeroLimit)},
		{"InvalidLimit", unclocked(testInvalidLimit)},
		{"ConcurrentAdmitsExactlyBurst", unclocked(testConcurrent)},
		{"Close", unclocked(testClose)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim, clock := newLimiter(t)
			tt.fn(t, lim, clock)
		})
	}
}

func unclocked(fn func(t *testing.T, lim ratelimit.Limiter)) func(*testing.T, ratelimit.Limiter, *Clock) {
	return func(t *testing.T, lim ratelimit.Limiter, _ *Clock) { fn(t, lim) }
}

// Clock is a clock that moves only when told (Advance).
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at a fixed time.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// slow never refills within a test: one event per 6 s.
var slow = ratelimit.Limit{Rate: 10, Period: time.Minute, Burst: 5}

func allow(t *testing.T, lim ratelimit.Limiter, key string, l ratelimit.Limit) ratelimit.Result {
	t.Helper()
	res, err := lim.Allow(context.Background(), key, l)
	if err != nil {
		t.Fatalf("Allow(%q, %+v): %v", key, l, err)
	}
	return res
}

// checkAllowed checks the k-th event (1-based) since the bucket was full,
// when no refill can have happened in between.
func checkAllowed(t *testing.T, res ratelimit.Result, l ratelimit.Limit, k int) {
	t.Helper()
	e := l.Interval()
	if !res.Allowed {
		t.Fatalf("event %d of burst %d denied: %+v", k, l.Burst, res)
	}
	if res.Remaining != l.Burst-k {
		t.Errorf("event %d: Remaining = %d, want %d", k, res.Remaining, l.Burst-k)
	}
	if res.RetryAfter != 0 {
		t.Errorf("event %d: allowed with RetryAfter = %v, want 0", k, res.RetryAfter)
	}
	// k events in the bucket take k intervals to drain, less the time that
	// has passed since the first.
	if res.ResetAfter > time.Duration(k)*e || res.ResetAfter <= time.Duration(k-1)*e {
		t.Errorf("event %d: ResetAfter = %v, want in (%v, %v]", k, res.ResetAfter, time.Duration(k-1)*e, time.Duration(k)*e)
	}
}

func checkDenied(t *testing.T, res ratelimit.Result, l ratelimit.Limit) {
	t.Helper()
	e := l.Interval()
	if res.Allowed {
		t.Fatalf("allowed past the burst of %d: %+v", l.Burst, res)
	}
	if res.Remaining != 0 {
		t.Errorf("denied with Remaining = %d, want 0", res.Remaining)
	}
	if res.RetryAfter <= 0 || res.RetryAfter > e {
		t.Errorf("denied with RetryAfter = %v, want in (0, %v]", res.RetryAfter, e)
	}
	if res.ResetAfter <= 0 || res.ResetAfter > time.Duration(l.Burst)*e {
		t.Errorf("denied with ResetAfter = %v, want in (0, %v]", res.ResetAfter, time.Duration(l.Burst)*e)
	}
}

func testBurstThenDenied(t *testing.T, lim ratelimit.Limiter) {
	for k := 1; k <= slow.Burst; k++ {
		res := allow(t, lim, "burst", slow)
		checkAllowed(t, res, slow, k)
		if res.Limit != slow {
			t.Errorf("Result.Limit = %+v, want %+v", res.Limit, slow)
		}
	}
	for range 3 {
		checkDenied(t, allow(t, lim, "burst", slow), slow)
	}
}

func testBurstDefaultsToRate(t *testing.T, lim ratelimit.Limiter) {
	l := ratelimit.Limit{Rate: 3, Period: time.Minute}
	want := ratelimit.Limit{Rate: 3, Period: time.Minute, Burst: 3}
	for k := 1; k <= 3; k++ {
		res := allow(t, lim, "default-burst", l)
		checkAllowed(t, res, want, k)
		if res.Limit != want {
			t.Errorf("Result.Limit = %+v, want %+v (Burst filled in)", res.Limit, want)
		}
	}
	checkDenied(t, allow(t, lim, "default-burst", l), want)
}

func testRefills(t *testing.T, lim ratelimit.Limiter, clock *Clock) {
	l := ratelimit.Limit{Rate: 5, Period: time.Second, Burst: 2} // 200 ms each
	if clock != nil {
		if _, err := refillScenario(lim, "refill", l, clock.Advance); err != nil {
			t.Fatal(err)
		}
		return
	}
	// In real time, the exact Remaining, and the denial right after a
	// refill, hold only if the process is not held up for a good part of an
	// interval between calls. A run that was proves nothing either way, so
	// it is tried again on a fresh key; a broken limiter fails every try.
	const attempts = 3
	for i := range attempts {
		start := time.Now()
		slept, err := refillScenario(lim, fmt.Sprintf("refill%d", i), l, time.Sleep)
		if err == nil {
			return
		}
		var tf timingFailure
		if !errors.As(err, &tf) || time.Since(start) <= slept+l.Interval()/2 {
			t.Fatal(err)
		}
		t.Logf("attempt %d stalled for more than half an interval, retrying: %v", i+1, err)
	}
	t.Fatalf("all %d attempts stalled for more than half an interval of %v", attempts, l.Interval())
}

// timingFailure is a violation that a stall between calls could explain.
type timingFailure struct{ error }

// refillScenario exhausts key, waits (with wait) out the RetryAfter and then the
// ResetAfter the limiter returned, and checks what each wait bought. It
// returns how long it slept and the first violation.
func refillScenario(lim ratelimit.Limiter, key string, l ratelimit.Limit, wait func(time.Duration)) (slept time.Duration, err error) {
	call := func() (ratelimit.Result, error) { return lim.Allow(context.Background(), key, l) }
	// burst checks that the whole burst fits, counting down.
	burst := func(what string) error {
		for k := 1; k <= l.Burst; k++ {
			res, err := call()
			if err != nil {
				return err
			}
			if !res.Allowed {
				return fmt.Errorf("%s: event %d denied: %+v", what, k, res)
			}
			if res.Remaining != l.Burst-k {
				return timingFailure{fmt.Errorf("%s: event %d: Remaining = %d, want %d", what, k, res.Remaining, l.Burst-k)}
			}
		}
		return nil
	}
	if err := burst("fresh key"); err != nil {
		return slept, err
	}
	denied, err := call()
	if err != nil {
		return slept, err
	}
	if denied.Allowed {
		return slept, timingFailure{fmt.Errorf("past the burst: allowed: %+v", denied)}
	}
	if denied.RetryAfter <= 0 || denied.RetryAfter > l.Interval() {
		return slept, fmt.Errorf("past the burst: RetryAfter = %v, want in (0, %v]", denied.RetryAfter, l.Interval())
	}

	// Denials cost nothing: after the wait the limiter named, exactly one
	// more event fits, however many were denied before.
	if res, err := call(); err != nil || res.Allowed {
		return slept, timingFailure{fmt.Errorf("second denial: got %+v, %v; want denied", res, err)}
	}
	wait(denied.RetryAfter)
	slept += denied.RetryAfter
	res, err := call()
	if err != nil {
		return slept, err
	}
	if !res.Allowed { // more time than asked for can only help
		return slept, fmt.Errorf("after waiting the RetryAfter of %v: denied: %+v", denied.RetryAfter, res)
	}
	if res.Remaining != 0 {
		return slept, timingFailure{fmt.Errorf("first event after RetryAfter: Remaining = %d, want 0", res.Remaining)}
	}
	if next, err := call(); err != nil || next.Allowed {
		return slept, timingFailure{fmt.Errorf("right after the refilled event: got %+v, %v; want denied", next, err)}
	}

	// After ResetAfter the bucket is full again: the whole burst fits.
	wait(res.ResetAfter)
	slept += res.ResetAfter
	return slept, burst("after ResetAfter")
}

func testKeysIndependent(t *testing.T, lim ratelimit.Limiter) {
	for k := 1; k <= slow.Burst; k++ {
		checkAllowed(t, allow(t, lim, "a", slow), slow, k)
	}
	checkDenied(t, allow(t, lim, "a", slow), slow)
	checkAllowed(t, allow(t, lim, "b", slow), slow, 1)
	checkAllowed(t, allow(t, lim, "a:b", slow), slow, 1)
	checkDenied(t, allow(t, lim, "a", slow), slow)
}

func testZeroLimit(t *testing.T, lim ratelimit.Limiter) {
	for _, l := range []ratelimit.Limit{
		{},
		{Rate: 0, Period: time.Second, Burst: 5},
		{Rate: 5, Period: 0},
		{Rate: -1, Period: time.Second},
	} {
		for i := range 50 {
			if res := allow(t, lim, "zero", l); !res.Allowed || res.RetryAfter != 0 {
				t.Fatalf("call %d with zero limit %+v: %+v, want allowed", i, l, res)
			}
		}
	}
	// The zero limit kept no state: a real one starts from a full bucket.
	checkAllowed(t, allow(t, lim, "zero", slow), slow, 1)
}

func testInvalidLimit(t *testing.T, lim ratelimit.Limiter) {
	for _, l := range []ratelimit.Limit{
		{Rate: 10, Period: time.Second, Burst: -1},
		{Rate: 2_000_000_000, Period: time.Second},
		{Rate: 1, Period: 1000 * time.Hour, Burst: 1 << 40},
	} {
		if err := l.Validate(); !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit", l, err)
		}
		if res, err := lim.Allow(context.Background(), "invalid", l); !errors.Is(err, ratelimit.ErrInvalidLimit) || res.Allowed {
			t.Errorf("Allow with %+v = %+v, %v; want not allowed, ErrInvalidLimit", l, res, err)
		}
	}
}

func testConcurrent(t *testing.T, lim ratelimit.Limiter) {
	const goroutines, calls = 50, 4
	l := ratelimit.Limit{Rate: 10, Period: time.Minute, Burst: 20}
	var (
		mu        sync.Mutex
		remaining []int
		denied    int
		errs      []error
		wg        sync.WaitGroup
		start     = make(chan struct{})
	)
	for range goroutines {
		wg.Go(func() {
			<-start
			for range calls {
				res, err := lim.Allow(context.Background(), "hot", l)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case res.Allowed:
					remaining = append(remaining, res.Remaining)
				default:
					denied++
					if res.RetryAfter <= 0 || res.RetryAfter > l.Interval() {
						errs = append(errs, fmt.Errorf("denied with RetryAfter %v, want in (0, %v]", res.RetryAfter, l.Interval()))
					}
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	if len(remaining) != l.Burst || denied != goroutines*calls-l.Burst {
		t.Fatalf("admitted %d and denied %d of %d, want exactly the burst of %d admitted",
			len(remaining), denied, goroutines*calls, l.Burst)
	}
	// Each admission saw the bucket one fuller than the last: the Remaining
	// values are Burst-1 down to 0, each once.
	slices.Sort(remaining)
	for i, r := range remaining {
		if r != i {
			t.Fatalf("Remaining values %v, want 0..%d each once", remaining, l.Burst-1)
		}
	}
}

func testClose(t *testing.T, lim ratelimit.Limiter) {
	checkAllowed(t, allow(t, lim, "close", slow), slow, 1)
	if err := lim.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := lim.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if res, err := lim.Allow(context.Background(), "close", slow); !errors.Is(err, ratelimit.ErrClosed) || res.Allowed {
		t.Fatalf("Allow after Close = %+v, %v; want not allowed, ErrClosed", res, err)
	}
}
