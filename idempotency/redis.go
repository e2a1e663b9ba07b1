package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis is the Store every instance of a cluster shares. Its keys, in
// namespace ns, both of a scope's under the scope's hash tag:
//
//	{ns}:idem:{<scope>}:k:<sha256 of the key>  hash: st (run|done), fp, tok,
//	                                           and once done code, body, h:<header>…
//	                                           TTL: the lease while running, Config.TTL once done
//	{ns}:idem:{<scope>}:keys                   sorted set: each key's hash, scored by its end (ms)
//
//	redis-cli hgetall 'sy:idem:{<account id>}:k:<hash>'
//	redis-cli zcard 'sy:idem:{<account id>}:keys'
//
// Each call is one script or one command on one scope's keys: Redis
// Cluster works. Times are Redis's (TIME, key expiry).
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	cfg    Config
	// ended wakes this store's waiters when one of its holders completes
	// or releases; waiters on other instances notice within Config.Poll.
	ended signal
}

var _ Store = (*Redis)(nil)

// Prefix is the prefix of the keys of namespace ns: "{ns}:idem:".
func Prefix(ns string) string { return ns + ":idem:" }

// NewRedis returns a Redis store whose keys start with prefix (Prefix).
// The caller owns rdb.
func NewRedis(rdb redis.UniversalClient, prefix string, cfg Config) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, cfg: cfg.withDefaults()}
}

// RecordKey is the key of key's record in scope.
func (r *Redis) RecordKey(scope, key string) string {
	return r.prefix + "{" + scope + "}:k:" + member(key)
}

// KeysKey is the sorted set counting scope's keys.
func (r *Redis) KeysKey(scope string) string { return r.prefix + "{" + scope + "}:keys" }

// member is key's name in Redis: fixed length, whatever the key holds.
func member(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func (r *Redis) keys(scope, key string) []string {
	return []string{r.RecordKey(scope, key), r.KeysKey(scope)}
}

// beginScript: KEYS record, set; ARGV fp, token, lease ms, ttl ms, max keys, member.
var beginScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'st', 'fp', 'tok')
if st[1] then
  if st[2] ~= ARGV[1] then return {'mismatch'} end
  if st[1] == 'done' then
    local all = redis.call('HGETALL', KEYS[1])
    table.insert(all, 1, 'done')
    return all
  end
  return {'running', st[3]}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if not redis.call('ZSCORE', KEYS[2], ARGV[6]) and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  return {'full'}
end
redis.call('HSET', KEYS[1], 'st', 'run', 'fp', ARGV[1], 'tok', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local ttl = tonumber(ARGV[4])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[6])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
return {'claimed'}
`)

// Begin implements Store.
func (r *Redis) Begin(ctx context.Context, scope, key, fp string) (State, error) {
	if err := checkScope(scope); err != nil {
		return State{}, err
	}
	token := newToken()
	v, err := beginScript.Run(ctx, r.rdb, r.keys(scope, key), fp, token,
		r.cfg.Lease.Milliseconds(), r.cfg.TTL.Milliseconds(), r.cfg.MaxKeys, member(key)).StringSlice()
	if err != nil {
		return State{}, fmt.Errorf("idempotency: redis: %w", err)
	}
	if len(v) == 0 {
		return State{}, errors.New("idempotency: redis: an empty answer from the begin script")
	}
	switch v[0] {
	case "claimed":
		return State{Kind: Claimed, Token: token}, nil
	case "mismatch":
		return State{Kind: Mismatch}, nil
	case "full":
		return State{Kind: Full}, nil
	case "running":
		if len(v) != 2 {
			return State{}, errors.New("idempotency: redis: a running record without its token")
		}
		return State{Kind: Running, Token: v[1]}, nil
	case "done":
		rec, err := r.cfg.decodeRecord(pairs(v[1:]))
		if err != nil {
			return State{}, err
		}
		return State{Kind: Done, Answer: rec.answer}, nil
	}
	return State{}, fmt.Errorf("idempotency: redis: unknown answer %.16q from the begin script", v[0])
}

// pairs reads HGETALL's flat list.
func pairs(v []string) map[string]string {
	m := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		m[v[i]] = v[i+1]
	}
	return m
}

// decodeRecord reads a record's hash, held to c's bounds: it was written by
// another instance, perhaps of another version, or by hand.
func (c Config) decodeRecord(h map[string]string) (record, error) {
	bad := func(what string) (record, error) {
		return record{}, fmt.Errorf("idempotency: redis: a record with %s", what)
	}
	if len(h) > 6+MaxHeaders {
		return bad(strconv.Itoa(len(h)) + " fields")
	}
	rec := record{fp: h["fp"], token: h["tok"]}
	switch h["st"] {
	case "run":
		return rec, nil
	case "done":
	default:
		return bad("no state")
	}
	rec.done = true
	code, err := strconv.Atoi(h["code"])
	if err != nil {
		return bad("no status")
	}
	rec.answer = Answer{Status: code, Body: []byte(h["body"])}
	for k, v := range h {
		if name, ok := strings.CutPrefix(k, "h:"); ok {
			if rec.answer.Header == nil {
				rec.answer.Header = map[string]string{}
			}
			rec.answer.Header[name] = v
		}
	}
	if err := c.checkAnswer(rec.answer); err != nil {
		return record{}, fmt.Errorf("idempotency: redis: a stored answer: %w", err)
	}
	return rec, nil
}

// renewScript: KEYS record; ARGV token, lease ms.
var renewScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'st', 'tok')
if st[1] ~= 'run' or st[2] ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// Renew implements Store.
func (r *Redis) Renew(ctx context.Context, scope, key, token string) error {
	n, err := renewScript.Run(ctx, r.rdb, []string{r.RecordKey(scope, key)}, token, r.cfg.Lease.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("idempotency: redis: %w", err)
	}
	if n != 1 {
		return ErrNotHeld
	}
	return nil
}

// completeScript: KEYS record, set; ARGV token, ttl ms, member, then the
// answer's fields and values.
var completeScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'st', 'tok')
if st[1] ~= 'run' or st[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'st', 'done', unpack(ARGV, 4))
local ttl = tonumber(ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[3])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
`)

// Complete implements Store.
func (r *Redis) Complete(ctx context.Context, scope, key, token string, a Answer) error {
	if err := r.cfg.checkAnswer(a); err != nil {
		return err
	}
	args := make([]any, 0, 7+2*len(a.Header))
	args = append(args, token, r.cfg.TTL.Milliseconds(), member(key), "code", a.Status, "body", a.Body)
	for k, v := range a.Header {
		args = append(args, "h:"+k, v)
	}
	n, err := completeScript.Run(ctx, r.rdb, r.keys(scope, key), args...).Int()
	if err != nil {
		return fmt.Errorf("idempotency: redis: %w", err)
	}
	if n != 1 {
		return ErrNotHeld
	}
	r.ended.fire()
	return nil
}

// releaseScript: KEYS record, set; ARGV token, member.
var releaseScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'st', 'tok')
if st[1] ~= 'run' or st[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`)

// Release implements Store.
func (r *Redis) Release(ctx context.Context, scope, key, token string) error {
	if err := releaseScript.Run(ctx, r.rdb, r.keys(scope, key), token, member(key)).Err(); err != nil {
		return fmt.Errorf("idempotency: redis: %w", err)
	}
	r.ended.fire()
	return nil
}

// Wait implements Store: it reads the record (one HGETALL) at most every
// Config.Poll, sooner after one of this store's own holders ends.
func (r *Redis) Wait(ctx context.Context, scope, key, fp, token string) (Answer, error) {
	k := r.RecordKey(scope, key)
	return waitLoop(ctx, r.cfg.Poll, r.ended.wait, func() (record, bool, error) {
		h, err := r.rdb.HGetAll(ctx, k).Result()
		if err != nil {
			return record{}, false, fmt.Errorf("idempotency: redis: %w", err)
		}
		if len(h) == 0 {
			return record{}, false, nil
		}
		rec, err := r.cfg.decodeRecord(h)
		return rec, err == nil, err
	}, fp, token)
}
