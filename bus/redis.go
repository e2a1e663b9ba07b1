package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// RedisConfig configures a Redis bus. Zero values take the defaults shown.
type RedisConfig struct {
	Namespace string        // default DefaultNamespace ("sy"): channels are "{ns}:inst:{instance id}"
	Idle      time.Duration // default 2s: with nothing received for this long, ping the subscription
	Logger    *slog.Logger  // default slog.Default()
	// Registerer receives the bus metrics (nil: not registered).
	Registerer prometheus.Registerer
	// OnResubscribe, if set, is called each time a subscription had to be
	// made again after its connection was lost (or, on a Redis Cluster, its
	// slot moved): envelopes may have been missed, so the instance
	// re-asserts its state. It runs on a goroutine the bus owns, one at a
	// time per subscription (a resubscription while it runs calls it once
	// more afterwards), and Close waits for it: it must return promptly.
	OnResubscribe func(instance string)
	// Sharded uses sharded pub/sub (SPUBLISH, SSUBSCRIBE, PUBSUB
	// SHARDNUMSUB; Redis 7). On a Redis Cluster it is required: classic
	// PUBLISH and NUMSUB count only the subscribers of the node asked, so an
	// instance would look gone. Every instance of a cluster must agree. The
	// cluster client must not read from replicas (no ReadOnly,
	// RouteByLatency or RouteRandomly): a subscription on a replica is not
	// counted by the master's SPUBLISH.
	Sharded bool
}

// Redis is the Bus of a cluster: one pub/sub channel per instance on a
// shared Redis. It works with a plain client or a Redis Cluster client.
// On a cluster (Sharded), each channel lives in the slot of its name:
// SPUBLISH and SSUBSCRIBE go to the master serving that slot (go-redis
// routes them by the channel), and so must PUBSUB SHARDNUMSUB, which
// counts only the subscribers of the node asked (Receivers does).
//
// NewRedis starts nothing; Run runs the publish pipelines and every
// subscription's receive loop. Before Run, Subscribe confirms a
// subscription with Redis, and its envelopes wait on its connection until
// Run delivers them, in order; Publish sends from its caller's goroutine
// while no other publish waits, and one that must wait for a pipeline
// waits for Run; Receivers works.
type Redis struct {
	rdb     redis.UniversalClient
	cfg     RedisConfig
	log     *slog.Logger
	metrics *redisMetrics
	batch   *batcher // every Publish goes out through it, in pipelines

	// wg counts the goroutines the bus starts besides the pipelines
	// (receive loops and OnResubscribe calls); Run waits for it.
	wg sync.WaitGroup

	mu      sync.Mutex
	running context.Context // Run's: the parent of every receive loop's context; nil before Run
	closed  bool
	subs    map[*redisSub]struct{}
}

var _ Bus = (*Redis)(nil)

type redisMetrics struct {
	publish *prometheus.HistogramVec
	// publishByKind holds publish's child of each kind once one was
	// published: a WithLabelValues hashes its label and takes the vector's
	// lock on every call.
	publishByKind  [256]atomic.Pointer[prometheus.Observer]
	publishErrors  prometheus.Counter
	noReceiver     prometheus.Counter
	received       prometheus.Counter
	malformed      prometheus.Counter
	resubscribes   prometheus.Counter
	receiverChecks prometheus.Counter
}

// published is publish's child for kind.
func (m *redisMetrics) published(kind Kind) prometheus.Observer {
	if o := m.publishByKind[kind].Load(); o != nil {
		return *o
	}
	o := m.publish.WithLabelValues(kind.String())
	m.publishByKind[kind].Store(&o)
	return o
}

// NewRedis returns a bus on rdb. The caller owns rdb and closes it once
// Run has returned.
func NewRedis(rdb redis.UniversalClient, cfg RedisConfig) *Redis {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Idle == 0 {
		cfg.Idle = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &redisMetrics{
		publish: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "switchyard", Subsystem: "bus", Name: "publish_seconds",
			Help:    "Time to publish one envelope to another instance, by kind.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .5},
		}, []string{"kind"}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "bus", Name: "publish_errors_total",
			Help: "Publishes that failed (Redis unreachable).",
		}),
		noReceiver: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "bus", Name: "publish_no_receiver_total",
			Help: "Publishes that reached no subscriber: the instance addressed is gone.",
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "bus", Name: "received_total",
			Help: "Envelopes received from other instances.",
		}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "bus", Name: "malformed_total",
			Help: "Messages on this instance's channel that were not valid envelopes (dropped).",
		}),
		resubscribes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "bus", Name: "resubscriptions_total",
			Help: "Times the subscription had to be made again after its connection was lost.",
		}),
		receiverChecks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "bus", Name: "receiver_checks_total",
			Help: "PUBSUB NUMSUB calls (liveness checks of other instances).",
		}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(m.publish, m.publishErrors, m.noReceiver, m.received, m.malformed, m.resubscribes, m.receiverChecks)
	}
	return &Redis{rdb: rdb, cfg: cfg, log: cfg.Logger.With("component", "bus"), metrics: m,
		batch: newBatcher(rdb, cfg.Sharded), subs: map[*redisSub]struct{}{}}
}

// Run implements Bus: it runs the publish pipelines and the receive loop
// of every subscription, those made before it included, until ctx ends.
// Then it closes every subscription, answers the publishes still queued
// with ErrClosed, and returns once all it started has stopped.
func (r *Redis) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.closed || r.running != nil {
		r.mu.Unlock()
		return nil // closed already, or run already
	}
	r.running = ctx
	for s := range r.subs {
		r.startLocked(s)
	}
	r.mu.Unlock()
	var pipes sync.WaitGroup
	for range pipelines {
		pipes.Go(func() { r.batch.run(ctx) })
	}
	<-ctx.Done()
	r.mu.Lock()
	r.closed = true
	subs := make([]*redisSub, 0, len(r.subs))
	for s := range r.subs {
		subs = append(subs, s)
	}
	r.mu.Unlock()
	r.batch.close()
	for _, s := range subs {
		_ = s.Close()
	}
	pipes.Wait()
	r.wg.Wait()
	return nil
}

// startLocked starts s's receive loop under Run's context. r.mu is held.
func (r *Redis) startLocked(s *redisSub) {
	s.ctx, s.cancel = context.WithCancel(r.running)
	s.started = true
	r.wg.Add(1) // under mu, after running was set and before closed is: Run's Wait comes after both
	go func() {
		defer r.wg.Done()
		s.loop()
	}()
}

// Channel is the pub/sub channel of an instance.
func (r *Redis) Channel(instance string) string { return r.cfg.Namespace + ":inst:" + instance }

// Publish implements Bus. The receiver count PUBLISH returns is the answer:
// 0 means the instance addressed has no subscription, so it is gone.
func (r *Redis) Publish(ctx context.Context, to string, e *Envelope) (int, error) {
	if r.isClosed() {
		return 0, ErrClosed
	}
	b, err := Encode(e)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	// Sharded, go-redis sends it to the master of the channel's slot,
	// where the receiver's SSUBSCRIBE lives too, so the count is the
	// receiver's.
	n, err := r.batch.publish(ctx, r.Channel(to), b)
	if err != nil {
		r.metrics.publishErrors.Inc()
		return 0, fmt.Errorf("bus: publish %s to %s: %w", e.Kind, to, err)
	}
	r.metrics.published(e.Kind).Observe(time.Since(start).Seconds())
	if n == 0 {
		r.metrics.noReceiver.Inc()
	}
	return int(n), nil
}

// Receivers implements Bus with PUBSUB NUMSUB, or PUBSUB SHARDNUMSUB when
// sharded.
func (r *Redis) Receivers(ctx context.Context, ids []string) (map[string]int, error) {
	if len(ids) == 0 {
		return map[string]int{}, nil
	}
	chans := make([]string, len(ids))
	for i, id := range ids {
		chans[i] = r.Channel(id)
	}
	r.metrics.receiverChecks.Inc()
	var counts map[string]int64
	var err error
	if r.cfg.Sharded {
		if counts, err = r.shardNumSub(ctx, chans); err != nil {
			return nil, err
		}
	} else if counts, err = r.rdb.PubSubNumSub(ctx, chans...).Result(); err != nil {
		return nil, fmt.Errorf("bus: pubsub numsub: %w", err)
	}
	out := make(map[string]int, len(ids))
	for i, id := range ids {
		if n := counts[chans[i]]; n > 0 {
			out[id] = int(n)
		}
	}
	return out, nil
}

// shardNumSub asks PUBSUB SHARDNUMSUB of the node that owns each channel.
// A cluster node answers it for any channel without a redirect, counting
// only its own subscribers, so a question sent to a node of the client's
// choosing reads 0 for a live instance whose slot is elsewhere.
// Channels are grouped by their slot's master: one command per master.
func (r *Redis) shardNumSub(ctx context.Context, chans []string) (map[string]int64, error) {
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		counts, err := r.rdb.PubSubShardNumSub(ctx, chans...).Result()
		if err != nil {
			return nil, fmt.Errorf("bus: pubsub shardnumsub: %w", err)
		}
		return counts, nil
	}
	type group struct {
		node  *redis.Client
		chans []string
	}
	var groups []*group
	byAddr := map[string]*group{}
	for _, ch := range chans {
		node, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			return nil, fmt.Errorf("bus: master of %s: %w", ch, err)
		}
		g := byAddr[node.Options().Addr]
		if g == nil {
			g = &group{node: node}
			byAddr[node.Options().Addr] = g
			groups = append(groups, g)
		}
		g.chans = append(g.chans, ch)
	}
	counts := make(map[string]int64, len(chans))
	for _, g := range groups {
		c, err := g.node.PubSubShardNumSub(ctx, g.chans...).Result()
		if err != nil {
			return nil, fmt.Errorf("bus: pubsub shardnumsub on %s: %w", g.node.Options().Addr, err)
		}
		for _, ch := range g.chans {
			if c[ch] == 0 {
				// Maybe a slot moved (a failover) and the client's map is
				// stale: refresh it, so the confirming check asks the new
				// owner (invariant 4 confirms a zero twice).
				cc.ReloadState(ctx)
			}
			counts[ch] = c[ch]
		}
	}
	return counts, nil
}

// Subscribe implements Bus. It returns once Redis has confirmed the
// subscription; its envelopes are delivered once Run runs.
func (r *Redis) Subscribe(ctx context.Context, id string, h Handler) (Subscription, error) {
	if r.isClosed() {
		return nil, ErrClosed
	}
	s := &redisSub{r: r, id: id, channel: r.Channel(id), h: h, done: make(chan struct{})}
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = s.ps.Close()
		return nil, ErrClosed
	}
	r.subs[s] = struct{}{}
	if r.running != nil {
		r.startLocked(s)
	}
	r.mu.Unlock()
	return s, nil
}

func (r *Redis) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// redisSub is one instance's subscription and its receive loop.
type redisSub struct {
	r       *Redis
	id      string
	channel string
	h       Handler
	done    chan struct{} // closed when the loop has stopped (or, never started, at Close)

	// Set with started by startLocked under r.mu, before the loop begins:
	// its context, cancelled by Close (the sub's, or the bus's at Run's end).
	ctx     context.Context
	cancel  context.CancelFunc
	started bool

	mu     sync.Mutex
	ps     *redis.PubSub
	closed bool
	// An OnResubscribe call is running; again: call it once more after.
	hookRunning, hookAgain bool
}

// open subscribes and waits for Redis's confirmation.
func (s *redisSub) open(ctx context.Context) error {
	ps := s.subscribe(ctx)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := ps.Receive(wctx); err != nil {
		_ = ps.Close()
		return fmt.Errorf("bus: subscribe to %s: %w", s.channel, err)
	}
	s.mu.Lock()
	s.ps = ps
	s.mu.Unlock()
	return nil
}

// loop receives until the subscription is closed. go-redis reconnects a
// broken subscription on the next receive and subscribes again; the
// confirmation that arrives then is how a resubscription is noticed. A
// connection that goes silent (a host that vanished) is noticed by pinging
// it, and replaced; so is one the server unsubscribed (on a cluster, when
// the channel's slot moved to another master).
func (s *redisSub) loop() {
	defer close(s.done)
	unanswered := 0
	backoff := 50 * time.Millisecond
	for {
		s.mu.Lock()
		ps, closed := s.ps, s.closed
		s.mu.Unlock()
		if closed {
			return
		}
		msg, err := ps.ReceiveTimeout(s.ctx, s.r.cfg.Idle)
		if err != nil {
			if s.isClosed() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				unanswered++
				if unanswered < 3 {
					_ = ps.Ping(s.ctx) // the pong, or its absence, shows on the next receive
					continue
				}
				s.r.log.Warn("bus subscription silent; reconnecting", "channel", s.channel)
				// A master that stops answering may be handing its slots
				// over (a failover pauses it): subscribe where the cluster
				// says the slot is now, not where a stale map says.
				s.awaitSlotMap()
				s.replace()
				unanswered = 0
				continue
			}
			// Redis is unreachable: go-redis will reconnect on the next
			// receive. On a cluster the slot may have a new master.
			s.r.log.Debug("bus subscription receive failed", "channel", s.channel, "err", err)
			if cc, ok := s.r.rdb.(*redis.ClusterClient); ok {
				cc.ReloadState(s.ctx)
			}
			select { // pacing the reconnect attempts
			case <-s.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		unanswered, backoff = 0, 50*time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			s.r.metrics.received.Inc()
			e, err := Decode([]byte(m.Payload))
			if err != nil {
				s.r.metrics.malformed.Inc()
				s.r.log.Warn("dropping a malformed envelope", "channel", s.channel, "err", err)
				continue
			}
			s.h(e)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				s.resubscribed()
			case "unsubscribe", "sunsubscribe":
				// Not asked for: the server dropped the subscription
				// (a cluster node does when the channel's slot leaves it).
				if s.isClosed() {
					return
				}
				s.r.log.Info("bus subscription dropped by the server; subscribing again", "channel", s.channel)
				s.awaitSlotMap()
				s.replace()
			}
		}
	}
}

func (s *redisSub) subscribe(ctx context.Context) *redis.PubSub {
	if s.r.cfg.Sharded {
		return s.r.rdb.SSubscribe(ctx, s.channel)
	}
	return s.r.rdb.Subscribe(ctx, s.channel)
}

// resubscribed counts a resubscription and runs OnResubscribe on a
// goroutine the bus owns, one at a time: a resubscription while one runs
// asks for one more run after it.
func (s *redisSub) resubscribed() {
	s.r.metrics.resubscribes.Inc()
	s.r.log.Info("bus subscription restored; re-syncing", "channel", s.channel)
	f := s.r.cfg.OnResubscribe
	if f == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hookRunning {
		s.hookAgain = true
		return
	}
	s.hookRunning = true
	// The loop calling this holds a count in wg, so Add cannot race Wait.
	s.r.wg.Add(1)
	go func() {
		defer s.r.wg.Done()
		for {
			f(s.id)
			s.mu.Lock()
			if !s.hookAgain || s.ctx.Err() != nil {
				s.hookRunning, s.hookAgain = false, false
				s.mu.Unlock()
				return
			}
			s.hookAgain = false
			s.mu.Unlock()
		}
	}()
}

// awaitSlotMap waits (up to 5 s) until the cluster client's slot map names
// the master that the cluster itself says serves the channel. A dropped
// subscription means the slot moved; subscribing again on a stale map would
// land on the old master, now a replica, which accepts SSUBSCRIBE but is not
// where SPUBLISH counts receivers: the instance would look gone.
func (s *redisSub) awaitSlotMap() {
	cc, ok := s.r.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	for range 100 {
		cc.ReloadState(s.ctx)
		select { // the client reloads its map in the background
		case <-s.ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		slot, err := cc.ClusterKeySlot(s.ctx, s.channel).Result()
		if err != nil {
			continue
		}
		//lint:ignore SA1019 CLUSTER SLOTS names each slot range's serving master first, all this compares; SHARDS lists failed nodes too
		slots, err := cc.ClusterSlots(s.ctx).Result()
		if err != nil {
			continue
		}
		node, err := cc.MasterForKey(s.ctx, s.channel)
		if err != nil {
			continue
		}
		for _, r := range slots {
			if slot >= int64(r.Start) && slot <= int64(r.End) && len(r.Nodes) > 0 && r.Nodes[0].Addr == node.Options().Addr {
				return
			}
		}
	}
}

// replace swaps a silent or dropped PubSub for a fresh one.
func (s *redisSub) replace() {
	s.mu.Lock()
	old := s.ps
	s.mu.Unlock()
	_ = old.Close()
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	ps := s.subscribe(ctx)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ps.Close()
		return
	}
	s.ps = ps
	s.mu.Unlock()
}

func (s *redisSub) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close implements Subscription. It returns when the loop has stopped
// (a subscription closed before Run has none).
func (s *redisSub) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	ps := s.ps
	s.mu.Unlock()
	// Out of the set first: Run starts no loop for it after this.
	s.r.mu.Lock()
	delete(s.r.subs, s)
	started := s.started
	s.r.mu.Unlock()
	if started {
		s.cancel()
	}
	err := ps.Close()
	if started {
		<-s.done
	} else {
		close(s.done)
	}
	return err
}
