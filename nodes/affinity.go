package nodes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Affinity remembers which node served a session last, so that the next
// turn of a conversation goes to the node that holds its cache when it has
// a free slot (Pick.Prefer). A session is a key the caller makes (the
// server: the account and the client's session id, hashed). An entry lives
// for its TTL from its last use.
type Affinity interface {
	// Last returns the node that served session last ("" when none), and
	// makes the entry live a TTL longer.
	Last(ctx context.Context, session string) (string, error)
	// Remember records that nodeID served session.
	Remember(ctx context.Context, session, nodeID string) error
}

// DefaultAffinityTTL is how long a session's node is remembered after its
// last turn.
const DefaultAffinityTTL = 30 * time.Minute

// MemoryAffinity is the Affinity of one instance: a map whose entries are
// dropped when found expired, and swept when it has grown past twice its
// size at the last sweep.
type MemoryAffinity struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	m       map[string]affinityEntry
	sweepAt int
}

type affinityEntry struct {
	node    string
	expires time.Time
}

// NewMemoryAffinity returns an empty MemoryAffinity (ttl 0: DefaultAffinityTTL).
func NewMemoryAffinity(ttl time.Duration) *MemoryAffinity {
	if ttl <= 0 {
		ttl = DefaultAffinityTTL
	}
	return &MemoryAffinity{ttl: ttl, now: time.Now, m: map[string]affinityEntry{}, sweepAt: 1024}
}

// Last implements Affinity.
func (a *MemoryAffinity) Last(_ context.Context, session string) (string, error) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[session]
	if !ok || !now.Before(e.expires) {
		delete(a.m, session)
		return "", nil
	}
	e.expires = now.Add(a.ttl)
	a.m[session] = e
	return e.node, nil
}

// Remember implements Affinity.
func (a *MemoryAffinity) Remember(_ context.Context, session, nodeID string) error {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m[session] = affinityEntry{node: nodeID, expires: now.Add(a.ttl)}
	if len(a.m) >= a.sweepAt {
		for k, e := range a.m {
			if !now.Before(e.expires) {
				delete(a.m, k)
			}
		}
		a.sweepAt = max(1024, 2*len(a.m))
	}
	return nil
}

// RedisAffinity is the cluster-wide Affinity: a string per session at
// prefix+session holding the node id, read with GETEX (which also renews
// its TTL: one round trip) and written with SET … EX. Redis 6.2 or later.
//
//	redis-cli get 'sy:aff:<session>'
type RedisAffinity struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// AffinityPrefix is the prefix of an instance's session keys in
// namespace: "{ns}:aff:".
func AffinityPrefix(namespace string) string { return namespace + ":aff:" }

// NewRedisAffinity returns a RedisAffinity whose keys start with prefix
// (ttl 0: DefaultAffinityTTL). The caller owns rdb.
func NewRedisAffinity(rdb redis.UniversalClient, prefix string, ttl time.Duration) *RedisAffinity {
	if ttl <= 0 {
		ttl = DefaultAffinityTTL
	}
	return &RedisAffinity{rdb: rdb, prefix: prefix, ttl: ttl}
}

// Last implements Affinity.
func (a *RedisAffinity) Last(ctx context.Context, session string) (string, error) {
	node, err := a.rdb.GetEx(ctx, a.prefix+session, a.ttl).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("nodes: affinity: redis: %w", err)
	}
	return node, nil
}

// Remember implements Affinity.
func (a *RedisAffinity) Remember(ctx context.Context, session, nodeID string) error {
	if err := a.rdb.Set(ctx, a.prefix+session, nodeID, a.ttl).Err(); err != nil {
		return fmt.Errorf("nodes: affinity: redis: %w", err)
	}
	return nil
}
