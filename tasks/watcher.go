package tasks

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"switchyard/bus"
)

// WatcherConfig configures a Watcher. Zero values take the defaults shown.
type WatcherConfig struct {
	Instance string        // this instance's id (required)
	Interval time.Duration // default 250ms between checks
	// Alive, if set, is the backstop for a host that vanished without
	// closing its sockets (Redis still counts its subscription): an
	// instance whose alive key has expired is gone.
	Alive  func(ctx context.Context, ids []string) (map[string]bool, error)
	Logger *slog.Logger // default slog.Default()
}

// Watcher notices when the instance on the other side of a task is gone,
// using what the bus already knows (its subscriber counts) rather than
// waiting for a liveness key to expire:
//
//   - a requester whose tasks wait on an owner with no subscriber, seen on
//     two checks in a row, fails them with node_disconnected
//     (DESIGN §5, invariant 4);
//   - an owner whose tasks' requester has no subscriber, twice in a row,
//     cancels them on their nodes (invariant 5).
//
// Two checks, because a subscriber that is reconnecting is briefly absent.
// It also sweeps forwarding entries past their deadline.
type Watcher struct {
	cfg     WatcherConfig
	bus     bus.Bus
	tracker *Tracker
	owner   *Owner
	metrics *Metrics
	log     *slog.Logger
	suspect map[string]bool // instances seen with no subscriber on the last check
	grace   atomic.Int64    // unix nanos before which nobody is judged gone
	onGone  func(instance string)
	// unreachableSince is when the bus stopped answering (zero: it answers).
	unreachableSince time.Time
}

// unreachableAfter is how long Redis may be unreachable before tasks
// waiting on another instance fail: no result can reach them meanwhile.
const unreachableAfter = time.Second

// Grace suspends judgements for d: after this instance's own subscription
// was restored (Redis restarted), the others may still be reconnecting,
// and their registry entries may still be coming back.
func (w *Watcher) Grace(d time.Duration) { w.grace.Store(time.Now().Add(d).UnixNano()) }

// NewWatcher returns a watcher; Run starts it.
func NewWatcher(cfg WatcherConfig, b bus.Bus, tracker *Tracker, owner *Owner, m *Metrics) *Watcher {
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Watcher{cfg: cfg, bus: b, tracker: tracker, owner: owner, metrics: m, log: cfg.Logger, suspect: map[string]bool{}}
}

// OnGone, if set, is told about each instance the watcher found gone
// (the dispatcher's directory stops offering its nodes). Set before Run.
func (w *Watcher) OnGone(f func(instance string)) { w.onGone = f }

func (w *Watcher) markGone(id string) {
	if w.onGone != nil {
		w.onGone(id)
	}
}

// Run checks every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.Check(ctx, now)
		}
	}
}

// Check runs one round. It is exported so tests can step the watcher.
func (w *Watcher) Check(ctx context.Context, now time.Time) {
	w.owner.sweep(now)
	owners := w.tracker.owners(w.cfg.Instance)
	requesters := w.owner.fwd.requesters(w.cfg.Instance)
	if len(owners) == 0 && len(requesters) == 0 {
		clear(w.suspect)
		w.unreachableSince = time.Time{}
		return
	}
	// This instance's own channel is asked too: if Redis does not count it,
	// Redis restarted or dropped us, and nobody else can be judged by it yet.
	ids := make([]string, 0, len(owners)+len(requesters)+1)
	ids = append(ids, w.cfg.Instance)
	for id := range owners {
		ids = append(ids, id)
	}
	for id := range requesters {
		if _, dup := owners[id]; !dup {
			ids = append(ids, id)
		}
	}
	if now.UnixNano() < w.grace.Load() {
		clear(w.suspect)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.Interval*4)
	receivers, err := w.bus.Receivers(cctx, ids)
	var registered map[string]bool
	if err == nil && w.cfg.Alive != nil {
		registered, err = w.cfg.Alive(cctx, ids)
	}
	cancel()
	if err != nil {
		// Redis itself is unreachable: that is not evidence that anyone died.
		// But no result can come back from another instance meanwhile, so
		// tasks waiting on one fail once it has lasted (invariant 10).
		w.log.Debug("watcher cannot check instances", "err", err)
		if w.unreachableSince.IsZero() {
			w.unreachableSince = now
		} else if now.Sub(w.unreachableSince) >= unreachableAfter {
			w.failRemote(owners, "Redis is unreachable, so the instance holding the node cannot answer")
		}
		return
	}
	w.unreachableSince = time.Time{}
	if receivers[w.cfg.Instance] == 0 {
		w.Grace(3 * time.Second)
		clear(w.suspect)
		return
	}
	next := map[string]bool{}
	for _, id := range ids[1:] {
		expired := registered != nil && !registered[id]
		if receivers[id] > 0 && !expired {
			continue
		}
		if !w.suspect[id] && !expired {
			next[id] = true
			continue
		}
		if len(owners[id]) > 0 {
			w.markGone(id)
		}
		for _, p := range owners[id] {
			owner, nodeID, gen := p.target()
			if owner != id {
				continue
			}
			if w.tracker.Deliver(&bus.Envelope{Kind: bus.KindNodeGone, From: owner, TaskID: p.id, NodeID: nodeID, Gen: gen, Reason: "owner instance gone"}) {
				w.metrics.ownerDied.Inc()
			}
		}
		if requesters[id] {
			if n := w.owner.requesterGone(id); n > 0 {
				w.log.Info("requester instance gone; cancelled its tasks", "instance", id, "tasks", n)
			}
		}
	}
	w.suspect = next
}

// failRemote fails every task waiting on another instance with 503
// unavailable.
func (w *Watcher) failRemote(owners map[string][]*pending, why string) {
	n := 0
	for owner, ps := range owners {
		for _, p := range ps {
			o, nodeID, gen := p.target()
			if o != owner {
				continue
			}
			if w.tracker.Deliver(&bus.Envelope{Kind: bus.KindResult, From: owner, TaskID: p.id, NodeID: nodeID, Gen: gen,
				Result: &bus.Result{Code: CodeUnavailable, Message: why}}) {
				n++
			}
		}
	}
	if n > 0 {
		w.log.Warn("failed tasks waiting on other instances", "tasks", n, "reason", why)
	}
}
