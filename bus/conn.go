package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConn is an instance's connection to the shared Redis (a single
// server or a Redis Cluster). The Redis-backed parts (Redis, RedisControl,
// Registry, Lock, Figures, and those of other packages) are built on its
// Client; whoever dialled it closes it after them.
type RedisConn struct {
	rdb  redis.UniversalClient
	addr string // for messages: the URL without its password

	closeOnce sync.Once
	closeErr  error
}

// DialRedis connects to the Redis at url (redis:// or rediss://; with
// cluster, a Redis Cluster URL whose addresses are its seeds) and checks
// that it answers within 5 s. The client is tuned to fail fast: with Redis
// gone, a request that needs it gets its 503 in about a second, not after
// retries. Errors name the address, never the password.
func DialRedis(ctx context.Context, url string, cluster bool) (*RedisConn, error) {
	const timeout = time.Second
	var c *RedisConn
	if cluster {
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = timeout, timeout, timeout, timeout, 1
		rdb := redis.NewClusterClient(o)
		rdb.AddHook(reloadOnNetError{rdb})
		c = &RedisConn{rdb: rdb, addr: fmt.Sprint(o.Addrs)}
	} else {
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = timeout, timeout, timeout, timeout, 1
		c = &RedisConn{rdb: redis.NewClient(o), addr: o.Addr}
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.rdb.Ping(pctx).Err(); err != nil {
		_ = c.rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w (check --redis-url)", c.addr, err)
	}
	return c, nil
}

// Client is the go-redis client the Redis-backed parts are built on.
func (c *RedisConn) Client() redis.UniversalClient { return c.rdb }

// Ping checks that Redis answers. Its error names the address, as
// DialRedis's does: one that ran out of ctx while go-redis was dialling
// (on a busy machine) says only "context deadline exceeded".
func (c *RedisConn) Ping(ctx context.Context) error {
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", c.addr, err)
	}
	return nil
}

// Close closes the connection; the parts built on it stop working.
// Idempotent: a second Close returns the first one's answer.
func (c *RedisConn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.rdb.Close() })
	return c.closeErr
}

// reloadOnNetError re-reads a Redis Cluster's slot map when a command
// fails for want of a connection. go-redis re-reads it on MOVED, and
// otherwise only every ClusterStateReloadInterval (60 s): after a killed
// master's replica took over, every command for its slots would go on
// dialling the dead address for up to a minute (the failover test saw 503s
// for 7 s and counting). The reload is asynchronous and coalesced by
// go-redis (one at a time, 200 ms apart), so a burst of failures costs a
// few CLUSTER SLOTS, and the first one after the takeover finds the new
// master.
type reloadOnNetError struct{ rdb *redis.ClusterClient }

func (h reloadOnNetError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNetError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnNetError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnNetError) check(ctx context.Context, err error) {
	var ne net.Error
	if err != nil && (errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED)) {
		h.rdb.ReloadState(ctx)
	}
}
