package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	Logger    *slog.Logger  // default slog.Default()
}

// Registry is the set of live instances (DESIGN §4):
//
//	{ns}:inst:alive:{id}  string, the InstanceInfo JSON, TTL RegistryConfig.TTL
//	{ns}:inst:index       set of every instance id; the sweeper removes dead ones
type Registry struct {
	rdb redis.UniversalClient
	cfg RegistryConfig
	log *slog.Logger
}

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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Registry{rdb: rdb, cfg: cfg, log: cfg.Logger.With("component", "registry")}
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

// Alive reports which of the instances have an alive key.
func (r *Registry) Alive(ctx context.Context, ids []string) (map[string]bool, error) {
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

// Instances lists the live instances. Index entries without an alive key
// are skipped (the sweeper removes them).
func (r *Registry) Instances(ctx context.Context) ([]InstanceInfo, error) {
	ids, err := r.rdb.SMembers(ctx, r.indexKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("registry: index: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, r.aliveKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("registry: instances: %w", err)
	}
	out := make([]InstanceInfo, 0, len(ids))
	for _, c := range cmds {
		var info InstanceInfo
		if b, err := c.Bytes(); err == nil && json.Unmarshal(b, &info) == nil {
			out = append(out, info)
		}
	}
	return out, nil
}

// Sweep removes index entries of instances whose alive key is gone, after
// calling onDead for each (to delete what they left behind), and reports
// how many instances are alive. It is idempotent, so every instance may
// run it.
func (r *Registry) Sweep(ctx context.Context, onDead func(ctx context.Context, id string) error) (live int, dead []string, err error) {
	ids, err := r.rdb.SMembers(ctx, r.indexKey()).Result()
	if err != nil {
		return 0, nil, fmt.Errorf("registry: sweep: %w", err)
	}
	alive, err := r.Alive(ctx, ids)
	if err != nil {
		return 0, nil, err
	}
	for _, id := range ids {
		if alive[id] {
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
		dead = append(dead, id)
	}
	return live, dead, nil
}
