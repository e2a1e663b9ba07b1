package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Quota counts what each key spends (tokens) over calendar windows: the UTC
// day and the UTC month that contain a given time. Where a Limiter paces a
// rate, a Quota totals an amount; the caller compares the totals with its
// limits. Windows are named by the caller's clock, so a test chooses its
// day.
type Quota interface {
	// Spend adds n to key's totals of the day and the month containing now.
	Spend(ctx context.Context, key string, n int64, now time.Time) error
	// Spent returns key's totals of the day and the month containing now.
	Spent(ctx context.Context, key string, now time.Time) (day, month int64, err error)
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
	dayN, monthN int64
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
		t.day, t.dayN = day, 0
	}
	if t.month != month {
		t.month, t.monthN = month, 0
	}
	return t
}

// Spend implements Quota.
func (m *MemoryQuota) Spend(_ context.Context, key string, n int64, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totalsLocked(key, now)
	t.dayN += n
	t.monthN += n
	return nil
}

// Spent implements Quota.
func (m *MemoryQuota) Spent(_ context.Context, key string, now time.Time) (int64, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totalsLocked(key, now)
	return t.dayN, t.monthN, nil
}

// RedisQuota is the cluster-wide Quota: a counter per key and window at
// prefix + "{" + key + "}:d:YYYYMMDD" and ":m:YYYYMM", the key in a hash
// tag so that both live in one slot of a Redis Cluster (Spent is one MGET,
// Spend one MULTI). Each expires a while after its window ends.
//
//	redis-cli get 'sy:quota:{key_…}:d:20261204'
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
func (r *RedisQuota) Spend(ctx context.Context, key string, n int64, now time.Time) error {
	day, month := r.keys(key, now)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.IncrBy(ctx, day, n)
		p.Expire(ctx, day, quotaDayTTL)
		p.IncrBy(ctx, month, n)
		p.Expire(ctx, month, quotaMonthTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ratelimit: quota: redis: %w", err)
	}
	return nil
}

// Spent implements Quota.
func (r *RedisQuota) Spent(ctx context.Context, key string, now time.Time) (int64, int64, error) {
	day, month := r.keys(key, now)
	vals, err := r.rdb.MGet(ctx, day, month).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("ratelimit: quota: redis: %w", err)
	}
	var n [2]int64
	for i, v := range vals {
		s, ok := v.(string)
		if !ok { // nil: nothing spent in that window
			continue
		}
		if _, err := fmt.Sscan(s, &n[i]); err != nil {
			return 0, 0, fmt.Errorf("ratelimit: quota: redis: %q is not a count", s)
		}
	}
	return n[0], n[1], nil
}
