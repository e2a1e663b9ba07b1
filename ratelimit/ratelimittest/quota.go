package ratelimittest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ratelimit"
)

// RunQuota is the suite every ratelimit.Quota must pass. newQuota must
// return one with no state for the keys the suite uses. Its times are
// chosen, not read: windows are named by the caller's clock.
func RunQuota(t *testing.T, newQuota func(t *testing.T) ratelimit.Quota) {
	ctx := context.Background()
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	// Units are always 10 times the tokens here: both are counted, apart.
	spent := func(t *testing.T, q ratelimit.Quota, key string, now time.Time, day, month int64) {
		t.Helper()
		d, m, err := q.Spent(ctx, key, now)
		wd, wm := ratelimit.Amount{Tokens: day, Units: 10 * day}, ratelimit.Amount{Tokens: month, Units: 10 * month}
		if err != nil || d != wd || m != wm {
			t.Fatalf("Spent(%s, %s) = %+v, %+v, %v; want %+v today, %+v this month", key, now, d, m, err, wd, wm)
		}
	}
	t.Run("DaysAndMonths", func(t *testing.T) {
		q := newQuota(t)
		spent(t, q, "k", at("2026-01-30T12:00:00Z"), 0, 0)
		spend := func(s string, n int64) {
			t.Helper()
			if err := q.Spend(ctx, "k", ratelimit.Amount{Tokens: n, Units: 10 * n}, at(s)); err != nil {
				t.Fatal(err)
			}
		}
		// Time moves forward, as an instance's clock does.
		spend("2026-01-30T12:00:00Z", 100)
		spend("2026-01-30T23:59:59.999Z", 20)
		spent(t, q, "k", at("2026-01-30T18:00:00Z"), 120, 120)
		spent(t, q, "k", at("2026-01-31T05:00:00+09:00"), 120, 120) // 20:00 UTC on the 30th
		// The next UTC day, though still the 30th west of UTC.
		spend("2026-01-30T19:00:00-05:00", 3)
		spent(t, q, "k", at("2026-01-31T10:00:00Z"), 3, 123)
		spent(t, q, "k", at("2026-02-01T00:00:00Z"), 0, 0)
		spent(t, q, "other", at("2026-01-30T12:00:00Z"), 0, 0)
	})
	t.Run("ConcurrentSpendsAllCount", func(t *testing.T) {
		q := newQuota(t)
		now := at("2026-03-10T10:00:00Z")
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					if err := q.Spend(ctx, "c", ratelimit.Amount{Tokens: int64(i), Units: 10 * int64(i)}, now); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		spent(t, q, "c", now, 1900, 1900)
	})
	t.Run("RaiseNeverCountsTwice", func(t *testing.T) {
		q := newQuota(t)
		now := at("2026-05-20T08:00:00Z")
		amt := func(n int64) ratelimit.Amount { return ratelimit.Amount{Tokens: n, Units: 10 * n} }
		// A fresh key's counters rise to the ledger's totals.
		if err := q.Raise(ctx, "r", amt(50), amt(400), now); err != nil {
			t.Fatal(err)
		}
		spent(t, q, "r", now, 50, 400)
		// Spends add on top; a lower ledger (one that lags them) changes nothing.
		if err := q.Spend(ctx, "r", amt(30), now); err != nil {
			t.Fatal(err)
		}
		if err := q.Raise(ctx, "r", amt(60), amt(420), now); err != nil {
			t.Fatal(err)
		}
		spent(t, q, "r", now, 80, 430)
		// Each window, and each count, rises on its own.
		if err := q.Raise(ctx, "r", amt(90), amt(10), now); err != nil {
			t.Fatal(err)
		}
		spent(t, q, "r", now, 90, 430)
		if err := q.Raise(ctx, "r", ratelimit.Amount{Tokens: 95, Units: 1}, amt(10), now); err != nil {
			t.Fatal(err)
		}
		if d, _, err := q.Spent(ctx, "r", now); err != nil || d != (ratelimit.Amount{Tokens: 95, Units: 900}) {
			t.Fatalf("after raising the tokens alone: %+v, %v; want 95 tokens, 900 units", d, err)
		}
		// The next day starts from what is raised or spent in it.
		spent(t, q, "r", at("2026-05-21T00:00:00Z"), 0, 430)
		spent(t, q, "other", now, 0, 0)
	})
}
