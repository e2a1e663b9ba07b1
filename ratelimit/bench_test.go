package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/ratelimit"
)

// benchLimit admits about half the calls at a few million a second, so both
// the allowed and the denied path are measured.
var benchLimit = ratelimit.Limit{Rate: 1000, Period: time.Second, Burst: 100} // 1 ms each

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "request:acct_" + strconv.Itoa(i)
	}
	return keys
}

func BenchmarkMemoryAllow(b *testing.B) {
	ctx := context.Background()
	b.Run("one-key", func(b *testing.B) {
		m := ratelimit.NewMemory(ratelimit.MemoryConfig{})
		defer m.Close()
		b.ReportAllocs()
		for b.Loop() {
			m.Allow(ctx, "request:acct_1", benchLimit)
		}
	})
	b.Run("one-key-parallel", func(b *testing.B) {
		m := ratelimit.NewMemory(ratelimit.MemoryConfig{})
		defer m.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Allow(ctx, "request:acct_1", benchLimit)
			}
		})
	})
	keys := benchKeys(100_000)
	b.Run("many-keys", func(b *testing.B) {
		m := ratelimit.NewMemory(ratelimit.MemoryConfig{})
		defer m.Close()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m.Allow(ctx, keys[i%len(keys)], benchLimit)
			i++
		}
	})
	b.Run("many-keys-parallel", func(b *testing.B) {
		m := ratelimit.NewMemory(ratelimit.MemoryConfig{})
		defer m.Close()
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(7919))
			for pb.Next() {
				m.Allow(ctx, keys[i%len(keys)], benchLimit)
				i++
			}
		})
	})
}

func BenchmarkRedisAllow(b *testing.B) {
	ctx := context.Background()
	rdb := testRedis(b, true)
	r := ratelimit.NewRedis(rdb, testPrefix(b, rdb))
	b.Run("one-key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Allow(ctx, "request:acct_1", benchLimit); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-key-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := r.Allow(ctx, "request:acct_1", benchLimit); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// The cost the middleware adds to a request over Memory, headers included.
func BenchmarkMiddlewareMemory(b *testing.B) {
	m := ratelimit.NewMemory(ratelimit.MemoryConfig{})
	defer m.Close()
	e := echo.New()
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, ratelimit.Middleware(ratelimit.MiddlewareConfig{
		Limiter: m,
		Limit:   benchLimit,
		Name:    "request",
		Key:     func(echo.Context) string { return "acct_1" },
		Deny:    func(c echo.Context, _ ratelimit.Result) error { return c.NoContent(http.StatusTooManyRequests) },
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		e.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// What a limited key's task costs its quota: a Reserve before it runs and
// a Settle at its end (the old check and spend were a Spent and a Spend,
// also two round trips). The key has many tasks under way in the parallel
// run, so the holds' hash and index are not empty.
func BenchmarkQuotaHold(b *testing.B) {
	ctx := context.Background()
	l := ratelimit.Limits{Day: ratelimit.Amount{Tokens: 1 << 40}, Month: ratelimit.Amount{Units: 1 << 40}}
	run := func(b *testing.B, q ratelimit.Quota) {
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := "t" + strconv.FormatInt(next.Add(1), 10)
				now := time.Now()
				h := ratelimit.Hold{ID: id, Amount: ratelimit.Amount{Tokens: 1100, Units: 1_100_000}, Until: now.Add(5 * time.Minute)}
				if _, ok, err := q.Reserve(ctx, "acct_1", l, h, now); err != nil || !ok {
					b.Errorf("reserve: %v %v", ok, err)
					return
				}
				if err := q.Settle(ctx, "acct_1", id, ratelimit.Amount{Tokens: 30, Units: 30_000}, now); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("memory", func(b *testing.B) { run(b, ratelimit.NewMemoryQuota()) })
	b.Run("redis", func(b *testing.B) {
		rdb := testRedis(b, true)
		run(b, ratelimit.NewRedisQuota(rdb, testPrefix(b, rdb)))
	})
	// The old path, for comparison: Spent before, Spend after.
	b.Run("redis-spent-spend", func(b *testing.B) {
		rdb := testRedis(b, true)
		q := ratelimit.NewRedisQuota(rdb, testPrefix(b, rdb))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := time.Now()
				if _, _, err := q.Spent(ctx, "acct_1", now); err != nil {
					b.Error(err)
					return
				}
				if err := q.Spend(ctx, "acct_1", ratelimit.Amount{Tokens: 30, Units: 30_000}, now); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
