package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/ratelimit"
)

// cluster is the state an instance shares through Redis: in multi-instance
// mode the bus, registry, claims and directory; with --multi-instance=false
// only the rate limits and the single-instance lock.
type cluster struct {
	app      *App
	rdb      redis.UniversalClient
	limiter  *ratelimit.Redis
	bus      *bus.Redis              // multi-instance only
	registry *bus.Registry           // multi-instance only
	claims   *nodes.RedisClaims      // multi-instance only
	dir      *nodes.ClusterDirectory // multi-instance only
	lock     *bus.Lock               // single-instance mode with Redis only

	redisOK   atomic.Bool
	redisErr  atomic.Value   // string: why Redis is unreachable
	lockLost  atomic.Value   // string: who took the single-instance lock
	instances atomic.Int32   // live instances at the last look
	resync    chan struct{}  // cap 1: re-assert everything now
	changes   *nodes.Changes // local nodes that changed: the hub marks them, the directory writes them
	keyCheck  chan struct{}  // cap 1: check the keys in use now (auth events may have been missed)
	lost      lostInstances  // instances the sweep found dead: the pump releases their leases
}

// redisOptions tunes the client for failing fast: with Redis gone, a request
// that needs it should get its 503 in about a second, not after retries.
func redisOptions(cfg Config) (redis.UniversalClient, error) {
	const timeout = time.Second
	if cfg.RedisCluster {
		o, err := redis.ParseClusterURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = timeout, timeout, timeout, timeout, 1
		rdb := redis.NewClusterClient(o)
		rdb.AddHook(reloadOnNetError{rdb})
		return rdb, nil
	}
	o, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = timeout, timeout, timeout, timeout, 1
	return redis.NewClient(o), nil
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

// connectCluster connects to Redis and builds the shared parts. Boot fails
// if Redis cannot be reached, or (single mode) another instance holds the lock.
func (a *App) connectCluster(ctx context.Context) (*cluster, error) {
	cfg := a.cfg
	rdb, err := redisOptions(cfg)
	if err != nil {
		return nil, err
	}
	c := &cluster{app: a, rdb: rdb, resync: make(chan struct{}, 1), changes: nodes.NewChanges(), keyCheck: make(chan struct{}, 1)}
	a.cluster = c // closed by closeAll from here on
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("cannot reach Redis at %s: %w (check --redis-url)", redactURL(cfg.RedisURL), err)
	}
	c.redisOK.Store(true)
	c.limiter = ratelimit.NewRedis(rdb, cfg.Namespace+":rl:")
	if !cfg.Multi() {
		c.lock = bus.NewLock(rdb, cfg.Namespace, cfg.LivenessTTL, a.info())
		holder, err := c.lock.Acquire(pctx)
		if errors.Is(err, bus.ErrLockHeld) {
			return nil, fmt.Errorf("another switchyard instance holds the single-instance lock (%s in Redis): %s (id %s, host %s, started %s); stop it first, or run every instance in multi-instance mode (drop --multi-instance=false)",
				c.lock.Key(), holder.Name, holder.ID, holder.Host, holder.StartedAt.Format(time.RFC3339))
		}
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	c.bus = bus.NewRedis(rdb, bus.RedisConfig{Namespace: cfg.Namespace, Logger: a.log, Registerer: a.registry,
		OnResubscribe: c.resubscribed, Sharded: cfg.RedisCluster})
	c.registry = bus.NewRegistry(rdb, bus.RegistryConfig{Namespace: cfg.Namespace, TTL: cfg.LivenessTTL, Interval: cfg.HeartbeatInterval, Logger: a.log})
	c.claims = nodes.NewRedisClaims(rdb, nodes.RedisClaimsConfig{Namespace: cfg.Namespace, TTL: cfg.LivenessTTL, Logger: a.log, Registerer: a.registry})
	return c, nil
}

// wire builds the cluster directory over the hub once it exists. The hub
// was given c.changes (its Changes) and c.replaced (its OnReplaced) in
// its config, so nothing is set on it afterwards.
func (c *cluster) wire(a *App) {
	c.dir = nodes.NewClusterDirectory(a.hub, c.rdb, c.liveIDs, nodes.ClusterConfig{
		Namespace: a.cfg.Namespace, Instance: a.instanceID, TTL: a.cfg.LivenessTTL, Changes: c.changes, Logger: a.log})
}

// replaced is the hub's OnReplaced. Invariant 1 across instances: the old
// owner closes its socket of the node with 4000. If it is gone, there is
// nothing to close.
func (c *cluster) replaced(nodeID, prevOwner string, gen uint64) {
	a := c.app
	ctx, cancel := context.WithTimeout(a.root, 2*time.Second)
	defer cancel()
	_, err := c.bus.Publish(ctx, prevOwner, &bus.Envelope{Kind: bus.KindReplace, From: a.instanceID, NodeID: nodeID, Gen: gen})
	if err != nil {
		a.log.Warn("cannot tell the previous owner to close its connection; it finds out when it next re-asserts its claims", "node_id", nodeID, "owner", prevOwner, "err", err)
	}
}

// start announces the instance, after its subscription is confirmed.
func (c *cluster) start(ctx context.Context, a *App) error {
	if c.registry == nil {
		return nil
	}
	if err := c.registry.Register(ctx, a.info()); err != nil {
		return err
	}
	return c.dir.Start(ctx)
}

// announce writes and publishes a node's arrival before the hub sends it
// node_registered (invariant 11); the hub calls it.
func (c *cluster) announce(ctx context.Context, s *nodes.Session) {
	if c.dir != nil {
		c.dir.Announce(ctx, s)
	}
}

// run starts the background loops, owned by the App's wait group.
func (c *cluster) run(a *App) {
	a.bg.Add(2)
	go func() { defer a.bg.Done(); c.watchRedis(a.root) }()
	go func() { defer a.bg.Done(); c.watchAuthEvents(a.root) }() // invariant 15
	if c.lock != nil {
		a.bg.Add(1)
		go func() { defer a.bg.Done(); c.keepLock(a.root) }()
	}
	if c.registry != nil {
		a.bg.Add(4)
		go func() { defer a.bg.Done(); c.heartbeat(a.root) }()
		go func() { defer a.bg.Done(); c.watchAsyncEvents(a.root) }()
		go func() { defer a.bg.Done(); c.dir.Run(a.root) }()
		go func() { defer a.bg.Done(); c.publishFigures(a.root) }()
	}
}

// watchRedis pings Redis every second, for readiness and for routing
// (a task no local node can run fails fast while Redis is down).
func (c *cluster) watchRedis(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.rdb.Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		was := c.redisOK.Swap(err == nil)
		switch {
		case err != nil && was:
			c.redisErr.Store(err.Error())
			c.app.log.Error("Redis is unreachable: serving local nodes only; everything else fails with 503", "err", err)
		case err == nil && !was:
			c.app.log.Info("Redis is reachable again; re-asserting this instance's state")
			c.requestResync()
		}
	}
}

// resubscribed is called by the bus when its subscription had to be made
// again: envelopes may have been missed and Redis may have lost its keys.
func (c *cluster) resubscribed(string) {
	// Other instances may still be reconnecting: judge nobody dead for a while.
	c.app.engine.Resubscribed(3 * time.Second)
	c.requestResync()
}

func (c *cluster) requestResync() {
	select {
	case c.resync <- struct{}{}:
	default:
	}
}

// heartbeat keeps the instance registered and its directory alive, and
// sweeps dead instances. (Nodes of accounts deleted elsewhere are closed on
// the auth event, authevents.go, not polled here.) Its Redis
// cost is per instance, not per node (invariant 12): node claims do not
// expire, so they are re-asserted (per node) only after Redis came back or
// the bus resubscribed, when Redis may have lost them.
func (c *cluster) heartbeat(ctx context.Context) {
	a := c.app
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	reassert := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.resync:
			reassert = true
		}
		hctx, cancel := context.WithTimeout(ctx, a.cfg.HeartbeatInterval)
		if err := c.registry.Register(hctx, a.info()); err != nil {
			a.log.Warn("cannot refresh this instance's registration", "err", err)
		}
		if err := c.dir.KeepAlive(hctx); err != nil {
			a.log.Warn("cannot refresh this instance's directory", "err", err)
		}
		if reassert {
			if err := a.hub.RefreshClaims(hctx); err != nil {
				a.log.Warn("cannot re-assert node claims; retrying at the next heartbeat", "err", err)
			} else {
				reassert = false
			}
		}
		live, dead, err := c.registry.Sweep(hctx, a.instanceID, func(ctx context.Context, id string) error {
			if err := c.claims.Purge(ctx, id); err != nil {
				return err
			}
			return c.dir.Purge(ctx, id)
		})
		if err != nil {
			a.log.Warn("cannot sweep dead instances", "err", err)
		} else {
			// The status's instance count: the directory reads the
			// registry only at its (rare) full reads.
			c.instances.Store(int32(live))
		}
		c.lost.add(dead)
		for _, id := range dead {
			a.log.Info("removed a dead instance from the registry", "dead_instance", id)
		}
		cancel()
	}
}

// keepLock refreshes the single-instance lock; losing it is an error an
// operator must see (readiness says so).
func (c *cluster) keepLock(ctx context.Context) {
	t := time.NewTicker(c.app.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := c.lock.Refresh(ctx)
		switch {
		case err != nil:
			c.app.log.Warn("cannot refresh the single-instance lock", "err", err)
		case !ok:
			c.lockLost.Store("another instance took the single-instance lock while Redis was unreachable")
			c.app.log.Error("lost the single-instance lock: another instance holds it; stop one of them")
		default:
			c.lockLost.Store("")
		}
	}
}

// liveIDs lists the live instances (for the directory).
func (c *cluster) liveIDs(ctx context.Context) ([]string, error) {
	ids, alive, err := c.registry.LiveIDs(ctx)
	if err != nil {
		return nil, err
	}
	c.instances.Store(int32(alive))
	return ids, nil
}

// healthy reports whether the rest of the cluster is reachable.
func (c *cluster) healthy() bool {
	return c.redisOK.Load() && (c.dir == nil || c.dir.Healthy())
}

// notReady returns why the cluster makes this instance not ready, or "".
func (c *cluster) notReady() string {
	if !c.redisOK.Load() {
		// The dial error (addresses) is logged by watchRedis, not shown.
		return "Redis is unreachable"
	}
	if msg, _ := c.lockLost.Load().(string); msg != "" {
		return msg
	}
	return ""
}

// drainStart withdraws this instance from the cluster's routing, so other
// instances stop sending it work; its tasks in flight go on.
func (c *cluster) drainStart(a *App) {
	if c.registry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.dir.Withdraw(ctx); err != nil {
		a.log.Warn("cannot withdraw this instance's nodes from the directory", "err", err)
	}
	if err := c.registry.Register(ctx, a.info()); err != nil {
		a.log.Warn("cannot mark this instance draining", "err", err)
	}
}

// deregister is the last step of a drain.
func (c *cluster) deregister(ctx context.Context, a *App) {
	switch {
	case c.registry != nil:
		if err := c.registry.Deregister(ctx, a.instanceID); err != nil {
			a.log.Warn("cannot deregister", "err", err)
		}
	case c.lock != nil:
		if err := c.lock.Release(ctx); err != nil {
			a.log.Warn("cannot release the single-instance lock", "err", err)
		}
	}
}

func (c *cluster) close() { _ = c.rdb.Close() }

// info is what this instance says about itself in the registry.
func (a *App) info() bus.InstanceInfo {
	host, _ := os.Hostname()
	addr := ""
	if a.listener != nil {
		addr = a.listener.Addr().String()
	}
	n := 0
	if a.hub != nil {
		n = a.hub.Len()
	}
	return bus.InstanceInfo{ID: a.instanceID, Name: a.cfg.InstanceName, Host: host, Addr: addr,
		Version: a.cfg.Version, StartedAt: a.started.UTC(), Nodes: n, Draining: a.draining.Load()}
}

// redactURL hides a password in a URL for messages.
func redactURL(u string) string {
	o, err := redis.ParseURL(u)
	if err != nil {
		return "the given URL"
	}
	return o.Addr
}

// follow subscribes to channel and hands each message to onMessage until
// ctx ends; onSubscribed (if not nil) runs on each confirmation of the
// subscription, the first and those after Redis was away (go-redis
// subscribes again on the next receive), when a message may have been
// missed.
func (c *cluster) follow(ctx context.Context, channel string, onMessage func(*redis.Message), onSubscribed func()) {
	ps := c.rdb.Subscribe(ctx, channel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			var ne net.Error
			if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			select { // Redis is away; go-redis resubscribes on the next receive
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			onMessage(m)
		case *redis.Subscription:
			if m.Kind == "subscribe" && onSubscribed != nil {
				onSubscribed()
			}
		}
	}
}
