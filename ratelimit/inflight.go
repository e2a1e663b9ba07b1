package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// InFlight caps what one key holds at once (tasks in flight per
// API key, --max-inflight-per-key), where a Limiter caps a rate. Each
// holding has an id and a lease: a holder that dies without releasing
// (an instance killed) stops counting when its lease ends, so a crash never
// leaks a key's budget for longer than the longest task.
type InFlight interface {
	// Acquire takes one of key's max places for id until Release or the
	// lease ends; false when all max are held.
	Acquire(ctx context.Context, key, id string, max int, lease time.Duration) (bool, error)
	// Release gives id's place back; releasing what is not held is a no-op.
	Release(ctx context.Context, key, id string) error
}

// MemoryInFlight is the InFlight of one instance.
type MemoryInFlight struct {
	mu   sync.Mutex
	keys map[string]map[string]time.Time // key → id → lease end
	now  func() time.Time
}

// NewMemoryInFlight returns an empty in-memory InFlight.
func NewMemoryInFlight() *MemoryInFlight {
	return &MemoryInFlight{keys: map[string]map[string]time.Time{}, now: time.Now}
}

// Acquire implements InFlight.
func (m *MemoryInFlight) Acquire(_ context.Context, key, id string, max int, lease time.Duration) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.keys[key]
	for h, end := range held {
		if !end.After(now) {
			delete(held, h)
		}
	}
	if _, ok := held[id]; !ok && len(held) >= max {
		return false, nil
	}
	if held == nil {
		held = map[string]time.Time{}
		m.keys[key] = held
	}
	held[id] = now.Add(lease)
	return true, nil
}

// Release implements InFlight.
func (m *MemoryInFlight) Release(_ context.Context, key, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if held := m.keys[key]; held != nil {
		delete(held, id)
		if len(held) == 0 {
			delete(m.keys, key)
		}
	}
	return nil
}

// RedisInFlight is the cluster-wide InFlight: one sorted set per key at
// prefix+key, each member an id scored by its lease's end (Redis TIME, in
// milliseconds), so every instance sharing the Redis shares each key's
// places. One script per call touches one key: Redis Cluster works.
//
//	redis-cli zrange 'sy:inflight:<key hash>' 0 -1 withscores
type RedisInFlight struct {
	rdb    redis.UniversalClient
	prefix string
}

// InFlightPrefix is the prefix of an instance's in-flight keys in
// namespace: "{ns}:inflight:".
func InFlightPrefix(namespace string) string { return namespace + ":inflight:" }

// NewRedisInFlight returns a Redis InFlight whose keys start with prefix
// (an instance's: InFlightPrefix). The caller owns rdb.
func NewRedisInFlight(rdb redis.UniversalClient, prefix string) *RedisInFlight {
	return &RedisInFlight{rdb: rdb, prefix: prefix}
}

// acquireScript drops ended leases, then adds the id if a place is free
// (or refreshes it if held). KEYS[1] the set; ARGV id, max, lease ms.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
local lease = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
`)

// Acquire implements InFlight.
func (r *RedisInFlight) Acquire(ctx context.Context, key, id string, max int, lease time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, r.rdb, []string{r.prefix + key}, id, max, strconv.FormatInt(lease.Milliseconds(), 10)).Int()
	if err != nil {
		return false, fmt.Errorf("ratelimit: in-flight: redis: %w", err)
	}
	return n == 1, nil
}

// Release implements InFlight.
func (r *RedisInFlight) Release(ctx context.Context, key, id string) error {
	if err := r.rdb.ZRem(ctx, r.prefix+key, id).Err(); err != nil {
		return fmt.Errorf("ratelimit: in-flight: redis: %w", err)
	}
	return nil
}
