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
	reserve := func(t *testing.T, q ratelimit.Quota, key string, l ratelimit.Limits, h ratelimit.Hold, now time.Time) (ratelimit.Totals, bool) {
		t.Helper()
		tot, ok, err := q.Reserve(ctx, key, l, h, now)
		if err != nil {
			t.Fatal(err)
		}
		return tot, ok
	}
	settle := func(t *testing.T, q ratelimit.Quota, key, id string, used ratelimit.Amount, now time.Time) {
		t.Helper()
		if err := q.Settle(ctx, key, id, used, now); err != nil {
			t.Fatal(err)
		}
	}
	tok := func(n int64) ratelimit.Amount { return ratelimit.Amount{Tokens: n} }
	t.Run("HoldsCountUntilSettled", func(t *testing.T) {
		q := newQuota(t)
		now := at("2026-06-01T09:00:00Z")
		until := now.Add(48 * time.Hour)
		day := ratelimit.Limits{Day: tok(100)}
		if err := q.Spend(ctx, "h", tok(90), now); err != nil {
			t.Fatal(err)
		}
		// 10 left: a hold larger than what is left is admitted, and takes
		// it all (and more): nothing after it.
		if tot, ok := reserve(t, q, "h", day, ratelimit.Hold{ID: "a", Amount: tok(50), Until: until}, now); !ok ||
			tot != (ratelimit.Totals{Day: tok(90), Month: tok(90)}) {
			t.Fatalf("a hold with 10 left: %v, judged %+v; want admitted on 90 spent, nothing held", ok, tot)
		}
		if tot, ok := reserve(t, q, "h", day, ratelimit.Hold{ID: "b", Amount: tok(1), Until: until}, now); ok ||
			tot != (ratelimit.Totals{Day: tok(90), Month: tok(90), Held: tok(50)}) {
			t.Fatalf("a hold while 90 are spent and 50 held: %v, judged %+v; want refused", ok, tot)
		}
		// A judgement without an id holds nothing.
		if _, ok := reserve(t, q, "h", ratelimit.Limits{Day: tok(1000)}, ratelimit.Hold{Amount: tok(500), Until: until}, now); !ok {
			t.Fatal("a judgement with room refused")
		}
		if tot, _ := reserve(t, q, "h", ratelimit.Limits{}, ratelimit.Hold{}, now); tot.Held != tok(50) {
			t.Fatalf("held %+v after a judgement, want 50 (a's)", tot.Held)
		}
		// a used 30: the hold goes, the spend stays; 120 of 100 spent.
		settle(t, q, "h", "a", tok(30), now)
		spentTok := func(d, m int64, held ratelimit.Amount) {
			t.Helper()
			tot, _ := reserve(t, q, "h", ratelimit.Limits{}, ratelimit.Hold{}, now)
			if tot != (ratelimit.Totals{Day: tok(d), Month: tok(m), Held: held}) {
				t.Fatalf("judged %+v, want %d today, %d this month, %+v held", tot, d, m, held)
			}
		}
		spentTok(120, 120, ratelimit.Amount{})
		if _, ok := reserve(t, q, "h", day, ratelimit.Hold{ID: "c", Amount: tok(1), Until: until}, now); ok {
			t.Fatal("a hold over the limit admitted")
		}
		// Settling what is not held only spends; a zero use only drops.
		settle(t, q, "h", "never", tok(5), now)
		spentTok(125, 125, ratelimit.Amount{})
		if _, ok := reserve(t, q, "h", ratelimit.Limits{}, ratelimit.Hold{ID: "d", Amount: tok(7), Until: until}, now); !ok {
			t.Fatal("a hold without limits refused")
		}
		spentTok(125, 125, tok(7))
		settle(t, q, "h", "d", ratelimit.Amount{}, now)
		spentTok(125, 125, ratelimit.Amount{})
		// A hold of an id already held replaces it.
		for _, n := range []int64{40, 3} {
			if _, ok := reserve(t, q, "h", ratelimit.Limits{}, ratelimit.Hold{ID: "e", Amount: tok(n), Until: until}, now); !ok {
				t.Fatal("a hold without limits refused")
			}
		}
		spentTok(125, 125, tok(3))
		// Holds outlive the day (they are what runs now); the month's
		// total stays.
		next := at("2026-06-02T00:00:01Z")
		if tot, ok := reserve(t, q, "h", day, ratelimit.Hold{ID: "f", Amount: tok(97), Until: until}, next); !ok ||
			tot != (ratelimit.Totals{Month: tok(125), Held: tok(3)}) {
			t.Fatalf("the next day: %v, judged %+v; want admitted on a new day, 3 held", ok, tot)
		}
		if _, ok := reserve(t, q, "h", day, ratelimit.Hold{ID: "g", Amount: tok(1), Until: until}, next); ok {
			t.Fatal("the next day: 100 held of 100, and one more admitted")
		}
	})
	t.Run("EachLimitOnItsOwn", func(t *testing.T) {
		q := newQuota(t)
		now := at("2026-06-03T09:00:00Z")
		until := now.Add(time.Hour)
		if err := q.Spend(ctx, "l", ratelimit.Amount{Tokens: 10, Units: 10_000}, now); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			l    ratelimit.Limits
			want bool
		}{
			{ratelimit.Limits{Day: ratelimit.Amount{Tokens: 11}}, true},
			{ratelimit.Limits{Day: ratelimit.Amount{Tokens: 10}}, false},
			{ratelimit.Limits{Month: ratelimit.Amount{Tokens: 10}}, false},
			{ratelimit.Limits{Day: ratelimit.Amount{Units: 10_001}}, true},
			{ratelimit.Limits{Day: ratelimit.Amount{Units: 10_000}}, false},
			{ratelimit.Limits{Day: ratelimit.Amount{Tokens: 1000}, Month: ratelimit.Amount{Units: 10_000}}, false},
			{ratelimit.Limits{Day: ratelimit.Amount{Tokens: 1000, Units: 1e9}, Month: ratelimit.Amount{Tokens: 11, Units: 10_001}}, true},
		} {
			if _, ok := reserve(t, q, "l", c.l, ratelimit.Hold{Amount: tok(1), Until: until}, now); ok != c.want {
				t.Errorf("limits %+v on 10 tokens and 10,000 units spent: admitted %v, want %v", c.l, ok, c.want)
			}
		}
	})
	t.Run("LapsedHoldsAreDropped", func(t *testing.T) {
		q := newQuota(t)
		now := at("2026-06-04T09:00:00Z")
		l := ratelimit.Limits{Day: tok(100)}
		// A holder that dies never settles: its hold lapses at its Until.
		if _, ok := reserve(t, q, "x", l, ratelimit.Hold{ID: "dead", Amount: tok(100), Until: now.Add(time.Minute)}, now); !ok {
			t.Fatal("the first hold refused")
		}
		if _, ok := reserve(t, q, "x", l, ratelimit.Hold{ID: "b", Amount: tok(1), Until: now.Add(time.Hour)}, now.Add(59*time.Second)); ok {
			t.Fatal("admitted while a live hold takes all")
		}
		tot, ok := reserve(t, q, "x", l, ratelimit.Hold{ID: "b", Amount: tok(1), Until: now.Add(time.Hour)}, now.Add(time.Minute))
		if !ok || tot.Held != (ratelimit.Amount{}) {
			t.Fatalf("after the dead hold's Until: %v, judged %+v; want admitted, nothing held", ok, tot)
		}
		// Its late settle (the holder was only slow) still counts what it used.
		settle(t, q, "x", "dead", tok(60), now.Add(2*time.Minute))
		if tot, _ := reserve(t, q, "x", l, ratelimit.Hold{}, now.Add(2*time.Minute)); tot != (ratelimit.Totals{Day: tok(60), Month: tok(60), Held: tok(1)}) {
			t.Fatalf("after the late settle: %+v, want 60 spent and b's 1 held", tot)
		}
	})
	t.Run("ConcurrentReservesOverspendByOneHoldAtMost", func(t *testing.T) {
		q := newQuota(t)
		now := at("2026-06-05T09:00:00Z")
		until := now.Add(time.Hour)
		// 10 tokens left of 1,000; 50 holders race for them: one wins.
		if err := q.Spend(ctx, "race", tok(990), now); err != nil {
			t.Fatal(err)
		}
		admitted := func(key string, l ratelimit.Limits, amt ratelimit.Amount) int {
			var wg sync.WaitGroup
			var n atomic.Int32
			for i := range 50 {
				wg.Go(func() {
					_, ok, err := q.Reserve(ctx, key, l, ratelimit.Hold{ID: fmt.Sprint("t", i), Amount: amt, Until: until}, now)
					if err != nil {
						t.Error(err)
					}
					if ok {
						n.Add(1)
					}
				})
			}
			wg.Wait()
			return int(n.Load())
		}
		if n := admitted("race", ratelimit.Limits{Day: tok(1000)}, tok(25)); n != 1 {
			t.Fatalf("%d of 50 concurrent holds admitted with 10 tokens left, want 1", n)
		}
		// With room for several: admitted while the holds are below the
		// limit, so 10 of 100 each on 1,000, and the total never goes
		// past the limit by more than the last hold.
		if n := admitted("room", ratelimit.Limits{Day: tok(1000)}, tok(100)); n != 10 {
			t.Fatalf("%d of 50 concurrent holds of 100 admitted on 1,000, want 10", n)
		}
		// The same for a budget (units), and on the month's limit.
		if err := q.Spend(ctx, "budget", ratelimit.Amount{Tokens: 1, Units: 1_980_000}, now); err != nil {
			t.Fatal(err)
		}
		if n := admitted("budget", ratelimit.Limits{Month: ratelimit.Amount{Units: 2_000_000}}, ratelimit.Amount{Tokens: 30, Units: 60_000}); n != 1 {
			t.Fatalf("%d of 50 concurrent holds admitted with 20,000 units left, want 1", n)
		}
	})
}
