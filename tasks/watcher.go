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
}

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
		return
	}
	ids := make([]string, 0, len(owners)+len(requesters))
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
		w.log.Debug("watcher cannot check instances", "err", err)
		return
	}
	next := map[string]bool{}
	for _, id := range ids {
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
