package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/bus"
)

// RedisClaimsConfig configures RedisClaims. Zero values take the defaults shown.
type RedisClaimsConfig struct {
	Namespace string // default bus.DefaultNamespace ("sy")
	// TTL is unused: a claim lives as long as its instance (invariant 12),
	// and the sweeper purges a dead instance's claims. Kept so callers that
	// set it still compile.
	TTL    time.Duration
	Logger *slog.Logger
	// Registerer receives the claim metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// RedisClaims is Claims for a cluster (invariant 1). Its keys:
//
//	{ns}:node:{<node_id>}:gen        integer, the node's fencing generation (no TTL)
//	{ns}:node:{<node_id>}:owner      "<instance id>:<gen>" (no TTL)
//	{ns}:acct:{<account_id>}:nodes   hash node id → "<instance id>:<gen>|0": the account's
//	                                 nodes, counted against its cap (no expiry; an entry
//	                                 "…|<ms>" written by an older version still expires then)
//	{ns}:inst:{<instance id>}:claims set of "<account>\t<node>\t<gen>" an instance holds,
//	                                 for the sweeper to clean up after a dead instance
//
// Liveness is per instance, not per node (invariant 12): nothing here is
// refreshed while idle. A claim is released when its socket ends, and a
// dead instance's claims are purged by the sweeper (Purge) once its alive
// key has expired. Fencing does not depend on expiry: a new connection
// takes the next generation whatever the owner key says (casClaim), the
// old owner is told by the replace envelope, and Refresh, run only after a
// Redis restart or resubscription, re-asserts claims Redis lost and
// reports those a newer generation took.
//
// Every script touches keys of one hash tag only, so Redis Cluster can run it.
type RedisClaims struct {
	rdb     redis.UniversalClient
	cfg     RedisClaimsConfig
	log     *slog.Logger
	outcome *prometheus.CounterVec
}

var _ Claims = (*RedisClaims)(nil)

// NewRedisClaims returns claims kept in rdb.
func NewRedisClaims(rdb redis.UniversalClient, cfg RedisClaimsConfig) *RedisClaims {
	if cfg.Namespace == "" {
		cfg.Namespace = bus.DefaultNamespace
	}
	if cfg.TTL == 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &RedisClaims{rdb: rdb, cfg: cfg, log: cfg.Logger.With("component", "claims"),
		outcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "claims", Name: "total",
			Help: "Node identity claims by result: won, contended (lost a compare-and-set race and retried), refused (account at its cap), reasserted (re-taken after Redis lost it).",
		}, []string{"result"})}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(c.outcome)
	}
	return c
}

// GenKey, OwnerKey and AccountKey name a node's and an account's keys.
func (c *RedisClaims) GenKey(nodeID string) string {
	return c.cfg.Namespace + ":node:{" + nodeID + "}:gen"
}
func (c *RedisClaims) OwnerKey(nodeID string) string {
	return c.cfg.Namespace + ":node:{" + nodeID + "}:owner"
}
func (c *RedisClaims) AccountKey(accountID string) string {
	return c.cfg.Namespace + ":acct:{" + accountID + "}:nodes"
}
func (c *RedisClaims) instanceKey(instance string) string {
	return c.cfg.Namespace + ":inst:{" + instance + "}:claims"
}

// The scripts. Generations go in and out as decimal strings, so Lua's
// numbers never round them.
var (
	// casClaim: take the node's next generation if it is still ARGV[1].
	// KEYS gen, owner; ARGV expected gen, instance. The owner key has no
	// TTL (invariant 12); PERSIST clears one an older version set.
	casClaim = redis.NewScript(`
local cur = redis.call('GET', KEYS[1]) or '0'
if cur ~= ARGV[1] then return {0, cur, ''} end
local gen = tostring(tonumber(cur) + 1)
redis.call('SET', KEYS[1], gen)
local prev = redis.call('GET', KEYS[2]) or ''
redis.call('SET', KEYS[2], ARGV[2] .. ':' .. gen)
return {1, gen, prev}`)

	// reserve: count the node against its account's cap. A node already
	// there (a reconnect) does not count twice. Entries carry no expiry
	// ("|0"); one with an expiry (written by an older version) is pruned
	// once it passes.
	// KEYS account hash; ARGV node, token, limit.
	reserve = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local vals = redis.call('HGETALL', KEYS[1])
local live, mine = 0, false
for i = 1, #vals, 2 do
  local exp = tonumber(string.match(vals[i+1], '|(%d+)$') or '0')
  if exp > 0 and exp < now then redis.call('HDEL', KEYS[1], vals[i])
  elseif vals[i] == ARGV[1] then mine = true
  else live = live + 1 end
end
local limit = tonumber(ARGV[3])
if not mine and limit > 0 and live >= limit then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|0')
redis.call('PERSIST', KEYS[1])
return 1`)

	// refreshOwner: re-assert a claim (after a Redis restart or
	// resubscription, not on a timer): keep it if it is still ours; re-take
	// it if Redis lost it and no newer generation exists; else report it
	// lost. A stray TTL from an older version is cleared.
	// KEYS gen, owner; ARGV instance, gen. Returns 1 kept, 2 re-taken, 0 lost.
	refreshOwner = redis.NewScript(`
local want = ARGV[1] .. ':' .. ARGV[2]
local cur = redis.call('GET', KEYS[2])
if cur == want then redis.call('PERSIST', KEYS[2]) return 1 end
if cur then return 0 end
if tonumber(redis.call('GET', KEYS[1]) or '0') > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], want)
return 2`)

	// refreshReservation: put back the node's place under its account's
	// cap (Redis may have lost it), unless a newer connection has it.
	// KEYS account hash; ARGV node, token.
	refreshReservation = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. '|' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|0')
redis.call('PERSIST', KEYS[1])
return 1`)

	// releaseOwner: delete the owner key if it still names this claim.
	releaseOwner = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

	// releaseReservation: remove the node from its account's count if this
	// claim put it there.
	releaseReservation = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and string.sub(v, 1, #ARGV[2] + 1) == ARGV[2] .. '|' then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0`)
)

// ErrContended is returned when a claim lost its compare-and-set race too
// many times in a row.
var ErrContended = errors.New("node identity claim contended")

// CompareAndClaim runs one compare-and-set: it takes the node's next
// generation if the current one is expected. It reports whether it won;
// when it lost, gen is the current generation.
func (c *RedisClaims) CompareAndClaim(ctx context.Context, instance, nodeID string, expected uint64) (won bool, gen uint64, prev string, err error) {
	res, err := casClaim.Run(ctx, c.rdb, []string{c.GenKey(nodeID), c.OwnerKey(nodeID)},
		strconv.FormatUint(expected, 10), instance).Slice()
	if err != nil {
		return false, 0, "", fmt.Errorf("claims: claim %s: %w", nodeID, err)
	}
	ok, _ := res[0].(int64)
	genStr, _ := res[1].(string)
	prev, _ = res[2].(string)
	gen, _ = strconv.ParseUint(genStr, 10, 64)
	return ok == 1, gen, prev, nil
}

// Claim implements Claims: the node's newest connection wins, even when two
// instances race (invariant 1), and the account's cap holds cluster-wide.
func (c *RedisClaims) Claim(ctx context.Context, instance, nodeID, accountID string, limit int) (Claim, error) {
	var gen uint64
	var prev string
	for attempt := 0; ; attempt++ {
		cur, err := c.rdb.Get(ctx, c.GenKey(nodeID)).Uint64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Claim{}, fmt.Errorf("claims: read generation of %s: %w", nodeID, err)
		}
		won, g, p, err := c.CompareAndClaim(ctx, instance, nodeID, cur)
		if err != nil {
			return Claim{}, err
		}
		if won {
			gen, prev = g, p
			break
		}
		c.outcome.WithLabelValues("contended").Inc()
		if attempt == 4 {
			return Claim{}, ErrContended
		}
	}
	token := instance + ":" + strconv.FormatUint(gen, 10)
	ok, err := reserve.Run(ctx, c.rdb, []string{c.AccountKey(accountID)}, nodeID, token, limit).Int()
	if err != nil || ok == 0 {
		// Give the identity back; the generation stays spent (it only grows).
		_ = releaseOwner.Run(ctx, c.rdb, []string{c.OwnerKey(nodeID)}, token).Err()
		if err != nil {
			return Claim{}, fmt.Errorf("claims: reserve %s: %w", nodeID, err)
		}
		c.outcome.WithLabelValues("refused").Inc()
		return Claim{}, ErrTooManyNodes
	}
	c.rdb.SAdd(ctx, c.instanceKey(instance), accountID+"\t"+nodeID+"\t"+strconv.FormatUint(gen, 10))
	c.outcome.WithLabelValues("won").Inc()
	out := Claim{Gen: gen}
	if i := strings.LastIndexByte(prev, ':'); i > 0 {
		out.PrevOwner = prev[:i]
		out.PrevGen, _ = strconv.ParseUint(prev[i+1:], 10, 64)
	}
	return out, nil
}

// Release implements Claims.
func (c *RedisClaims) Release(ctx context.Context, instance string, h Held) error {
	token := instance + ":" + strconv.FormatUint(h.Gen, 10)
	if err := releaseOwner.Run(ctx, c.rdb, []string{c.OwnerKey(h.NodeID)}, token).Err(); err != nil {
		return fmt.Errorf("claims: release %s: %w", h.NodeID, err)
	}
	if err := releaseReservation.Run(ctx, c.rdb, []string{c.AccountKey(h.AccountID)}, h.NodeID, token).Err(); err != nil {
		return fmt.Errorf("claims: release %s from its account: %w", h.NodeID, err)
	}
	return c.rdb.SRem(ctx, c.instanceKey(instance), h.AccountID+"\t"+h.NodeID+"\t"+strconv.FormatUint(h.Gen, 10)).Err()
}

// Refresh implements Claims: it re-asserts the claims (one pipelined round
// trip for all of them) and reports those a newer connection took. Claims
// do not expire, so this is not needed while Redis keeps its data; the
// server calls it only after a Redis restart or resubscription
// (invariant 12), when Redis may have lost the keys.
func (c *RedisClaims) Refresh(ctx context.Context, instance string, held []Held) ([]Held, error) {
	if len(held) == 0 {
		return nil, nil
	}
	run := func() ([]*redis.Cmd, error) {
		pipe := c.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(held))
		for i, h := range held {
			gen := strconv.FormatUint(h.Gen, 10)
			cmds[i] = refreshOwner.EvalSha(ctx, pipe, []string{c.GenKey(h.NodeID), c.OwnerKey(h.NodeID)}, instance, gen)
			refreshReservation.EvalSha(ctx, pipe, []string{c.AccountKey(h.AccountID)}, h.NodeID, instance+":"+gen)
			// The sweeper finds a dead instance's claims here; Redis may
			// have lost the set too.
			pipe.SAdd(ctx, c.instanceKey(instance), h.AccountID+"\t"+h.NodeID+"\t"+gen)
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := c.loadScripts(ctx); err != nil {
			return nil, err
		}
		cmds, err = run()
	}
	if err != nil {
		return nil, fmt.Errorf("claims: refresh: %w", err)
	}
	var lost []Held
	for i, cmd := range cmds {
		switch n, _ := cmd.Int(); n {
		case 0:
			lost = append(lost, held[i])
		case 2:
			c.outcome.WithLabelValues("reasserted").Inc()
		}
	}
	return lost, nil
}

func (c *RedisClaims) loadScripts(ctx context.Context) error {
	for _, s := range []*redis.Script{refreshOwner, refreshReservation} {
		if err := s.Load(ctx, c.rdb).Err(); err != nil {
			return fmt.Errorf("claims: load script: %w", err)
		}
	}
	return nil
}

// Purge releases every claim a dead instance left behind (the sweeper
// calls it once the instance's alive key has expired). Claims do not
// expire by themselves (invariant 12): this is what frees the nodes'
// owner keys and their places under their accounts' caps.
func (c *RedisClaims) Purge(ctx context.Context, instance string) error {
	members, err := c.rdb.SMembers(ctx, c.instanceKey(instance)).Result()
	if err != nil {
		return fmt.Errorf("claims: purge %s: %w", instance, err)
	}
	for _, m := range members {
		parts := strings.Split(m, "\t")
		if len(parts) != 3 {
			continue
		}
		gen, _ := strconv.ParseUint(parts[2], 10, 64)
		if err := c.Release(ctx, instance, Held{AccountID: parts[0], NodeID: parts[1], Gen: gen}); err != nil {
			return err
		}
	}
	return c.rdb.Del(ctx, c.instanceKey(instance)).Err()
}
