package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/ratelimit"
)

// cluster is the state an instance shares through Redis: in multi-instance
// mode the bus, registry, claims and directory; with --multi-instance=false
// only the rate limits and the single-instance lock.
type cluster struct {
	app      *App
	conn     *bus.RedisConn
	control  *bus.RedisControl
	figures  *bus.Figures // multi-instance only
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
	lost      lostInstances  // instances the sweep found dead: the pump releases their leases
}

// connectCluster connects to Redis and builds the shared parts. Boot fails
// if Redis cannot be reached, or (single mode) another instance holds the lock.
func (a *App) connectCluster(ctx context.Context) (*cluster, error) {
	cfg := a.cfg
	conn, err := bus.DialRedis(ctx, cfg.RedisURL, cfg.RedisCluster)
	if err != nil {
		return nil, err
	}
	rdb := conn.Client()
	c := &cluster{app: a, conn: conn, resync: make(chan struct{}, 1), changes: nodes.NewChanges()}
	a.cluster = c // closed by closeAll from here on
	c.redisOK.Store(true)
	c.control = bus.NewRedisControl(rdb, cfg.Namespace, cfg.RedisCluster)
	c.limiter = ratelimit.NewRedis(rdb, ratelimit.RedisPrefix(cfg.Namespace))
	if !cfg.Multi() {
		c.lock = bus.NewLock(rdb, cfg.Namespace, cfg.LivenessTTL, a.info())
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
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
	c.figures = bus.NewFigures(rdb, cfg.Namespace, demandTTL)
	c.claims = nodes.NewRedisClaims(rdb, nodes.RedisClaimsConfig{Namespace: cfg.Namespace, TTL: cfg.LivenessTTL, Logger: a.log, Registerer: a.registry})
	return c, nil
}

// wire builds the cluster directory over the hub once it exists. The hub
// was given c.changes (its Changes) and c.replaced (its OnReplaced) in
// its config, so nothing is set on it afterwards.
func (c *cluster) wire(a *App) {
	c.dir = nodes.NewClusterDirectory(a.hub, c.conn.Client(), c.liveIDs, nodes.ClusterConfig{
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

// startLoops starts the cluster's loops in s (the App's loops stage).
func (c *cluster) startLoops(s *stage) {
	g := c.app.group
	g.start(s, "Redis watch", forever(c.watchRedis))
	if c.lock != nil {
		g.start(s, "single-instance lock", forever(c.keepLock))
	}
	if c.registry != nil {
		g.start(s, "heartbeat", forever(c.heartbeat))
		g.start(s, "cluster directory", c.dir.Run)
		g.start(s, "figures", forever(c.publishFigures))
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
		err := c.conn.Ping(pctx)
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
func (c *cluster) drainStart(base context.Context, a *App) {
	if c.registry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(base, a.cfg.DrainWithdrawTimeout)
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

func (c *cluster) close() { _ = c.conn.Close() }

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
