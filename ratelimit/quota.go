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
	// Reserve admits h against key's limits l and holds it, in one step
	// that every caller sharing the counters sees whole: h is admitted
	// when every limit of l still has room, that is when the window's
	// total plus every hold of key is below it (see Limits), and then
	// held until Settle drops it or h.Until passes (its holder died).
	// Holds that have passed are dropped first; a hold of h.ID already
	// there is replaced (dropped, even if h is refused: its holder asks
	// again). h without an ID is judged and not held. It returns what it
	// judged.
	Reserve(ctx context.Context, key string, l Limits, h Hold, now time.Time) (Totals, bool, error)
	// Settle replaces key's hold id with what its task used: the hold is
	// dropped and used added to the day and the month containing now, in
	// one step, so no reader sees both or neither. A hold that is gone
	// (passed, or never made) only adds used; a zero used only drops it.
	Settle(ctx context.Context, key, id string, used Amount, now time.Time) error
}

// Hold is what a task may spend at most, held against its key's limits
// from its admission until its end is settled.
type Hold struct {
	ID     string // the task's; "" judges without holding
	Amount Amount
	// Until is when the hold lapses unless settled before: after the
	// task's every deadline, so only the hold of a holder that died
	// lapses (it would otherwise hold the key's allowance for ever).
	Until time.Time
}

// MaxHold bounds each count of a hold (2^50): the Redis scripts count in
// Lua's numbers, exact below 2^53. Reserve holds at most this much.
const MaxHold = 1 << 50

// bounded is h with each count within 0..MaxHold.
func (h Hold) bounded() Hold {
	h.Amount.Tokens = min(max(h.Amount.Tokens, 0), MaxHold)
	h.Amount.Units = min(max(h.Amount.Units, 0), MaxHold)
	return h
}

// Limits are what a key may spend in a day and in a month, each count
// (Tokens, Units) on its own; 0 is no limit. A hold is admitted while,
// for every limit, the window's total plus the key's holds is below it:
// the last hold admitted may take the key past a limit, by at most its
// own amount (the task that crosses the limit runs; none after it).
type Limits struct{ Day, Month Amount }

// Totals are what Reserve judged: key's totals in the day and the month,
// and what its holds hold (before h).
type Totals struct{ Day, Month, Held Amount }

// Room reports whether l has room after t: every limit of l above the
// window's total plus the holds.
func (l Limits) Room(t Totals) bool {
	for _, c := range [...]struct{ limit, used int64 }{
		{l.Day.Tokens, t.Day.Tokens + t.Held.Tokens}, {l.Day.Units, t.Day.Units + t.Held.Units},
		{l.Month.Tokens, t.Month.Tokens + t.Held.Tokens}, {l.Month.Units, t.Month.Units + t.Held.Units},
	} {
		if c.limit > 0 && c.used >= c.limit {
			return false
		}
	}
	return true
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

// sub takes b from a.
func (a *Amount) sub(b Amount) {
	a.Tokens -= b.Tokens
	a.Units -= b.Units
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
// Its mutex makes each Reserve whole.
type MemoryQuota struct {
	mu   sync.Mutex
	keys map[string]*quotaTotals
}

type quotaTotals struct {
	day, month   string
	dayN, monthN Amount

	holds map[string]Hold // by id
	held  Amount          // the holds' amounts together
	next  time.Time       // no hold lapses before
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

// Reserve implements Quota.
func (m *MemoryQuota) Reserve(_ context.Context, key string, l Limits, h Hold, now time.Time) (Totals, bool, error) {
	h = h.bounded()
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totalsLocked(key, now)
	t.lapseLocked(now)
	t.dropLocked(h.ID)
	tot := Totals{Day: t.dayN, Month: t.monthN, Held: t.held}
	if !l.Room(tot) {
		return tot, false, nil
	}
	if h.ID != "" {
		if t.holds == nil {
			t.holds = map[string]Hold{}
		}
		t.holds[h.ID] = h
		t.held.Add(h.Amount)
		if t.next.IsZero() || h.Until.Before(t.next) {
			t.next = h.Until
		}
	}
	return tot, true, nil
}

// Settle implements Quota.
func (m *MemoryQuota) Settle(_ context.Context, key, id string, used Amount, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totalsLocked(key, now)
	t.dropLocked(id)
	t.dayN.Add(used)
	t.monthN.Add(used)
	return nil
}

// lapseLocked drops the holds whose Until has come. A hold is settled
// long before it lapses, so this walks the holds only when one has.
func (t *quotaTotals) lapseLocked(now time.Time) {
	if t.next.IsZero() || now.Before(t.next) {
		return
	}
	t.next = time.Time{}
	for id, h := range t.holds {
		if !now.Before(h.Until) {
			t.dropLocked(id)
		} else if t.next.IsZero() || h.Until.Before(t.next) {
			t.next = h.Until
		}
	}
}

// dropLocked drops hold id, if held.
func (t *quotaTotals) dropLocked(id string) {
	h, ok := t.holds[id]
	if !ok {
		return
	}
	delete(t.holds, id)
	t.held.sub(h.Amount)
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
// and u (Units); and the key's holds, a hash at ":h" (fields t and u, the
// holds together, and "h:<id>" → "<tokens> <units>" for each) and a sorted
// set at ":hx" (each hold's id scored by its Until, unix ms), so that the
// holds of a holder that died are found and dropped. The key is in a hash
// tag so that all of them live in one slot of a Redis Cluster (Spend is
// one MULTI, Spent one pipeline of two HMGETs; Raise, Reserve and Settle
// one script each: a round trip each). The windows expire a while after
// they end, the holds a minute or two after the last one lapses.
//
//	redis-cli hgetall 'sy:quota:{key_…}:d:20261204'
//	redis-cli hgetall 'sy:quota:{key_…}:h'
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

// allKeys are key's windows containing now and its holds: a script's KEYS.
func (r *RedisQuota) allKeys(key string, now time.Time) []string {
	d, m := r.keys(key, now)
	base := r.prefix + "{" + key + "}"
	return []string{d, m, base + ":h", base + ":hx"}
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

// dropHold is the Lua both hold scripts start with: drop(id) takes hold
// id out of the holds (KEYS[3]) and their index (KEYS[4]). Amounts stay
// below 2^53, so Lua's numbers hold them exactly; 0 - n, not -n, which
// is -0 for 0 and is sent as "-0", which HINCRBY refuses.
const dropHold = `
local function drop(id)
  local v = redis.call('HGET', KEYS[3], 'h:' .. id)
  if v then
    local t, u = string.match(v, '^(%-?%d+) (%-?%d+)$')
    redis.call('HINCRBY', KEYS[3], 't', 0 - tonumber(t))
    redis.call('HINCRBY', KEYS[3], 'u', 0 - tonumber(u))
    redis.call('HDEL', KEYS[3], 'h:' .. id)
    redis.call('ZREM', KEYS[4], id)
  end
end
`

// reserveScript is Reserve: KEYS the day, the month, the holds and their
// index; ARGV the hold's id, tokens, units and Until (unix ms), now (unix
// ms), then the limits (day tokens, day units, month tokens, month units).
// It returns {admitted 0|1, day t, day u, month t, month u, held t, held u}.
// The holds' keys live one to two minutes past the latest Until: extended
// by two when less than one is left, not on every call.
var reserveScript = redis.NewScript(dropHold + `
local now = tonumber(ARGV[5])
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do drop(id) end
if ARGV[1] ~= '' then drop(ARGV[1]) end
local tot = {}
for i = 1, 3 do
  local v = redis.call('HMGET', KEYS[i], 't', 'u')
  tot[2 * i - 1], tot[2 * i] = tonumber(v[1] or '0'), tonumber(v[2] or '0')
end
local used = {tot[1] + tot[5], tot[2] + tot[6], tot[3] + tot[5], tot[4] + tot[6]}
local ok = 1
for i = 1, 4 do
  local limit = tonumber(ARGV[5 + i])
  if limit > 0 and used[i] >= limit then ok = 0 end
end
if ok == 1 and ARGV[1] ~= '' then
  redis.call('HSET', KEYS[3], 'h:' .. ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
  redis.call('HINCRBY', KEYS[3], 't', ARGV[2])
  redis.call('HINCRBY', KEYS[3], 'u', ARGV[3])
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
  local ttl = math.max(tonumber(ARGV[4]) - now, 0) + 60000
  if redis.call('PTTL', KEYS[3]) < ttl then
    for i = 3, 4 do redis.call('PEXPIRE', KEYS[i], ttl + 60000) end
  end
end
return {ok, tot[1], tot[2], tot[3], tot[4], tot[5], tot[6]}`)

// settleScript is Settle: KEYS as reserveScript's; ARGV the hold's id,
// the tokens and units used, and the day's and the month's expiry (s).
var settleScript = redis.NewScript(dropHold + `
drop(ARGV[1])
if ARGV[2] ~= '0' or ARGV[3] ~= '0' then
  for i = 1, 2 do
    redis.call('HINCRBY', KEYS[i], 't', ARGV[2])
    redis.call('HINCRBY', KEYS[i], 'u', ARGV[3])
    redis.call('EXPIRE', KEYS[i], ARGV[3 + i])
  end
end
return 1`)

// Reserve implements Quota: one script, every key of it in one slot.
func (r *RedisQuota) Reserve(ctx context.Context, key string, l Limits, h Hold, now time.Time) (Totals, bool, error) {
	h = h.bounded()
	v, err := reserveScript.Run(ctx, r.rdb, r.allKeys(key, now), h.ID, h.Amount.Tokens, h.Amount.Units, h.Until.UnixMilli(),
		now.UnixMilli(), l.Day.Tokens, l.Day.Units, l.Month.Tokens, l.Month.Units).Int64Slice()
	if err != nil {
		return Totals{}, false, fmt.Errorf("ratelimit: quota: redis: %w", err)
	}
	if len(v) != 7 {
		return Totals{}, false, fmt.Errorf("ratelimit: quota: redis: the reserve script answered %d values, not 7", len(v))
	}
	tot := Totals{Day: Amount{v[1], v[2]}, Month: Amount{v[3], v[4]}, Held: Amount{v[5], v[6]}}
	return tot, v[0] == 1, nil
}

// Settle implements Quota: one script, every key of it in one slot.
func (r *RedisQuota) Settle(ctx context.Context, key, id string, used Amount, now time.Time) error {
	err := settleScript.Run(ctx, r.rdb, r.allKeys(key, now), id, used.Tokens, used.Units,
		int64(quotaDayTTL/time.Second), int64(quotaMonthTTL/time.Second)).Err()
	if err != nil {
		return fmt.Errorf("ratelimit: quota: redis: %w", err)
	}
	return nil
}
