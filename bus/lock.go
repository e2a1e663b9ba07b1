package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrLockHeld is returned by Lock.Acquire while another instance holds it.
var ErrLockHeld = errors.New("the single-instance lock is held by another instance")

// Lock is the single-instance lock of multi_instance=false (the rollback
// switch): {ns}:lock holds the InstanceInfo of its holder, with a
// TTL the holder keeps refreshing.
type Lock struct {
	rdb  redis.UniversalClient
	key  string
	ttl  time.Duration
	self InstanceInfo
}

// NewLock returns the lock of namespace ns for instance self.
func NewLock(rdb redis.UniversalClient, ns string, ttl time.Duration, self InstanceInfo) *Lock {
	if ns == "" {
		ns = DefaultNamespace
	}
	if ttl == 0 {
		ttl = 15 * time.Second
	}
	return &Lock{rdb: rdb, key: ns + ":lock", ttl: ttl, self: self}
}

// Key is the lock's Redis key.
func (l *Lock) Key() string { return l.key }

// The lock's value is JSON naming the holder; these compare only its id.
var (
	refreshLock = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return -1 end
if cjson.decode(v)['id'] ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	releaseLock = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and cjson.decode(v)['id'] == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// Acquire takes the lock, or returns ErrLockHeld with the holder.
func (l *Lock) Acquire(ctx context.Context) (holder InstanceInfo, err error) {
	b, err := json.Marshal(l.self)
	if err != nil {
		return InstanceInfo{}, err
	}
	ok, err := l.rdb.SetNX(ctx, l.key, b, l.ttl).Result()
	if err != nil {
		return InstanceInfo{}, fmt.Errorf("lock: %w", err)
	}
	if ok {
		return l.self, nil
	}
	v, err := l.rdb.Get(ctx, l.key).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return InstanceInfo{}, fmt.Errorf("lock: %w", err)
	}
	_ = json.Unmarshal(v, &holder)
	return holder, ErrLockHeld
}

// Refresh extends the lock. It reports false if another instance has it now
// (it expired while this one could not reach Redis).
func (l *Lock) Refresh(ctx context.Context) (bool, error) {
	n, err := refreshLock.Run(ctx, l.rdb, []string{l.key}, l.self.ID, l.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("lock: refresh: %w", err)
	}
	if n == -1 { // expired and nobody took it: take it back
		_, err := l.Acquire(ctx)
		return err == nil, err
	}
	return n == 1, nil
}

// Release gives the lock up if this instance holds it.
func (l *Lock) Release(ctx context.Context) error {
	return releaseLock.Run(ctx, l.rdb, []string{l.key}, l.self.ID).Err()
}
