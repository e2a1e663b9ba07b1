package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Redis is the cluster-wide Limiter: GCRA in one Lua script per call
// (redis_rate v10), so every instance sharing the Redis shares each key's
// budget (invariant 8). The script reads the clock with Redis TIME, so
// instances need no clock agreement.
//
// A key is stored at "rate:" + prefix + key (redis_rate adds "rate:"),
// as a string holding the TAT in seconds since 2017, with a TTL that ends
// when the bucket is full again. Each script touches one key, so Redis
// Cluster works.
//
//	redis-cli --scan --pattern 'rate:sy:rl:*'
//	redis-cli get 'rate:sy:rl:request:acct_1'; redis-cli ttl 'rate:sy:rl:request:acct_1'
type Redis struct {
	lim    *redis_rate.Limiter
	prefix string
	closed atomic.Bool
}

var _ Limiter = (*Redis)(nil)

// RedisPrefix is the prefix of an instance's rate-limit keys in namespace:
// "{ns}:rl:".
func RedisPrefix(namespace string) string { return namespace + ":rl:" }

// NewRedis returns a Redis limiter whose keys start with prefix (an
// instance's: RedisPrefix). The caller owns rdb; Close does not close it.
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{lim: redis_rate.NewLimiter(rdb), prefix: prefix}
}

// Allow implements Limiter.
func (r *Redis) Allow(ctx context.Context, key string, l Limit) (Result, error) {
	l, err := l.normalize()
	if err != nil {
		return Result{Limit: l}, err
	}
	if l.IsZero() {
		return Result{Allowed: true, Limit: l}, nil
	}
	if r.closed.Load() {
		return Result{Limit: l}, ErrClosed
	}
	rr, err := r.lim.Allow(ctx, r.prefix+key, redis_rate.Limit{Rate: l.Rate, Burst: l.Burst, Period: l.Period})
	if err != nil {
		return Result{Limit: l}, fmt.Errorf("ratelimit: redis: %w", err)
	}
	return fromRedisRate(rr, l), nil
}

// fromRedisRate converts the script's answer. The script computes in float
// seconds since 2017 (about 3e8, where one ulp is 60 ns), so its durations
// carry sub-microsecond noise, and its Remaining, truncated from a float,
// comes out one short whenever the noise lands below a whole number: on a
// fresh key with 10/s it reports Burst-2, not Burst-1. Redis TIME only has
// microseconds, so durations are rounded to them, and Remaining is derived
// again from ResetAfter (remaining = (Burst*interval - ResetAfter) /
// interval, the script's own identity) with the same microsecond of
// tolerance. The allow/deny decision is the script's, untouched.
func fromRedisRate(rr *redis_rate.Result, l Limit) Result {
	res := Result{
		Allowed:    rr.Allowed > 0,
		Limit:      l,
		ResetAfter: max(rr.ResetAfter.Round(time.Microsecond), 0),
	}
	if !res.Allowed {
		// redis_rate reports -1 for "not limited"; ours is 0, and a denial
		// always has something to wait for.
		res.RetryAfter = max(rr.RetryAfter.Round(time.Microsecond), time.Microsecond)
		return res
	}
	e := float64(l.Period) / float64(l.Rate)
	free := float64(l.Burst)*e - float64(res.ResetAfter)
	rem := int(math.Floor((free + float64(time.Microsecond)) / e))
	res.Remaining = min(max(rem, 0), l.Burst-1)
	return res
}

// Close implements Limiter. Later calls to Allow return ErrClosed; the
// client stays open (the caller owns it).
func (r *Redis) Close() error {
	r.closed.Store(true)
	return nil
}
