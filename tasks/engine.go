package tasks

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
)

// Config configures an Engine. Zero values take the defaults shown.
type Config struct {
	Instance    string        // this instance's id (required)
	MaxAttempts int           // default 3: nodes tried before "no node"
	TaskTimeout time.Duration // default 60s: a plain task's deadline; a stream's limit between chunks
	StreamMax   time.Duration // default 600s: a stream's total limit
	// QueueTimeout (default 10s) is how long a request waits for a free
	// slot when every capable node is full, before it fails with nodes_busy.
	QueueTimeout time.Duration
	// TaskRetries (default 1; negative: none) is how many times a task
	// whose node failed it is run again on another node, unless the
	// request asks for another number (Request.Retries; retry.go).
	TaskRetries int
	// Hedge names the task types whose plain tasks get a second copy on
	// another node when the first has not answered within the type's delay
	// (hedge.go); nil for none.
	Hedge          map[string]time.Duration
	ResultMaxBytes int64         // default 1 MiB: over all chunks together, and for the final result
	WatchInterval  time.Duration // default 250ms between the watcher's checks
	// NoWatcher turns the owner-liveness watcher off (--unsafe-no-watcher):
	// tasks of a dead instance then wait for their deadline.
	NoWatcher bool
	// OutboundQueue (default 1024 envelopes) bounds the replies the bus
	// handler hands to the publisher instead of publishing them itself
	// (invariant 13). Overflow drops the reply and counts it.
	OutboundQueue int
	// StreamQueueBytes (default 256 KiB) bounds the chunks waiting for one
	// streaming task's client on the requesting instance, each charged its
	// delta plus ChunkOverhead (so at most StreamQueueBytes/ChunkOverhead
	// of them). A client that falls further behind its node fails with
	// stream_overflow, and the node is told to stop (invariant 13).
	StreamQueueBytes int64
	// StreamBufferBytes (default 64 MiB) bounds the same over every task
	// of this instance together: one instance's memory for unread chunks.
	StreamBufferBytes int64
	Logger            *slog.Logger          // default slog.Default()
	Registerer        prometheus.Registerer // where the metrics go; nil: not registered
}

// DefaultConfig is the engine's defaults, each field as a zero value
// takes it (server.DefaultConfig takes its task figures from here).
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = 60 * time.Second
	}
	if c.StreamMax == 0 {
		c.StreamMax = 600 * time.Second
	}
	if c.TaskRetries == 0 {
		c.TaskRetries = 1
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = 10 * time.Second
	}
	if c.ResultMaxBytes == 0 {
		c.ResultMaxBytes = 1 << 20
	}
	if c.WatchInterval == 0 {
		c.WatchInterval = 250 * time.Millisecond
	}
	if c.OutboundQueue == 0 {
		c.OutboundQueue = 1024
	}
	if c.StreamQueueBytes == 0 {
		c.StreamQueueBytes = 256 << 10
	}
	if c.StreamBufferBytes == 0 {
		c.StreamBufferBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Bus is the part of bus.Bus the engine uses: it publishes envelopes and
// asks how many subscribers an instance has. The subscription itself is
// the caller's, which hands what arrives to HandleEnvelope.
type Bus interface {
	Publish(ctx context.Context, to string, e *bus.Envelope) (int, error)
	Receivers(ctx context.Context, ids []string) (map[string]int, error)
}

// Directory is routing's view of the nodes (the Hub, or a cluster
// directory in front of it), with the hints the dispatcher gives it.
type Directory interface {
	// Candidates appends the online nodes with capability to dst.
	Candidates(dst []nodes.Candidate, capability string) []nodes.Candidate
	// WaitSlot queues a request that found every node with capability
	// full; the waiter is woken when a slot may have freed for it.
	WaitSlot(capability string, p nodes.Place) *nodes.Waiter
	// Hidden reports that nodes with capability exist, on an instance that
	// is gone or out of reach for now (they reconnect elsewhere soon).
	Hidden(capability string) bool
	// MarkFull says the owner refused an assign for want of a free slot: a
	// remote view may be a second old, so the next pick goes elsewhere.
	MarkFull(nodeID string)
	// MarkGone says an instance cannot take tasks (gone or draining).
	MarkGone(instance string)
	// Reserve takes a slot of a remote node before a task is sent to it,
	// one slot fewer there until release is called (the attempt ended) or
	// the node's owner rewrites its entry, whichever comes first. The owner
	// may never rewrite it: a slot taken and given back within one of its
	// flush gaps is no change to write. ok false: this instance already
	// counts the node full, and nothing is taken.
	Reserve(nodeID string) (release func(), ok bool)
	// Refresh re-reads the cluster's nodes before a request is refused for
	// want of one (invariant 11); an error means there was nothing new to
	// read (one instance) or the read failed.
	Refresh(ctx context.Context) error
}

// Recorder keeps what is known of finished tasks (the store's batch writer
// and the reputation cache). It must not block.
type Recorder interface {
	// RecordTask takes a task's record from its requester, once per
	// request.
	RecordTask(rec store.TaskRecord)
	// RecordOutcome takes a node's outcome for its reputation.
	RecordOutcome(o store.Outcome)
	// RecordUsage takes what a node connected here reported for a task it
	// ran (tokens, time, result size), once per task and node, whatever
	// became of the task's requester (owner.result). unseen says that no
	// requester was told the answer's usage (its client or its instance
	// had left, the task was cancelled on a node that was not told, or
	// the answer was too large to pass on): nobody else will count its
	// tokens toward its key's limits.
	RecordUsage(r store.UsageReport, unseen bool)
}

// Standings is routing's view of each node's reputation.
type Standings interface {
	// Standing is the node's standing judged at now: routing reads the
	// clock once for all the candidates of a pick.
	Standing(nodeID string, now time.Time) nodes.Standing
}

// Liveness tells which instances still hold their alive key: the backstop
// for a host that vanished without closing its sockets (bus.Registry).
type Liveness interface {
	Alive(ctx context.Context, ids []string) (map[string]bool, error)
}

// Health reports whether the rest of the cluster is reachable (Redis is
// up). When it is not, a task no local node can run fails with 503
// unavailable rather than 404.
type Health interface {
	Healthy() bool
}

// NodeSide is what the engine needs of this instance's node connections.
type NodeSide struct {
	Sessions  Sessions  // this instance's sessions by node id: the Hub
	Directory Directory // routing's view: the Hub, or a cluster directory in front of it
}

// Deps are the engine's collaborators, passed once at construction. Bus and
// Nodes are required; the rest default to doing nothing (no records, a
// neutral standing, no alive-key backstop, the cluster always healthy).
type Deps struct {
	Bus Bus
	// Nodes builds the node side (the nodes.Hub, and the directory in front
	// of it) with the engine as its nodes.Events. New calls it once, before
	// it returns. The Hub takes its Events at construction and the engine
	// needs the Hub's sessions and directory, so one of the two must build
	// the other: the engine asks for its node side to be built around it,
	// rather than being handed a Hub and told its Events later (no setter,
	// and nothing to forget before the first node connects).
	Nodes     func(events nodes.Events) NodeSide
	Recorder  Recorder
	Standings Standings
	Liveness  Liveness
	Health    Health
	// Affinity remembers the node that served each session last
	// (Request.Session); nil: a MemoryAffinity of this instance.
	Affinity nodes.Affinity
}

// Engine is the task side of one instance, whole: the requester side
// (dispatcher and tracker), the owner side (forwarding table and this
// instance's node sessions), the watcher and the outbound publisher. New
// builds it and starts nothing; Run runs the watcher and the publishers.
// Tasks run (RunTask, RunSplit, HandleEnvelope) before Run, but their
// owner-liveness checks, the replies that must queue for a publisher and
// the node readers' publishes to other instances wait for it (a node
// cannot be connected before an instance runs).
//
// The Engine is the nodes.Events of this instance's Hub (see Deps.Nodes).
// Closing the socket of a node replaced elsewhere (a replace envelope) is
// node ownership, the Hub's business: HandleEnvelope does not
// take it.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	tracker *Tracker
	owner   *owner
	disp    *dispatcher
	watcher *watcher
	out     *outbound
	ready   chan struct{} // closed when Run starts
}

var _ nodes.Events = (*Engine)(nil)

// New builds the engine; Run runs its loops.
func New(cfg Config, deps Deps) *Engine {
	cfg = cfg.withDefaults()
	if deps.Recorder == nil {
		deps.Recorder = noRecorder{}
	}
	if deps.Standings == nil {
		deps.Standings = neutralStanding{}
	}
	if deps.Liveness == nil {
		deps.Liveness = noLiveness{}
	}
	if deps.Health == nil {
		deps.Health = alwaysHealthy{}
	}
	if deps.Affinity == nil {
		deps.Affinity = nodes.NewMemoryAffinity(0)
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, metrics: NewMetrics(cfg.Registerer), ready: make(chan struct{})}
	e.tracker = newTrackerWith(trackerLimits{taskBytes: cfg.StreamQueueBytes, instanceBytes: cfg.StreamBufferBytes,
		overflow: e.overflowed})
	e.out = newOutbound(deps.Bus, cfg.OutboundQueue, e.metrics, e.log)
	e.owner = newOwner(cfg, deps.Bus, e.tracker.deliver, e.out, deps.Recorder, e.metrics)
	ns := deps.Nodes(e)
	e.owner.sessions = ns.Sessions
	e.disp = &dispatcher{
		cfg: cfg, dir: ns.Directory, standings: deps.Standings, health: deps.Health,
		owner: e.owner, bus: deps.Bus, tracker: e.tracker, rec: deps.Recorder, metrics: e.metrics, log: e.log, affinity: deps.Affinity,
		served: newServed(), stats: newStats(cfg.Instance),
	}
	e.watcher = newWatcher(cfg, deps.Bus, deps.Liveness, ns.Directory, e.tracker, e.owner, e.metrics)
	if cfg.NoWatcher {
		e.log.Warn("the owner-liveness watcher is off (--unsafe-no-watcher): tasks of a dead instance will wait for their deadline")
	}
	return e
}

// Run runs the engine's loops (the watcher, the outbound publishers) until
// ctx ends, and returns nil once they have stopped. Tasks still in flight
// are not failed here: the App drains first. What is queued for the
// publishers then is dropped, and node readers publish nothing more. Run
// once.
func (e *Engine) Run(ctx context.Context) error {
	e.owner.run.Store(&ctx)
	close(e.ready)
	var g errgroup.Group
	e.out.start(ctx, &g)
	if !e.cfg.NoWatcher {
		g.Go(func() error { e.watcher.run(ctx); return nil })
	}
	return g.Wait()
}

// Ready is closed once Run has started. Before it, the owner side refuses
// other instances' assigns (it could not pass their answers on), so an
// instance serves its nodes after it: the App waits for it before its HTTP
// server starts.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// RunTask runs one task to its end. ctx is the client's: when it ends
// first (the client went away) the task is cancelled on its node. The
// error, if any, is a *Error whose Status is the HTTP answer.
func (e *Engine) RunTask(ctx context.Context, req Request, h Hooks) (Outcome, error) {
	if after := e.disp.hedgeDelay(&req); after > 0 {
		return e.disp.runHedged(ctx, req, h, after)
	}
	return e.disp.run(ctx, req, h, nil, nil)
}

// RunSplit runs a long task in parts on several nodes (see split.go).
func (e *Engine) RunSplit(ctx context.Context, req Request, h Hooks) (Outcome, error) {
	return e.disp.runSplit(ctx, req, h)
}

// HandleEnvelope routes an envelope addressed to this instance: the owner
// side takes assign and cancel, the requester side chunk, result and
// node_gone. It never blocks (bus.Handler's contract): what it must
// publish in return goes through the bounded outbound queue.
func (e *Engine) HandleEnvelope(env *bus.Envelope) {
	switch env.Kind {
	case bus.KindAssign, bus.KindCancel:
		e.owner.handleEnvelope(env)
	default:
		if !e.tracker.deliver(env) {
			e.metrics.dropped.WithLabelValues(env.Kind.String()).Inc()
		}
	}
}

// Drain makes the owner side refuse new assigns (the instance is draining;
// requesters retry on another node). Tasks already here finish.
func (e *Engine) Drain() { e.owner.draining.Store(true) }

// Requesting is the number of tasks waiting for their outcome here.
func (e *Engine) Requesting() int { return e.tracker.Len() }

// Forwarding is the number of tasks this instance's nodes hold now for a
// requester that waits for them (a drain waits for these).
func (e *Engine) Forwarding() int { return e.owner.fwd.len() }

// Holding is the number of cancelled tasks that nodes of this instance
// still run, not having declared task_cancel: their slots stay taken until
// they answer, disconnect, or the task's timeout passes. Nobody waits for
// them.
func (e *Engine) Holding() int { return e.owner.fwd.holding() }

// Tracker is the requester side's read-only view (status, task lookup).
func (e *Engine) Tracker() *Tracker { return e.tracker }

// Served returns, per task type, the requests this instance finished with
// a node's outcome (completed or failed) over the last minute.
func (e *Engine) Served() map[string]int { return e.disp.served.lastMinute(time.Now()) }

// Stats returns this instance's figures for the operator's dashboard: per
// task type over the last five minutes, and the last failures.
func (e *Engine) Stats() StatsSnapshot { return e.disp.stats.snapshot(time.Now()) }

// Resubscribed tells the engine that this instance's bus subscription was
// lost and is back (Redis restarted or dropped us). Whatever other
// instances published to it meanwhile is lost, answers included, so every
// task already waiting on another instance fails now with 503 unavailable
// rather than at its deadline (invariant 10): a Redis restart
// too short for the watcher to see Redis unreachable for a second would
// otherwise leave such a task waiting for its timeout. The watcher then
// judges nobody gone for grace: the others may still be reconnecting.
func (e *Engine) Resubscribed(grace time.Duration) {
	e.watcher.grace(grace)
	e.watcher.failRemote(e.tracker.owners(e.cfg.Instance), time.Now(),
		"the connection to Redis was lost while the task ran on another instance, so its answer may be lost")
}

// overflowed stops on its node a task whose stream queue went over its
// bound (the Tracker's hook). It runs where the chunk was delivered (a
// node's reader, or the bus's receive loop), so it must not block: the
// cancel goes to a remote owner through the outbound queue. The task's
// reader sends its own cancel too when it wakes; the owner ignores the
// second one.
func (e *Engine) overflowed(p *pending, owner, nodeID string, gen uint64) {
	e.metrics.dropped.WithLabelValues("stream_overflow").Inc()
	env := &bus.Envelope{Kind: bus.KindCancel, From: e.cfg.Instance, ReplyTo: e.cfg.Instance,
		TaskID: p.id, NodeID: nodeID, Gen: gen, Reason: string(CodeStreamOverflow)}
	if owner == e.cfg.Instance {
		e.owner.cancel(env)
		return
	}
	e.out.post(owner, env)
}

// Chunk implements nodes.Events.
func (e *Engine) Chunk(s *nodes.Session, c wire.TaskChunkPayload) { e.owner.chunk(s, c) }

// Result implements nodes.Events.
func (e *Engine) Result(s *nodes.Session, r wire.TaskResultPayload) { e.owner.result(s, r) }

// BadResult implements nodes.Events: an unreadable task_result fails its
// task now, as a handler failure, rather than leaving the client to time out.
func (e *Engine) BadResult(s *nodes.Session, taskID string, err error) {
	e.owner.badResult(s, taskID, err)
}

// Closed implements nodes.Events: every task the node held fails now.
func (e *Engine) Closed(s *nodes.Session) { e.owner.closed(s) }

type noRecorder struct{}

func (noRecorder) RecordTask(store.TaskRecord)         {}
func (noRecorder) RecordOutcome(store.Outcome)         {}
func (noRecorder) RecordUsage(store.UsageReport, bool) {}

type neutralStanding struct{}

func (neutralStanding) Standing(string, time.Time) nodes.Standing { return nodes.Standing{Score: 50} }

// noLiveness has no alive keys to read: no instance is judged by one.
type noLiveness struct{}

func (noLiveness) Alive(context.Context, []string) (map[string]bool, error) { return nil, nil }

// alwaysHealthy is one instance's view: nothing else to reach.
type alwaysHealthy struct{}

func (alwaysHealthy) Healthy() bool { return true }
