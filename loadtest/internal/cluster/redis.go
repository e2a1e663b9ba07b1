package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// redisClient connects to the Redis of cfg: a cluster client on a Redis
// Cluster, a plain client otherwise.
func redisClient(cfg config.Config) (redis.UniversalClient, error) {
	if cfg.RedisCluster {
		opt, err := redis.ParseClusterURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("the Redis Cluster URL %s: %w", cfg.RedisURL, err)
		}
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	return redis.NewClient(opt), nil
}

// StartRedisCluster starts the Redis Cluster of --redis-cluster: 3 masters,
// redis-server processes on free loopback ports below 50000 (their bus
// ports are +10000), no persistence, their directories (nodes.conf,
// redis.log) under logDir. The caller stops it; the servers also die with
// this process.
func StartRedisCluster(ctx context.Context, logDir string, progress io.Writer) (*redistest.Cluster, error) {
	fmt.Fprintln(progress, "starting a Redis Cluster of 3 masters (redis-server on free loopback ports)…")
	rc, err := redistest.NewCluster(ctx, redistest.ClusterOptions{Dir: filepath.Join(logDir, "redis-cluster-"+RandHex(3))})
	if errors.Is(err, redistest.ErrNoRedisServer) {
		return nil, fmt.Errorf("--redis-cluster needs redis-server (Redis 7) on PATH: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--redis-cluster: %w", err)
	}
	fmt.Fprintf(progress, "Redis Cluster up: %s\n", rc.URL())
	return rc, nil
}

// DescribeRedis is the report's line on the Redis the run used.
func DescribeRedis(ctx context.Context, cfg config.Config) string {
	if !cfg.Spawn() {
		return "the --target instances' own (not known to the load test)"
	}
	var mu sync.Mutex
	version := ""
	if rdb, err := redisClient(cfg); err == nil {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_ = forEachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
			if info, err := c.Info(ctx, "server").Result(); err == nil {
				mu.Lock()
				version = infoField(info, "redis_version")
				mu.Unlock()
			}
			return nil
		})
		cancel()
		_ = rdb.Close()
	}
	if version != "" {
		version = ", redis-server " + version
	}
	if cfg.RedisCluster {
		return fmt.Sprintf("Redis Cluster of 3 masters started by the load test (%s%s)", cfg.RedisURL, version)
	}
	return fmt.Sprintf("single Redis at %s%s", cfg.RedisURL, version)
}

// forEachMaster calls fn for every master of rdb (the one server of a
// plain client), concurrently on a cluster.
func forEachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("unexpected Redis client %T", rdb)
}

// forEachServer calls fn for every server of rdb: masters and replicas of
// a cluster, concurrently.
func forEachServer(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("unexpected Redis client %T", rdb)
}

// RedisCommands reads total_commands_processed (INFO stats) of every
// server of rdb, by address.
func RedisCommands(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	out := map[string]int64{}
	err := forEachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			return fmt.Errorf("%s: INFO stats: %w", addr, err)
		}
		v, err := strconv.ParseInt(infoField(info, "total_commands_processed"), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: INFO stats has no total_commands_processed", addr)
		}
		mu.Lock()
		out[addr] = v
		mu.Unlock()
		return nil
	})
	return out, err
}

// RedisCommandCalls reads the calls of each command (INFO commandstats)
// summed over every server of rdb: "publish" → 1234.
func RedisCommandCalls(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	out := map[string]int64{}
	err := forEachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return fmt.Errorf("%s: INFO commandstats: %w", c.Options().Addr, err)
		}
		calls := ParseCommandStats(info)
		mu.Lock()
		for k, v := range calls {
			out[k] += v
		}
		mu.Unlock()
		return nil
	})
	return out, err
}

// ParseCommandStats reads INFO commandstats' lines
// ("cmdstat_publish:calls=12,usec=…") into calls by command; a line it
// cannot read is left out.
func ParseCommandStats(info string) map[string]int64 {
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					out[name] += n
				}
				break
			}
		}
	}
	return out
}

// CommandsBetween is the commands each server processed from a to b (a
// server missing from either, or restarted in between, is left out).
func CommandsBetween(a, b map[string]int64) (total int64, byServer map[string]int64) {
	byServer = map[string]int64{}
	for addr, end := range b {
		start, ok := a[addr]
		if !ok || end < start {
			continue
		}
		byServer[addr] = end - start
		total += end - start
	}
	return total, byServer
}

func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// RedisSample is the Redis commands/s of one second of a fleet run.
type RedisSample struct {
	T      float64 `json:"t"` // seconds since the run's start
	PerSec float64 `json:"per_s"`
}

// RedisMeter polls the commands every Redis server has processed once a
// second, for the progress line and the timeline. Its own INFO is one
// command per server per second.
type RedisMeter struct {
	rdb redis.UniversalClient
	t0  time.Time

	mu      sync.Mutex
	last    map[string]int64
	lastAt  time.Time
	rate    float64 // the latest second's commands/s; -1 before the first
	samples []RedisSample
	err     error
}

// NewRedisMeter meters rdb's servers, its samples timed from t0.
func NewRedisMeter(rdb redis.UniversalClient, t0 time.Time) *RedisMeter {
	return &RedisMeter{rdb: rdb, t0: t0, rate: -1}
}

// Run polls once a second until ctx ends.
func (m *RedisMeter) Run(ctx context.Context) {
	m.poll(ctx)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.poll(ctx)
		}
	}
}

func (m *RedisMeter) poll(ctx context.Context) {
	cur, err := RedisCommands(ctx, m.rdb)
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			m.err = err
		}
		return
	}
	if m.last != nil {
		n, _ := CommandsBetween(m.last, cur)
		m.rate = float64(n) / now.Sub(m.lastAt).Seconds()
		m.samples = append(m.samples, RedisSample{T: stats.Round3(now.Sub(m.t0).Seconds()), PerSec: stats.Round3(m.rate)})
	}
	m.last, m.lastAt = cur, now
}

// Latest is the last second's commands/s, or -1.
func (m *RedisMeter) Latest() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rate
}

// Result is every second's commands/s so far.
func (m *RedisMeter) Result() []RedisSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]RedisSample(nil), m.samples...)
}
