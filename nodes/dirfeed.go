package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// The reading side of the ClusterDirectory: other instances' nodes, kept
// from the change feed, re-read on a gap, and asked for again by a request
// that found no candidate.

// instView is what this instance knows of another's directory.
type instView struct {
	seq     uint64
	nodes   map[string]*remoteNode
	missing time.Time // a full read did not find its hash (carried until carryFor)
}

// receive applies the change feed until ctx ends. go-redis reconnects a
// broken subscription on the next receive and subscribes again; the
// confirmation that arrives then means events may have been missed, so
// every instance is re-read. A silent connection is pinged, and replaced.
func (d *ClusterDirectory) receive(ctx context.Context) {
	unanswered := 0
	backoff := 50 * time.Millisecond
	for {
		ps := d.ps.Load()
		msg, err := ps.ReceiveTimeout(ctx, d.cfg.PingInterval)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				unanswered++
				if unanswered < 3 {
					_ = ps.Ping(ctx) // the pong, or its absence, shows on the next receive
					continue
				}
				d.log.Warn("directory feed silent; resubscribing")
				d.subOK.Store(false)
				_ = ps.Close()
				d.ps.Store(d.rdb.Subscribe(ctx, d.EventsChannel()))
				unanswered = 0
				continue
			}
			// Redis is unreachable: remote nodes are out of reach until the
			// feed is back and re-read.
			d.subOK.Store(false)
			d.rereadPending.Store(false) // the resubscription asks for its own read
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff): // pacing reconnects; nothing to wait on
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		unanswered, backoff = 0, 50*time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			d.handle(ctx, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				d.resubscribed(ctx)
			}
		}
	}
}

// resubscribed re-reads everything after the feed was restored, and makes
// sure this instance's own hash survived (a Redis restart loses it).
func (d *ClusterDirectory) resubscribed(ctx context.Context) {
	d.log.Info("directory feed restored; re-reading every instance")
	select {
	case d.checkOwn <- struct{}{}:
	default:
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	defer cancel()
	if err := d.readAll(rctx); err != nil {
		// Not healthy until a read after the resubscription succeeds; the
		// write loop retries it every ScanInterval.
		d.log.Debug("directory re-read failed; retrying", "err", err)
		d.rereadPending.Store(true)
		return
	}
	d.rereadPending.Store(false)
	d.subOK.Store(true)
}

// handle applies one event from the feed.
func (d *ClusterDirectory) handle(ctx context.Context, payload string) {
	sp := strings.IndexByte(payload, ' ')
	if sp < 0 {
		return
	}
	seq, err := strconv.ParseUint(payload[:sp], 10, 64)
	var ev event
	if err != nil || wire.CheckBounds([]byte(payload[sp+1:])) != nil || json.Unmarshal([]byte(payload[sp+1:]), &ev) != nil || ev.Instance == "" {
		d.log.Warn("dropping a malformed directory event")
		return
	}
	if ev.Instance == d.cfg.Instance {
		return
	}
	if ev.Kind == evGone {
		d.drop(ev.Instance)
		return
	}
	d.revive(ev.Instance, time.UnixMilli(ev.At))
	if ev.Kind != evReset && d.applyEvent(ev.Instance, seq, ev.Ops) {
		return
	}
	// A reset, a gap, or an instance not read yet: read its hash once.
	rctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	defer cancel()
	if err := d.readInstance(rctx, ev.Instance); err != nil {
		d.log.Debug("directory re-read failed", "instance", ev.Instance, "err", err)
	}
}

// applyEvent applies an instance's next event. It reports false when the
// event does not follow the last one applied (a gap, or an instance not
// read yet): the caller re-reads the instance then. An old event (one a
// read already included) is dropped.
func (d *ClusterDirectory) applyEvent(instance string, seq uint64, ops []op) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.insts[instance]
	if v == nil {
		return false
	}
	if seq <= v.seq {
		return true
	}
	if seq != v.seq+1 {
		return false
	}
	v.seq = seq
	for _, o := range ops {
		if len(o.Entry) == 0 {
			delete(v.nodes, o.NodeID)
		} else {
			var e dirEntry
			if json.Unmarshal(o.Entry, &e) != nil || e.NodeID != o.NodeID {
				continue
			}
			v.nodes[o.NodeID] = &remoteNode{entry: e}
		}
		d.reindexLocked(o.NodeID)
	}
	return true
}

// readInstance re-reads one instance's hash.
func (d *ClusterDirectory) readInstance(ctx context.Context, instance string) error {
	fields, err := d.rdb.HGetAll(ctx, d.Key(instance)).Result()
	if err != nil {
		return fmt.Errorf("directory: read %s: %w", instance, err)
	}
	d.applyRead(instance, fields, time.Now())
	return nil
}

// readAll reads every live instance's hash (at start, after a
// resubscription, as the backstop, and for Refresh). An instance no
// longer live, or whose hash is missing, is carried for carryFor, then
// dropped.
func (d *ClusterDirectory) readAll(ctx context.Context) error {
	ids, err := d.live(ctx)
	if err != nil {
		return fmt.Errorf("directory: live instances: %w", err)
	}
	pipe := d.rdb.Pipeline()
	cmds := map[string]*redis.MapStringStringCmd{}
	for _, id := range ids {
		if id != d.cfg.Instance {
			cmds[id] = pipe.HGetAll(ctx, d.Key(id))
		}
	}
	if len(cmds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("directory: read: %w", err)
		}
	}
	now := time.Now()
	for id, cmd := range cmds {
		d.applyRead(id, cmd.Val(), now)
	}
	carrying := false
	d.mu.Lock()
	for id, v := range d.insts {
		if _, live := cmds[id]; !live && v.missing.IsZero() {
			v.missing = now
		}
		switch {
		case v.missing.IsZero():
		case now.Sub(v.missing) >= carryFor:
			d.dropLocked(id)
		default:
			carrying = true
		}
	}
	d.mu.Unlock()
	d.lastFull.Store(now.UnixNano())
	d.carrying.Store(carrying)
	return nil
}

// applyRead replaces an instance's view with what its hash holds, unless
// this instance has already applied a newer event. A missing hash is
// noted, not applied: the instance's nodes are carried for carryFor.
func (d *ClusterDirectory) applyRead(instance string, fields map[string]string, now time.Time) {
	if len(fields) == 0 {
		d.mu.Lock()
		if v := d.insts[instance]; v != nil && v.missing.IsZero() {
			v.missing = now
		}
		d.mu.Unlock()
		return
	}
	seq, _ := strconv.ParseUint(fields["_seq"], 10, 64)
	if ms, err := strconv.ParseInt(fields["_alive"], 10, 64); err == nil {
		d.revive(instance, time.UnixMilli(ms))
	}
	nodes := make(map[string]*remoteNode, len(fields))
	for f, raw := range fields {
		if strings.HasPrefix(f, "_") {
			continue
		}
		var e dirEntry
		if json.Unmarshal([]byte(raw), &e) != nil || e.NodeID != f {
			continue
		}
		nodes[f] = &remoteNode{entry: e}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.insts[instance]
	if v != nil && v.seq > seq && v.missing.IsZero() {
		return // an event newer than this read was applied meanwhile
	}
	if v == nil {
		v = &instView{}
		d.insts[instance] = v
	}
	old := v.nodes
	v.seq, v.nodes, v.missing = seq, nodes, time.Time{}
	for id := range old {
		if _, ok := nodes[id]; !ok {
			d.reindexLocked(id)
		}
	}
	for id := range nodes {
		d.reindexLocked(id)
	}
}

// drop forgets an instance's nodes (it drained or was purged).
func (d *ClusterDirectory) drop(instance string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropLocked(instance)
}

func (d *ClusterDirectory) dropLocked(instance string) {
	v := d.insts[instance]
	if v == nil {
		return
	}
	delete(d.insts, instance)
	for id := range v.nodes {
		d.reindexLocked(id)
	}
}

// reindexLocked makes the routing indexes name the newest entry of a node
// among every instance's view: during a move, two instances may list it
// for a moment, and the newest generation wins.
func (d *ClusterDirectory) reindexLocked(nodeID string) {
	var best *remoteNode
	for _, v := range d.insts {
		if n := v.nodes[nodeID]; n != nil && (best == nil || n.entry.Gen > best.entry.Gen) {
			best = n
		}
	}
	old := d.byID[nodeID]
	if old == best {
		return
	}
	if old != nil {
		for _, c := range old.entry.Capabilities {
			if m := d.byCap[c]; m != nil {
				delete(m, nodeID)
				if len(m) == 0 {
					delete(d.byCap, c)
				}
			}
		}
		delete(d.byID, nodeID)
	}
	if best != nil {
		d.byID[nodeID] = best
		for _, c := range best.entry.Capabilities {
			m := d.byCap[c]
			if m == nil {
				m = map[string]*remoteNode{}
				d.byCap[c] = m
			}
			m[nodeID] = best
		}
		// A new entry starts a new count of this instance's takings: all
		// its free slots may be taken.
		d.hub.WakeSlots(best.entry.freed(), best.entry.FreeSlots)
	}
}

// refreshCall is one request-side read, shared by the callers waiting on it.
type refreshCall struct {
	done chan struct{}
	err  error
}

// Refresh re-reads every live instance's directory now: a request that
// found no candidate asks it once before answering 404, since a node that
// registered elsewhere a moment ago may not have reached this instance's
// view yet (invariant 11). Reads are shared and rate-limited: a caller
// joins the next read to start (one that began before the caller asked
// might miss what it looks for), and reads start at most once per
// RefreshGap, so a client sending unknown task types cannot make every
// request a full read.
func (d *ClusterDirectory) Refresh(ctx context.Context) error {
	if !d.Healthy() {
		return errors.New("directory: the change feed is down")
	}
	d.refreshMu.Lock()
	if c := d.refreshNxt; c != nil {
		d.refreshMu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &refreshCall{done: make(chan struct{})}
	d.refreshNxt = c
	prev, at := d.refreshCur, d.refreshAt
	d.refreshMu.Unlock()

	// This caller leads the read; others join it until it starts. It runs
	// to the end even if this caller's ctx ends, for the others' sake.
	if prev != nil {
		<-prev.done
	}
	if wait := d.cfg.RefreshGap - time.Since(at); wait > 0 {
		t := time.NewTimer(wait)
		<-t.C // the rate limit itself; bounded by RefreshGap
	}
	d.refreshMu.Lock()
	d.refreshNxt, d.refreshCur, d.refreshAt = nil, c, time.Now()
	d.refreshMu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.WriteTimeout)
	c.err = d.readAll(rctx)
	cancel()
	d.refreshMu.Lock()
	d.refreshCur = nil
	d.refreshMu.Unlock()
	close(c.done)
	return c.err
}

// readAllLogged is readAll for the background loop.
func (d *ClusterDirectory) readAllLogged(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	defer cancel()
	if err := d.readAll(rctx); err != nil && ctx.Err() == nil {
		d.log.Debug("directory read failed", "err", err)
	}
}
