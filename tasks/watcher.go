package tasks

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
)

// watcher notices when the instance on the other side of a task is gone,
// using what the bus already knows (its subscriber counts) rather than
// waiting for a liveness key to expire:
//
//   - a requester whose tasks wait on an owner with no subscriber, seen on
//     two checks in a row, fails them with node_disconnected
//     (invariant 4);
//   - an owner whose tasks' requester has no subscriber, twice in a row,
//     cancels them on their nodes (invariant 5).
//
// Two checks, because a subscriber that is reconnecting is briefly absent.
// It also sweeps forwarding entries past their deadline.
type watcher struct {
	instance string
	interval time.Duration
	bus      Bus
	alive    Liveness  // noLiveness: no backstop
	dir      Directory // told about each owner instance found gone
	tracker  *Tracker
	owner    *owner
	metrics  *Metrics
	log      *slog.Logger
	suspect  map[string]bool // instances seen with no subscriber on the last check
	graceTo  atomic.Int64    // unix nanos before which nobody is judged gone
	// unreachableSince is when the bus stopped answering (zero: it answers).
	unreachableSince time.Time
}

// unreachableAfter is how long Redis may be unreachable before tasks
// waiting on another instance fail: no result can reach them meanwhile.
const unreachableAfter = time.Second

func newWatcher(cfg Config, b Bus, alive Liveness, dir Directory, tracker *Tracker, o *owner, m *Metrics) *watcher {
	return &watcher{
		instance: cfg.Instance, interval: cfg.WatchInterval, bus: b, alive: alive, dir: dir,
		tracker: tracker, owner: o, metrics: m, log: cfg.Logger, suspect: map[string]bool{},
	}
}

// grace suspends judgements for d: after this instance's own subscription
// was restored (Redis restarted), the others may still be reconnecting,
// and their registry entries may still be coming back.
func (w *watcher) grace(d time.Duration) { w.graceTo.Store(time.Now().Add(d).UnixNano()) }

// run checks every interval until ctx ends.
func (w *watcher) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.check(ctx, now)
		}
	}
}

// check runs one round; tests step the watcher with it.
func (w *watcher) check(ctx context.Context, now time.Time) {
	w.owner.sweep(now)
	owners := w.tracker.owners(w.instance)
	requesters := w.owner.fwd.requesters(w.instance)
	if len(owners) == 0 && len(requesters) == 0 {
		clear(w.suspect)
		w.unreachableSince = time.Time{}
		return
	}
	// This instance's own channel is asked too: if Redis does not count it,
	// Redis restarted or dropped us, and nobody else can be judged by it yet.
	ids := make([]string, 0, len(owners)+len(requesters)+1)
	ids = append(ids, w.instance)
	for id := range owners {
		ids = append(ids, id)
	}
	for id := range requesters {
		if _, dup := owners[id]; !dup {
			ids = append(ids, id)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, w.interval*4)
	receivers, err := w.bus.Receivers(cctx, ids)
	var registered map[string]bool
	if err == nil {
		registered, err = w.alive.Alive(cctx, ids)
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
			w.failRemote(owners, now, "Redis is unreachable, so the instance holding the node cannot answer")
		}
		return
	}
	w.unreachableSince = time.Time{}
	// The grace (after a resubscription) comes after the unreachable check
	// above: it keeps other instances from being judged dead while they
	// reconnect, not this one's remote tasks from failing when nothing can
	// answer them (a cluster master dying just after a failover).
	if now.UnixNano() < w.graceTo.Load() {
		clear(w.suspect)
		return
	}
	if receivers[w.instance] == 0 {
		w.grace(3 * time.Second)
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
			w.dir.MarkGone(id)
		}
		for _, p := range owners[id] {
			owner, nodeID, gen := p.target()
			if owner != id {
				continue
			}
			if w.tracker.deliver(&bus.Envelope{Kind: bus.KindNodeGone, From: owner, TaskID: p.id, NodeID: nodeID, Gen: gen, Reason: reasonOwnerGone}) {
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

// failRemote fails with 503 unavailable every task waiting on another
// instance, except those whose current attempt was handed over at or
// after cutoff. It touches
// only the tracker, so it may run outside the watcher's goroutine.
func (w *watcher) failRemote(owners map[string][]*pending, cutoff time.Time, why string) {
	n := 0
	for owner, ps := range owners {
		for _, p := range ps {
			o, nodeID, gen, assigned := p.current()
			if o != owner || !assigned.IsZero() && !assigned.Before(cutoff) {
				continue
			}
			if w.tracker.deliver(&bus.Envelope{Kind: bus.KindResult, From: owner, TaskID: p.id, NodeID: nodeID, Gen: gen,
				Result: &bus.Result{Code: string(CodeUnavailable), Message: why}}) {
				n++
			}
		}
	}
	if n > 0 {
		w.log.Warn("failed tasks waiting on other instances", "tasks", n, "reason", why)
	}
}
