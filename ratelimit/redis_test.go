package ratelimit_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/ratelimit"
	"github.com/switchyard-dev/switchyard/ratelimit/ratelimittest"
)

const defaultTestRedisURL = "redis://127.0.0.1:6379/0"

// testRedis connects to the test Redis (SWITCHYARD_TEST_REDIS_URL, default
// 127.0.0.1:6379) and closes the client when tb ends. An unreachable Redis
// fails the test, unless SWITCHYARD_TEST_SKIP_REDIS=1 or skipAlways (for
// benchmarks): a missing Redis must not pass for a green suite.
func testRedis(tb testing.TB, skipAlways bool) *redis.Client {
	tb.Helper()
	url := os.Getenv("SWITCHYARD_TEST_REDIS_URL")
	if url == "" {
		url = defaultTestRedisURL
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("SWITCHYARD_TEST_REDIS_URL=%q: %v", url, err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		if skipAlways || os.Getenv("SWITCHYARD_TEST_SKIP_REDIS") == "1" {
			tb.Skipf("Redis at %s unreachable (%v)", url, err)
		}
		tb.Fatalf("Redis at %s unreachable: %v (start it, or set SWITCHYARD_TEST_SKIP_REDIS=1 to skip)", url, err)
	}
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// testPrefix returns a key prefix no other test uses, and deletes every key
// under it when tb ends (cleanups run last-in first-out, so before the
// client closes).
func testPrefix(tb testing.TB, rdb redis.UniversalClient) string {
	tb.Helper()
	prefix := "sytest:rl:" + rand.Text() + ":"
	tb.Cleanup(func() {
		ctx := context.Background()
		// redis_rate stores every key under "rate:".
		iter := rdb.Scan(ctx, 0, "rate:"+prefix+"*", 100).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("scanning test keys: %v", err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("deleting test keys: %v", err)
			}
		}
	})
	return prefix
}

func TestRedis(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimit.Limiter {
		rdb := testRedis(t, false)
		r := ratelimit.NewRedis(rdb, testPrefix(t, rdb))
		t.Cleanup(func() { r.Close() })
		return r
	})
}

// The suite on a private 3-master Redis Cluster: each GCRA script touches
// one key, so keys on every master work (no CROSSSLOT), and the concurrent
// tests hold on the cluster as on one server.
func TestRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := c.Client(t)
	var n atomic.Int32
	ratelimittest.Run(t, func(t *testing.T) ratelimit.Limiter {
		// The cluster is this test's own: a prefix per subtest will do.
		r := ratelimit.NewRedis(rdb, fmt.Sprintf("rl%d:", n.Add(1)))
		t.Cleanup(func() { r.Close() })
		return r
	})
}

// Invariant 8: two instances, each with its own client, share one budget
// per key, taking turns or all at once.
func TestRedisLimitsAreClusterWide(t *testing.T) {
	l := ratelimit.Limit{Rate: 10, Period: time.Minute, Burst: 6}
	ctx := context.Background()

	t.Run("alternating", func(t *testing.T) {
		a, b := testRedis(t, false), testRedis(t, false)
		prefix := testPrefix(t, a)
		instances := []*ratelimit.Redis{ratelimit.NewRedis(a, prefix), ratelimit.NewRedis(b, prefix)}
		for k := 1; k <= l.Burst; k++ {
			res, err := instances[k%2].Allow(ctx, "acct", l)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed || res.Remaining != l.Burst-k {
				t.Fatalf("event %d at instance %d: %+v, want allowed with Remaining %d", k, k%2, res, l.Burst-k)
			}
		}
		for i, r := range instances {
			if res, err := r.Allow(ctx, "acct", l); err != nil || res.Allowed {
				t.Fatalf("instance %d after the shared burst: %+v, %v; want denied", i, res, err)
			}
		}
		// Another prefix is another namespace with its own budget.
		other := ratelimit.NewRedis(a, testPrefix(t, a))
		if res, err := other.Allow(ctx, "acct", l); err != nil || !res.Allowed {
			t.Fatalf("same key under another prefix: %+v, %v; want allowed", res, err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		a, b := testRedis(t, false), testRedis(t, false)
		prefix := testPrefix(t, a)
		instances := []*ratelimit.Redis{ratelimit.NewRedis(a, prefix), ratelimit.NewRedis(b, prefix)}
		var (
			mu      sync.Mutex
			allowed int
			errs    []error
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		for i := range 40 {
			wg.Go(func() {
				<-start
				res, err := instances[i%2].Allow(ctx, "acct", l)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if res.Allowed {
					allowed++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d errors, first: %v", len(errs), errs[0])
		}
		if allowed != l.Burst {
			t.Fatalf("two instances admitted %d together, want the burst of %d", allowed, l.Burst)
		}
	})
}

// The key layout operators are told to inspect: "rate:" + prefix + key, with
// a TTL that ends when the bucket is full again.
func TestRedisKeyLayout(t *testing.T) {
	rdb := testRedis(t, false)
	prefix := testPrefix(t, rdb)
	r := ratelimit.NewRedis(rdb, prefix)
	ctx := context.Background()
	res, err := r.Allow(ctx, "request:acct_1", ratelimit.PerMinute(10)) // full again after 6 s
	if err != nil || !res.Allowed {
		t.Fatalf("Allow: %+v, %v", res, err)
	}
	key := "rate:" + prefix + "request:acct_1"
	ttl, err := rdb.TTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > 6*time.Second {
		t.Errorf("TTL of %s = %v, want in (0, 6s]", key, ttl)
	}
}

func TestRedisErrors(t *testing.T) {
	t.Run("cancelled context", func(t *testing.T) {
		rdb := testRedis(t, false)
		r := ratelimit.NewRedis(rdb, testPrefix(t, rdb))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := r.Allow(ctx, "k", ratelimit.PerMinute(10))
		if !errors.Is(err, context.Canceled) || res.Allowed {
			t.Fatalf("Allow with a cancelled context = %+v, %v; want not allowed, context.Canceled", res, err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		// Port 1 on loopback refuses at once.
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
		defer rdb.Close()
		r := ratelimit.NewRedis(rdb, "unused:")
		res, err := r.Allow(context.Background(), "k", ratelimit.PerMinute(10))
		if err == nil || res.Allowed || !strings.HasPrefix(err.Error(), "ratelimit: redis: ") {
			t.Fatalf("Allow against a closed port = %+v, %v; want not allowed, a \"ratelimit: redis: \" error", res, err)
		}
	})
}

func TestRedisInFlight(t *testing.T) {
	ratelimittest.RunInFlight(t, func(t *testing.T) ratelimit.InFlight {
		rdb := testRedis(t, false)
		return ratelimit.NewRedisInFlight(rdb, testPrefix(t, rdb))
	})
}

// The in-flight suite on a 3-master cluster: one key per script.
func TestRedisClusterInFlight(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := c.Client(t)
	var n atomic.Int32
	ratelimittest.RunInFlight(t, func(t *testing.T) ratelimit.InFlight {
		return ratelimit.NewRedisInFlight(rdb, fmt.Sprintf("if%d:", n.Add(1)))
	})
}

func TestRedisQuota(t *testing.T) {
	ratelimittest.RunQuota(t, func(t *testing.T) ratelimit.Quota {
		rdb := testRedis(t, false)
		return ratelimit.NewRedisQuota(rdb, testPrefix(t, rdb))
	})
}

// The quota suite on a 3-master cluster: a key's day and month share a
// slot (the hash tag), so MGET and MULTI work.
func TestRedisClusterQuota(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := c.Client(t)
	var n atomic.Int32
	ratelimittest.RunQuota(t, func(t *testing.T) ratelimit.Quota {
		return ratelimit.NewRedisQuota(rdb, fmt.Sprintf("q%d:", n.Add(1)))
	})
}
