package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	asyncq "github.com/switchyard-dev/switchyard/async"
	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/idempotency"
	"github.com/switchyard-dev/switchyard/internal/gcfloor"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/ratelimit"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/streamlog"
	"github.com/switchyard-dev/switchyard/tasks"
	"github.com/switchyard-dev/switchyard/webhooks"
)

// App is one switchyard instance: every component, wired, and the HTTP
// server in front of them. New builds it; Run serves until its context
// ends and then drains.
type App struct {
	cfg        Config
	log        *slog.Logger
	instanceID string
	started    time.Time

	registry        *prometheus.Registry
	store           store.Store
	writer          *store.Writer
	rep             *store.Reputation
	limiter         ratelimit.Limiter
	inflight        ratelimit.InFlight     // --max-inflight-per-key (inflight.go)
	quota           ratelimit.Quota        // token quotas per key (quota.go)
	quotaKeys       quotaKeys              // which keys have token limits, and their counters' seeding (quota.go)
	quotaHolds      quotaHolds             // the quota holds of the tasks admitted here, until they end (quota.go)
	keyLimits       keyLimitsCache         // async tasks' keys' limits, as claims judge them (quota.go)
	orphanSpends    chan store.UsageReport // orphaned tasks' tokens waiting to be spent (quota.go: spendOrphans)
	quotaRefused    prometheus.Counter
	quotaErrors     prometheus.Counter
	tokens          *prometheus.CounterVec // tokens reported, by task type and kind
	inflightRefused prometheus.Counter
	inflightErrors  prometheus.Counter
	idem            idempotency.Store      // Idempotency-Key claims and answers (idempotency.go)
	idemTotal       *prometheus.CounterVec // requests with an Idempotency-Key, by outcome
	idemWaiting     prometheus.Gauge       // requests waiting for an earlier one's answer
	rlm             *ratelimit.Metrics
	bus             bus.Bus
	sub             bus.Subscription
	hub             *nodes.Hub
	engine          *tasks.Engine
	pump            *asyncq.Pump   // async tasks (asyncq.go)
	tracker         *tasks.Tracker // the engine's requester side, for status and task lookup
	replaced        prometheus.Counter
	auth            *authCache
	metrics         *httpMetrics
	dir             nodes.Directory
	// webhooks delivers the outbox's webhooks (package webhooks): the async
	// queue enqueues through it. Built with the store; its Run stops after
	// the HTTP server and before the store closes. hooks is its outbox and
	// the accounts' secrets.
	webhooks *webhooks.Dispatcher
	hooks    store.WebhookStore

	// Shared state, with a Redis URL (nil otherwise): see cluster.go.
	cluster *cluster
	// control carries what every instance must hear (auth events, the
	// async pumps' events): in memory alone, on Redis with a Redis URL.
	control  bus.Control
	keyCheck chan struct{} // cap 1: check the keys in use now (auth events may have been missed)

	// Resumable streams (taskstream.go): with both set before the routes
	// are built, GET /api/v1/tasks/{id}/stream is served; nil, it is not.
	streams       streamlog.Log
	authorizeTask TaskAuthorizer
	keepAlive     time.Duration   // between comments on an idle task stream
	streamsStop   context.Context // done once the HTTP server begins to shut down
	stopStreams   context.CancelFunc
	streamsOpen   atomic.Int64 // task streams being served

	echo     *echo.Echo
	http     *http.Server
	listener net.Listener
	pprof    *pprofServer // --pprof-listen; nil: none

	// The stages the drain ends one at a time (lifecycle.go), made by New,
	// and the group every component runs in, made by Run. root is the loops'
	// stage: it bounds everything long-lived that is not a component (node
	// sessions, bus publishes made for the hub); it ends only late in the
	// drain, never with a request.
	stages   stages
	group    *group
	root     context.Context
	draining atomic.Bool

	reports reportCache // the overview's reputations (overview.go)

	statusMu    sync.Mutex
	statusAt    time.Time
	statusToday int64
}

// New builds an instance from cfg: it checks the configuration, opens (and
// migrates) the store, connects to Redis, confirms the bus subscription,
// binds the listen addresses and announces the instance. It starts no
// goroutine: nothing is served or run until Run. If it fails part-way it
// closes what it had opened.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &App{
		cfg:        cfg,
		instanceID: uuid.Must(uuid.NewV7()).String(),
		started:    time.Now(),
		registry:   prometheus.NewRegistry(),
		keyCheck:   make(chan struct{}, 1),
	}
	a.log = cfg.Logger.With("instance", cfg.InstanceName)
	// The stages outlive ctx (it may be a boot deadline): only the drain
	// ends them. Making them starts nothing.
	a.stages = newStages(context.WithoutCancel(ctx))
	a.root = a.stages.loops.ctx
	a.streamsStop, a.stopStreams = context.WithCancel(a.root)
	a.keepAlive = defaultKeepAlive
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ok := false
	defer func() {
		if !ok {
			a.shutdown() // what was built so far
		}
	}()

	if err := a.openStore(ctx); err != nil {
		return nil, err
	}
	claims, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	a.buildEngine(claims)
	a.buildPump()
	a.registerMetrics()

	// The subscription is confirmed before the instance announces itself,
	// so it never misses a reply to something another instance saw it offer.
	sub, err := a.bus.Subscribe(ctx, a.instanceID, a.handleEnvelope)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe: %w", err)
	}
	a.sub = sub

	a.newInflight()
	a.newIdempotency()
	a.newQuota()
	a.echo = a.routes()
	if a.http, a.listener, err = a.listen(httpLimitsFor(cfg)); err != nil {
		return nil, err
	}
	// Task streams follow for as long as their task runs: Shutdown would
	// wait for them, so they end when it begins (clients resume elsewhere).
	a.http.RegisterOnShutdown(a.stopStreams)
	if a.pprof, err = listenPprof(cfg.PprofListen, a.log); err != nil {
		return nil, err
	}
	// Announced last: with its subscription confirmed and its address bound.
	if a.cluster != nil {
		if err := a.cluster.start(ctx, a); err != nil {
			return nil, err
		}
	}
	ok = true
	return a, nil
}

// openStore opens (and migrates) the store, with the task-record writer,
// the reputation cache and the API-key cache in front of it.
func (a *App) openStore(ctx context.Context) error {
	st, err := store.Open(ctx, store.Options{DataDir: a.cfg.DataDir, DatabaseURL: a.cfg.DatabaseURL, Logger: a.log})
	if err != nil {
		return err
	}
	a.store = st
	a.writer = store.NewWriter(st, store.WriterConfig{FlushInterval: a.cfg.StoreFlushInterval, FinalFlushTimeout: a.cfg.DrainFlushTimeout,
		Registerer: a.registry, Logger: a.log})
	a.rep = store.NewReputation(st, a.writer, store.ReputationConfig{Logger: a.log})
	a.rlm = ratelimit.NewMetrics(a.registry)
	a.auth = newAuthCache(st, authFailureLimit(a.cfg.AuthFailureRate))
	a.hooks = st.Webhooks()
	a.webhooks, err = webhooks.New(webhooks.Config{
		Instance: a.instanceID, AllowPrivate: a.cfg.WebhookAllowPrivate, Logger: a.log, Registerer: a.registry,
	}, webhooks.Deps{Store: a.hooks})
	return err
}

// connect sets up what the mode (the modes in docs/OPERATIONS.md) decides: the bus, the
// limiter and the node claims, in memory or (with Redis) shared.
func (a *App) connect(ctx context.Context) (nodes.Claims, error) {
	if a.cfg.RedisURL == "" {
		a.limiter = ratelimit.NewMemory(ratelimit.MemoryConfig{})
		a.control = bus.NewMemoryControl()
		a.bus = bus.NewMemory()
		return nodes.NewMemoryClaims(), nil
	}
	c, err := a.connectCluster(ctx)
	if err != nil {
		return nil, err
	}
	a.limiter, a.control = c.limiter, c.control
	if a.cfg.Multi() {
		a.bus = c.bus
		return c.claims, nil
	}
	a.bus = bus.NewMemory()
	return nodes.NewMemoryClaims(), nil
}

// buildEngine builds the task side whole, in one call; it builds the hub
// (and, in a cluster, the directory in front of it) around itself, as
// their Events.
func (a *App) buildEngine(claims nodes.Claims) {
	cfg := a.cfg
	hubCfg := nodes.Config{
		Instance: a.instanceID, MaxNodesPerAccount: cfg.MaxNodesPerAccount, DefaultConcurrency: cfg.DefaultConcurrency,
		PingInterval: cfg.PingInterval, RegisterTimeout: cfg.RegisterTimeout, MaxMessageBytes: cfg.MaxMessageBytes, Logger: a.log, Registerer: a.registry,
		QuarantineAfter: cfg.QuarantineAfter, QuarantineCoolOff: cfg.QuarantineCoolOff,
	}
	if !cfg.NoNodeBenchmarks {
		hubCfg.Benchmarks, hubCfg.BenchmarkMaxAge = benchStore{a.store}, cfg.BenchmarkMaxAge
	}
	hubCfg.BeforeAttach = a.nodeArriving
	// The pump is built right after the engine, before any node can
	// connect (nothing is served until Run).
	hubCfg.LocalSlots = func() { a.pump.Nudge() }
	if cfg.Multi() {
		hubCfg.Changes, hubCfg.OnReplaced = a.cluster.changes, a.cluster.replaced
		hubCfg.Announce = a.cluster.announce // invariant 11: published before node_registered
	}
	deps := tasks.Deps{Bus: a.bus, Recorder: recorder{a}, Standings: standings{a},
		Nodes: func(ev nodes.Events) tasks.NodeSide {
			a.hub = nodes.NewHub(hubCfg, nodeAuth{a}, claims, ev)
			if !cfg.Multi() {
				a.dir = a.hub
				return tasks.NodeSide{Sessions: a.hub, Directory: a.hub}
			}
			a.cluster.wire(a)
			a.dir = a.cluster.dir
			return tasks.NodeSide{Sessions: a.hub, Directory: a.cluster.dir}
		}}
	if cfg.Multi() {
		deps.Affinity = nodes.NewRedisAffinity(a.cluster.conn.Client(), nodes.AffinityPrefix(cfg.Namespace), 0)
		deps.Liveness, deps.Health = a.cluster.registry, clusterHealth{a.cluster}
	}
	a.engine = tasks.New(tasks.Config{
		Instance: a.instanceID, TaskTimeout: cfg.TaskTimeout, StreamMax: cfg.StreamMax, QueueTimeout: cfg.QueueTimeout, TaskRetries: cfg.TaskRetries, Hedge: cfg.Hedge,
		ResultMaxBytes: cfg.ResultMaxBytes, WatchInterval: cfg.WatchInterval, NoWatcher: cfg.UnsafeNoWatcher,
		Logger: a.log, Registerer: a.registry,
	}, deps)
	a.tracker = a.engine.Tracker()
}

// buildPump builds the async side over the engine: local nodes only, the
// cluster's events and lost instances with Redis, in-process alone.
func (a *App) buildPump() {
	a.streams = a.newStreamLog()
	a.authorizeTask = a.authorizeAsyncStream
	deps := asyncq.Deps{Queue: a.store, Runner: a.engine, Local: localNodes{a}, Webhooks: a.webhooks, Streams: a.streams,
		Admission: asyncAdmission{a}}
	deps.Broadcast = asyncBroadcast{a.control}
	if a.cfg.Multi() {
		deps.Lost = a.cluster.lost.list
	}
	a.pump = asyncq.New(asyncq.Config{Instance: a.instanceID, Logger: a.log, Registerer: a.registry}, deps)
}

// registerMetrics registers the App's own metrics (the components
// register theirs).
func (a *App) registerMetrics() {
	a.replaced = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "replace_closes_total",
		Help: "Local node sockets closed because another instance has a newer connection of the node.",
	})
	a.registry.MustRegister(a.replaced,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "tasks", Name: "in_flight",
			Help: "Tasks waiting for their outcome on this (requesting) instance."}, func() float64 { return float64(a.engine.Requesting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "tasks", Name: "forwarding",
			Help: "Tasks held by nodes connected to this (owning) instance."}, func() float64 { return float64(a.engine.Forwarding()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "tasks", Name: "cancelled_holding",
			Help: "Cancelled tasks still running on nodes of this instance that do not take task_cancel: their slots stay taken until they answer."},
			func() float64 { return float64(a.engine.Holding()) }),
		newDemandGauges(a),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "tasks", Name: "streams_open",
			Help: "Clients following a task's resumable stream (GET /api/v1/tasks/{id}/stream) on this instance."}, func() float64 { return float64(a.streamsOpen.Load()) }),
	)
	a.metrics = newHTTPMetrics(a.registry)
}

// Addr is the address the instance listens on.
func (a *App) Addr() string { return a.listener.Addr().String() }

// InstanceID is this process's unique instance id.
func (a *App) InstanceID() string { return a.instanceID }

// Store is the instance's store (tests and the CLI use it).
func (a *App) Store() store.Store { return a.store }

// Webhooks returns the instance's webhook dispatcher (for the async queue,
// and tests).
func (a *App) Webhooks() *webhooks.Dispatcher { return a.webhooks }

// Run serves until ctx ends, then drains (invariant 9): it stops
// taking requests and nodes, reports not ready, lets tasks in flight
// finish up to the drain timeout, closes node sockets with 1001, flushes
// the store and closes everything. Every component runs in one errgroup
// (lifecycle.go); one that fails on its own makes the instance drain as
// above, and Run returns its error once the drain is done.
func (a *App) Run(ctx context.Context) error {
	if a.cfg.GCHeapFloorBytes > 0 {
		if stop, ok := gcfloor.Start(uint64(a.cfg.GCHeapFloorBytes)); ok {
			defer stop()
		}
	}
	// The drain runs after ctx has ended: its budgets come from a context
	// that ctx's end does not cancel.
	base := context.WithoutCancel(ctx)
	a.group = newGroup(a.log)
	g, st := a.group, &a.stages
	g.start(st.writer, "store writer", a.writer.Run)
	g.start(st.webhooks, "webhooks", a.webhooks.Run)
	g.start(st.bus, "bus", a.bus.Run)
	g.start(st.streams, "task streams", a.streams.Run)
	g.start(st.spends, "orphan spends", a.spendOrphans)
	g.start(st.engine, "task engine", a.engine.Run)
	// Nodes connect once the engine runs: its owner side can then pass
	// their answers to other instances.
	<-a.engine.Ready()
	g.start(st.pump, "async pump", a.pump.Run)
	a.startLoops(st.loops)
	g.start(st.loops, "http server", func(context.Context) error {
		// It ends when the drain shuts the server down (ErrServerClosed).
		if err := a.http.Serve(a.listener); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	a.log.Info("switchyard is serving", "addr", a.Addr(), "instance_id", a.instanceID, "store", a.storeKind())

	select {
	case <-ctx.Done():
	case <-g.failed:
	}
	a.drain(base)
	return g.wait()
}

// stages are the App's stages (lifecycle.go), in the order the drain ends
// them.
type stages struct {
	pump     *stage // the async pump: first, so its running tasks stop unended before node sockets close
	loops    *stage // the App's own loops, the cluster's, and the HTTP server: the root context
	engine   *stage // the task engine, after the bus subscription is closed (nothing reaches it any more)
	spends   *stage // the orphaned tasks' quota spends, after the engine (whose owner makes them), before the Redis client closes
	streams  *stage // the task streams' log, before the Redis client closes
	bus      *stage // the bus, after the engine, whose publishers use it
	webhooks *stage // webhook sends: released for the next instance, before the store closes
	writer   *stage // the task-record writer: its final flush, before the store closes
}

func newStages(base context.Context) stages {
	return stages{pump: newStage(base), loops: newStage(base), engine: newStage(base), spends: newStage(base), streams: newStage(base),
		bus: newStage(base), webhooks: newStage(base), writer: newStage(base)}
}

// startLoops starts the App's own loops, and the cluster's, in s.
func (a *App) startLoops(s *stage) {
	g := a.group
	g.start(s, "auth events", forever(a.watchAuthEvents)) // invariant 15
	g.start(s, "key checks", forever(a.checkKeys))        // invariant 15: revoked keys' nodes go
	g.start(s, "async events", forever(a.watchAsyncEvents))
	// Instances that share a database converge on each node's counters.
	g.start(s, "reputation refresh", a.rep.Run)
	if a.pprof != nil {
		g.start(s, "profiling endpoint", a.pprof.Run)
	}
	if a.cluster != nil {
		a.cluster.startLoops(s)
	}
}

func (a *App) storeKind() string {
	if a.cfg.DatabaseURL != "" {
		return "postgres"
	}
	return "sqlite"
}

// drain is the orderly stop, after Run's context ended (base is its
// context without the end). Each step is bounded by its budget (Config's
// Drain…Timeout fields; StopBudget is their sum) or is prompt.
func (a *App) drain(base context.Context) {
	start := time.Now()
	// The pump first: once the instance says it is draining, it claims
	// no async task (TestAsyncDrainFinishesRunningTasks).
	a.pump.Drain()
	a.draining.Store(true)
	a.engine.Drain()
	a.log.Info("draining", "in_flight", a.engine.Requesting(), "forwarding", a.engine.Forwarding(), "timeout", a.cfg.DrainTimeout,
		"stop_budget", a.cfg.StopBudget())
	if a.cluster != nil {
		a.cluster.drainStart(base, a)
	}

	deadline := time.Now().Add(a.cfg.DrainTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	for (a.engine.Requesting() > 0 || a.engine.Forwarding() > 0) && time.Now().Before(deadline) {
		<-tick.C
	}
	tick.Stop()
	if n := a.engine.Requesting() + a.engine.Forwarding(); n > 0 {
		a.log.Warn("drain timeout: tasks still in flight will fail", "tasks", n)
	}

	// Async tasks still running stop here unended, before their nodes'
	// sockets close (which would fail them): their leases lapse and
	// another instance runs them again.
	a.stages.pump.stop()
	ctx, cancel := context.WithTimeout(base, a.cfg.DrainCloseTimeout)
	defer cancel()
	if err := a.hub.Shutdown(ctx); err != nil {
		a.log.Warn("closing node connections", "err", err)
	}
	if err := a.http.Shutdown(ctx); err != nil {
		a.log.Warn("closing HTTP connections", "err", err)
	}
	// The loops (the heartbeat among them) stop before the instance
	// deregisters, so that none registers it again.
	a.stages.loops.stop()
	if a.cluster != nil {
		a.cluster.deregister(ctx, a)
	}
	a.shutdown()
	a.log.Info("stopped", "drain", time.Since(start).Round(time.Millisecond))
}

// shutdown ends the stages still running and closes what New opened, in
// the order that loses nothing: the subscription before the engine (nothing
// reaches it any more), the engine before the bus its publishers use, the
// task streams before the Redis client closes, webhook sends (released for
// the next instance) and the writer's final flush before the store, the
// store last. After a drain the pump and loops have stopped already; when
// New failed part-way nothing runs (stopping a stage is then only the end of
// its context) and it closes what was built. Every Close here is idempotent.
func (a *App) shutdown() {
	a.stages.pump.stop()
	a.stages.loops.stop()
	if a.listener != nil {
		_ = a.listener.Close()
	}
	if a.pprof != nil {
		_ = a.pprof.Close()
	}
	if a.sub != nil {
		_ = a.sub.Close()
	}
	a.stages.engine.stop()  // after the subscription: nothing reaches it any more
	a.stages.spends.stop()  // after the engine, which makes them: what is queued is spent
	a.stages.streams.stop() // before the Redis client closes
	a.stages.bus.stop()     // after the engine, whose publishers use it
	if a.limiter != nil {
		_ = a.limiter.Close()
	}
	if m, ok := a.control.(*bus.MemoryControl); ok {
		_ = m.Close()
	}
	if a.cluster != nil {
		a.cluster.close()
	}
	// Webhook sends in flight are released for the next instance, and the
	// writer writes what is buffered: both before the store closes, at
	// once, within DrainFlushTimeout (a send settles within 5s).
	a.stages.webhooks.cancel()
	a.stages.writer.stop()
	a.stages.webhooks.stop()
	if a.store != nil {
		_ = a.store.Close()
	}
}

// nodeArriving loads a node's reputation before it can be routed to, and
// remembers its name for the leaderboard. Best effort: a slow store must
// not keep a node out.
func (a *App) nodeArriving(ctx context.Context, nodeID, accountID, name string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.rep.Load(ctx, []string{nodeID}); err != nil {
		a.log.Warn("cannot load node reputation", "node_id", nodeID, "err", err)
	}
	if err := a.store.RecordNode(ctx, nodeID, accountID, name); err != nil {
		a.log.Warn("cannot record node", "node_id", nodeID, "err", err)
	}
}

// handleEnvelope is the bus handler: task traffic goes to the engine; a
// replace (another instance has a newer connection of a node) is node
// ownership, so it goes to the hub (invariant 1). Neither blocks.
func (a *App) handleEnvelope(e *bus.Envelope) {
	if e.Kind == bus.KindReplace {
		if a.hub.CloseReplaced(e.NodeID, e.Gen) {
			a.replaced.Inc()
		}
		return
	}
	if e.Kind == bus.KindControl {
		// From the instance that took the request (it checked who may).
		if _, err := a.hub.Control(e.NodeID, e.Reason, e.Content); err != nil {
			a.log.Info("cannot apply a node state change from another instance", "node_id", e.NodeID, "action", e.Reason, "err", err)
		}
		return
	}
	a.engine.HandleEnvelope(e)
}

// standings is routing's view of each node's reputation.
type standings struct{ a *App }

func (s standings) Standing(nodeID string, now time.Time) nodes.Standing {
	v := s.a.rep.ViewAt(nodeID, now)
	return nodes.Standing{Score: v.Score, AvgMs: v.AvgMs, Suspended: v.Suspended}
}

// clusterHealth tells the engine whether the rest of the cluster is reachable.
type clusterHealth struct{ c *cluster }

func (h clusterHealth) Healthy() bool { return h.c.healthy() }

// recorder hands finished tasks to the store's batch writer and the
// reputation cache.
type recorder struct{ a *App }

func (r recorder) RecordTask(rec store.TaskRecord) {
	r.a.spendTokens(rec)
	r.a.writer.AddTask(rec)
}
func (r recorder) RecordOutcome(o store.Outcome) { r.a.rep.Observe(o) }
func (r recorder) RecordUsage(rep store.UsageReport, unseen bool) {
	r.a.writer.AddUsage(rep)
	if unseen {
		r.a.spendOrphan(rep)
	}
}

// benchStore keeps node benchmark profiles in the store, where every
// instance sees them.
type benchStore struct{ st store.Store }

func (b benchStore) Last(ctx context.Context, nodeID string) (nodes.BenchmarkProfile, error) {
	raw, _, err := b.st.Benchmark(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		return nodes.BenchmarkProfile{}, nodes.ErrNoBenchmark
	}
	if err != nil {
		return nodes.BenchmarkProfile{}, err
	}
	var p nodes.BenchmarkProfile
	return p, json.Unmarshal(raw, &p)
}

func (b benchStore) Save(ctx context.Context, p nodes.BenchmarkProfile) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return b.st.SaveBenchmark(ctx, p.NodeID, raw, time.Unix(p.Timestamp, 0))
}

// nodeAuth resolves node API keys through the same cache as the API.
type nodeAuth struct{ a *App }

func (n nodeAuth) AuthenticateNode(ctx context.Context, key string) (nodes.Account, error) {
	acct, err := n.a.auth.authenticate(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nodes.Account{}, nodes.ErrUnknownKey
	case err != nil:
		return nodes.Account{}, err
	}
	if !acct.KeyLimits.MayServe() {
		return nodes.Account{}, nodes.ErrClientKey
	}
	return nodes.Account{ID: acct.ID, Trust: acct.Trust, KeyPrefix: keyPrefix(key), TaskTypes: acct.KeyLimits.TaskTypes}, nil
}
