package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Quota counts what each key spends over calendar windows: the UTC day and
// the UTC month that contain a given time. Where a Limiter paces a rate, a
// Quota totals amounts; the caller compares the totals with its limits.
// Windows are named by the caller's clock, so a test chooses its day.
type Quota interface {
	// Spend adds a to key's totals of the day and the month containing now.
	Spend(ctx context.Context, key string, a Amount, now time.Time) error
	// Spent returns key's totals of the day and the month containing now.
	Spent(ctx context.Context, key string, now time.Time) (day, month Amount, err error)
	// Raise lifts key's totals of the day and the month containing now to
	// at least day and month, each count on its own, and leaves a larger
	// total alone: seeding the counters from a ledger that already holds
	// some of their spends never counts one twice.
	Raise(ctx context.Context, key string, day, month Amount, now time.Time) error
}

// Amount is what a Quota totals: two counts the caller gives a meaning
// (the server: tokens, and thousandths of its spend unit).
type Amount struct {
	Tokens, Units int64
}

// Add adds b to a.
func (a *Amount) Add(b Amount) {
	a.Tokens += b.Tokens
	a.Units += b.Units
}

// raise lifts each of a's counts to b's where b's is larger.
func (a *Amount) raise(b Amount) {
	a.Tokens = max(a.Tokens, b.Tokens)
	a.Units = max(a.Units, b.Units)
}

// quotaWindows are the names of the windows containing now.
func quotaWindows(now time.Time) (day, month string) {
	u := now.UTC()
	return u.Format("20060102"), u.Format("200601")
}

// MemoryQuota is the Quota of one instance. It keeps each key's current
// day and month only: a key's totals are reset when the window moves on.
type MemoryQuota struct {
	mu   sync.Mutex
	keys map[string]*quotaTotals
}

type quotaTotals struct {
	day, month   string
	dayN, monthN Amount
}

// NewMemoryQuota returns an empty in-memory Quota.
func NewMemoryQuota() *MemoryQuota { return &MemoryQuota{keys: map[string]*quotaTotals{}} }

// totalsLocked is key's totals, moved on to now's windows.
func (m *MemoryQuota) totalsLocked(key string, now time.Time) *quotaTotals {
	day, month := quotaWindows(now)
	t := m.keys[key]
	if t == nil {
		t = &quotaTotals{}
		m.keys[key] = t
	}
	if t.day != day {
		t.day, t.dayN = day, Amount{}
	}
	if t.month != month {
		t.month, t.monthN = month, Amount{}
	}
	return t
}

// Spend implements Quota.
func (m *MemoryQuota) Spend(_ context.Context, key string, a Amount, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totalsLocked(key, now)
	t.dayN.Add(a)
	t.monthN.Add(a)
	return nil
}

// Raise implements Quota.
func (m *MemoryQuota) Raise(_ context.Context, key string, day, month Amount, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totalsLocked(key, now)
	t.dayN.raise(day)
	t.monthN.raise(month)
	return nil
}

// Spent implements Quota.
func (m *MemoryQuota) Spent(_ context.Context, key string, now time.Time) (Amount, Amount, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totalsLocked(key, now)
	return t.dayN, t.monthN, nil
}

// RedisQuota is the cluster-wide Quota: a hash per key and window at
// prefix + "{" + key + "}:d:YYYYMMDD" and ":m:YYYYMM", fields t (Tokens)
// and u (Units), the key in a hash tag so that both windows live in one
// slot of a Redis Cluster (Spend is one MULTI, Spent one pipeline of two
// HMGETs, Raise one script: a round trip each). Each expires a while after its window ends.
//
//	redis-cli hgetall 'sy:quota:{key_…}:d:20261204'
type RedisQuota struct {
	rdb    redis.UniversalClient
	prefix string
}

// QuotaPrefix is the prefix of an instance's quota counters in namespace:
// "{ns}:quota:".
func QuotaPrefix(namespace string) string { return namespace + ":quota:" }

// NewRedisQuota returns a Redis Quota whose keys start with prefix (an
// instance's: QuotaPrefix). The caller owns rdb.
func NewRedisQuota(rdb redis.UniversalClient, prefix string) *RedisQuota {
	return &RedisQuota{rdb: rdb, prefix: prefix}
}

func (r *RedisQuota) keys(key string, now time.Time) (day, month string) {
	d, m := quotaWindows(now)
	base := r.prefix + "{" + key + "}"
	return base + ":d:" + d, base + ":m:" + m
}

// Counters outlive their window by a day, for clocks that disagree
// around midnight and for operators looking at yesterday's.
const (
	quotaDayTTL   = 2 * 24 * time.Hour
	quotaMonthTTL = 32 * 24 * time.Hour
)

// Spend implements Quota.
func (r *RedisQuota) Spend(ctx context.Context, key string, a Amount, now time.Time) error {
	day, month := r.keys(key, now)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, w := range []struct {
			key string
			ttl time.Duration
		}{{day, quotaDayTTL}, {month, quotaMonthTTL}} {
			p.HIncrBy(ctx, w.key, "t", a.Tokens)
			p.HIncrBy(ctx, w.key, "u", a.Units)
			p.Expire(ctx, w.key, w.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ratelimit: quota: redis: %w", err)
	}
	return nil
}

// raiseScript lifts the fields t and u of KEYS[1] (the day) and KEYS[2]
// (the month) to at least ARGV[1..2] and ARGV[3..4], and sets their
// expiries to ARGV[5] and ARGV[6] seconds: atomically, so that a spend in
// between is neither lost nor counted twice.
var raiseScript = redis.NewScript(`
for i, k in ipairs(KEYS) do
  for j, f in ipairs({'t', 'u'}) do
    local want = tonumber(ARGV[(i - 1) * 2 + j])
    if tonumber(redis.call('HGET', k, f) or '0') < want then
      redis.call('HSET', k, f, want)
    end
  end
  redis.call('EXPIRE', k, ARGV[4 + i])
end
return 1`)

// Raise implements Quota: one script, both windows in one slot.
func (r *RedisQuota) Raise(ctx context.Context, key string, day, month Amount, now time.Time) error {
	d, m := r.keys(key, now)
	err := raiseScript.Run(ctx, r.rdb, []string{d, m}, day.Tokens, day.Units, month.Tokens, month.Units,
		int64(quotaDayTTL/time.Second), int64(quotaMonthTTL/time.Second)).Err()
	if err != nil {
		return fmt.Errorf("ratelimit: quota: redis: %w", err)
	}
	return nil
}

// Spent implements Quota.
func (r *RedisQuota) Spent(ctx context.Context, key string, now time.Time) (Amount, Amount, error) {
	day, month := r.keys(key, now)
	var cmds [2]*redis.SliceCmd
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmds[0] = p.HMGet(ctx, day, "t", "u")
		cmds[1] = p.HMGet(ctx, month, "t", "u")
		return nil
	})
	if err != nil {
		return Amount{}, Amount{}, fmt.Errorf("ratelimit: quota: redis: %w", err)
	}
	var out [2]Amount
	for i, c := range cmds {
		for j, v := range c.Val() {
			s, ok := v.(string)
			if !ok { // nil: nothing spent in that window
				continue
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return Amount{}, Amount{}, fmt.Errorf("ratelimit: quota: redis: %q is not a count", s)
			}
			if j == 0 {
				out[i].Tokens = n
			} else {
				out[i].Units = n
			}
		}
	}
	return out[0], out[1], nil
}
