package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstanceInfo is what an instance says about itself in the registry.
type InstanceInfo struct {
	ID        string    `json:"id"`   // unique per process start (UUIDv7)
	Name      string    `json:"name"` // human name, for logs and status
	Host      string    `json:"host"`
	Addr      string    `json:"addr"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	Heartbeat time.Time `json:"heartbeat"`
	Nodes     int       `json:"nodes"`
	Draining  bool      `json:"draining"`
}

// RegistryConfig configures a Registry. Zero values take the defaults shown.
type RegistryConfig struct {
	Namespace string        // default DefaultNamespace ("sy")
	TTL       time.Duration // default 15s: an instance that stops refreshing is gone after it
	Interval  time.Duration // default 5s between refreshes
	// MissingFor is how long an alive key must be seen missing before its
	// instance counts as dead (default 2×Interval). A Redis that lost its
	// data (restarted without persistence, a Cluster master restarted
	// empty) loses every alive key at once, and each live instance writes
	// its own back within an Interval; judging by one look would purge live
	// instances' nodes and cancel their tasks.
	MissingFor time.Duration
	Logger     *slog.Logger     // default slog.Default()
	Now        func() time.Time // default time.Now; tests step it
}

// Registry is the set of live instances (docs/OPERATIONS.md lists its keys):
//
//	{ns}:inst:alive:{id}  string, the InstanceInfo JSON, TTL RegistryConfig.TTL
//	{ns}:inst:index       set of every instance id; the sweeper removes dead ones
type Registry struct {
	rdb redis.UniversalClient
	cfg RegistryConfig
	log *slog.Logger

	mu      sync.Mutex
	missing map[string]missingSpan // alive keys seen missing, by instance id
}

// missingSpan is when an alive key was first and last seen missing.
type missingSpan struct{ first, last time.Time }

// NewRegistry returns a registry on rdb.
func NewRegistry(rdb redis.UniversalClient, cfg RegistryConfig) *Registry {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.TTL == 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.MissingFor == 0 {
		cfg.MissingFor = 2 * cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Registry{rdb: rdb, cfg: cfg, log: cfg.Logger.With("component", "registry"), missing: map[string]missingSpan{}}
}

func (r *Registry) aliveKey(id string) string { return r.cfg.Namespace + ":inst:alive:" + id }
func (r *Registry) indexKey() string          { return r.cfg.Namespace + ":inst:index" }

// Register writes (or refreshes) an instance's alive key and index entry.
// Two commands on two keys, never one multi-key command: Redis Cluster
// may hold them in different slots.
func (r *Registry) Register(ctx context.Context, info InstanceInfo) error {
	info.Heartbeat = time.Now().UTC()
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := r.rdb.Set(ctx, r.aliveKey(info.ID), b, r.cfg.TTL).Err(); err != nil {
		return fmt.Errorf("registry: refresh %s: %w", info.ID, err)
	}
	if err := r.rdb.SAdd(ctx, r.indexKey(), info.ID).Err(); err != nil {
		return fmt.Errorf("registry: index %s: %w", info.ID, err)
	}
	return nil
}

// Deregister removes an instance (at the end of its drain).
func (r *Registry) Deregister(ctx context.Context, id string) error {
	if err := r.rdb.Del(ctx, r.aliveKey(id)).Err(); err != nil {
		return fmt.Errorf("registry: deregister %s: %w", id, err)
	}
	return r.rdb.SRem(ctx, r.indexKey(), id).Err()
}

// Alive reports which of the instances are alive: those with an alive key,
// and those whose key has been seen missing for less than MissingFor.
func (r *Registry) Alive(ctx context.Context, ids []string) (map[string]bool, error) {
	present, err := r.present(ctx, ids)
	if err != nil {
		return nil, err
	}
	return r.judge(ids, present), nil
}

// judge turns which alive keys are present now into which instances are
// alive, remembering since when each missing key has been seen missing.
func (r *Registry) judge(ids []string, present map[string]bool) map[string]bool {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		if present[id] {
			delete(r.missing, id)
			out[id] = true
			continue
		}
		// A look more than MissingFor after the last one starts a new span:
		// the key may have come back and gone again unseen in between.
		sp, seen := r.missing[id]
		if !seen || now.Sub(sp.last) > r.cfg.MissingFor {
			sp.first = now
		}
		sp.last = now
		r.missing[id] = sp
		out[id] = now.Sub(sp.first) < r.cfg.MissingFor
	}
	for id, sp := range r.missing {
		if now.Sub(sp.last) > 2*r.cfg.MissingFor {
			delete(r.missing, id) // not asked about lately: deregistered or swept
		}
	}
	return out
}

// present reports which of the instances have an alive key now.
func (r *Registry) present(ctx context.Context, ids []string) (map[string]bool, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Exists(ctx, r.aliveKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("registry: alive: %w", err)
	}
	out := make(map[string]bool, len(ids))
	for i, id := range ids {
		out[id] = cmds[i].Val() == 1
	}
	return out, nil
}

// Instances lists the instances with an alive key. Index entries without
// one are skipped (the sweeper removes them).
func (r *Registry) Instances(ctx context.Context) ([]InstanceInfo, error) {
	_, infos, err := r.read(ctx)
	return infos, err
}

// LiveIDs lists the instances that are alive as Alive judges them (an
// alive key missing for less than MissingFor still counts) and not
// draining, and how many are alive in all.
func (r *Registry) LiveIDs(ctx context.Context) (ids []string, alive int, err error) {
	all, infos, err := r.read(ctx)
	if err != nil {
		return nil, 0, err
	}
	present := make(map[string]bool, len(infos))
	draining := map[string]bool{}
	for _, info := range infos {
		present[info.ID] = true
		if info.Draining {
			draining[info.ID] = true
		}
	}
	judged := r.judge(all, present)
	for _, id := range all {
		if !judged[id] {
			continue
		}
		alive++
		if !draining[id] {
			ids = append(ids, id)
		}
	}
	return ids, alive, nil
}

// read returns every index entry and the info of those with an alive key.
func (r *Registry) read(ctx context.Context) ([]string, []InstanceInfo, error) {
	ids, err := r.rdb.SMembers(ctx, r.indexKey()).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("registry: index: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, r.aliveKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("registry: instances: %w", err)
	}
	out := make([]InstanceInfo, 0, len(ids))
	for i, c := range cmds {
		var info InstanceInfo
		if b, err := c.Bytes(); err == nil && json.Unmarshal(b, &info) == nil && info.ID == ids[i] {
			out = append(out, info)
		}
	}
	return ids, out, nil
}

// Sweep removes index entries of instances that Alive finds dead, after
// calling onDead for each (to delete what they left behind), and reports
// how many instances are alive. self, the caller, is never dead: a lost
// alive key of its own is written back by its next heartbeat. It is
// idempotent, so every instance may run it.
func (r *Registry) Sweep(ctx context.Context, self string, onDead func(ctx context.Context, id string) error) (live int, dead []string, err error) {
	ids, err := r.rdb.SMembers(ctx, r.indexKey()).Result()
	if err != nil {
		return 0, nil, fmt.Errorf("registry: sweep: %w", err)
	}
	alive, err := r.Alive(ctx, ids)
	if err != nil {
		return 0, nil, err
	}
	for _, id := range ids {
		if alive[id] || id == self {
			live++
			continue
		}
		if onDead != nil {
			if err := onDead(ctx, id); err != nil {
				return live, dead, fmt.Errorf("registry: clean up after %s: %w", id, err)
			}
		}
		if err := r.rdb.SRem(ctx, r.indexKey(), id).Err(); err != nil {
			return live, dead, err
		}
		r.mu.Lock()
		delete(r.missing, id)
		r.mu.Unlock()
		dead = append(dead, id)
	}
	return live, dead, nil
}
