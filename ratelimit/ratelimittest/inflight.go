package ratelimittest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ratelimit"
)

// RunInFlight is the suite every ratelimit.InFlight must pass. newInFlight
// must return one with no state for the keys the suite uses (each subtest
// uses keys of its own name).
func RunInFlight(t *testing.T, newInFlight func(t *testing.T) ratelimit.InFlight) {
	ctx := context.Background()
	must := func(t *testing.T, ok bool, err error, want bool, what string) {
		t.Helper()
		if err != nil || ok != want {
			t.Fatalf("%s: %v %v, want %v", what, ok, err, want)
		}
	}
	t.Run("CapsAndReleases", func(t *testing.T) {
		f := newInFlight(t)
		for i := range 3 {
			ok, err := f.Acquire(ctx, "k", fmt.Sprint("t", i), 3, time.Minute)
			must(t, ok, err, true, fmt.Sprint("acquire ", i))
		}
		ok, err := f.Acquire(ctx, "k", "t3", 3, time.Minute)
		must(t, ok, err, false, "a fourth of three")
		ok, err = f.Acquire(ctx, "k", "t1", 3, time.Minute)
		must(t, ok, err, true, "again by a holder")
		ok, err = f.Acquire(ctx, "other", "t0", 3, time.Minute)
		must(t, ok, err, true, "another key")
		if err := f.Release(ctx, "k", "t0"); err != nil {
			t.Fatal(err)
		}
		if err := f.Release(ctx, "k", "never"); err != nil {
			t.Fatalf("releasing what is not held: %v", err)
		}
		ok, err = f.Acquire(ctx, "k", "t3", 3, time.Minute)
		must(t, ok, err, true, "after a release")
		ok, err = f.Acquire(ctx, "k", "t4", 3, time.Minute)
		must(t, ok, err, false, "full again")
	})
	t.Run("LeaseEnds", func(t *testing.T) {
		f := newInFlight(t)
		ok, err := f.Acquire(ctx, "lease", "dead", 1, 200*time.Millisecond)
		must(t, ok, err, true, "acquire")
		ok, err = f.Acquire(ctx, "lease", "next", 1, time.Minute)
		must(t, ok, err, false, "while the lease runs")
		// The holder never releases (it died): the lease's end is the only
		// event, so this waits it out.
		time.Sleep(300 * time.Millisecond)
		ok, err = f.Acquire(ctx, "lease", "next", 1, time.Minute)
		must(t, ok, err, true, "after the lease ended")
	})
	t.Run("ConcurrentAdmitsExactlyMax", func(t *testing.T) {
		f := newInFlight(t)
		var wg sync.WaitGroup
		var got atomic.Int32
		for i := range 40 {
			wg.Go(func() {
				ok, err := f.Acquire(ctx, "race", fmt.Sprint("t", i), 7, time.Minute)
				if err != nil {
					t.Error(err)
				}
				if ok {
					got.Add(1)
				}
			})
		}
		wg.Wait()
		if got.Load() != 7 {
			t.Fatalf("%d of 40 concurrent acquires admitted, want 7", got.Load())
		}
	})
}
