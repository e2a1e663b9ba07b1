package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// The writing side of the ClusterDirectory: this instance's entries,
// written when they change, each write published as one numbered event.

// pubState is what this instance last wrote about one of its nodes.
type pubState struct {
	gen    uint64
	free   int // none while the node is not serving
	active int
	state  string
	reason string
	cpu    float64
	cpuAt  time.Time // when cpu was written
	has    bool
	ms     float64
	failed bool
}

// A node's CPU alone is rewritten only when it moved cpuStep points since
// it was last written, and at most once per cpuMinAge: every heartbeat
// (30 s) reports it, a host's CPU wanders, and an idle fleet must not be a
// stream of writes (invariant 12). Routing weighs CPU lightly (0.15 of a
// score whose random jitter is 0.10), so a few minutes' staleness is
// noise; a change of slots, generation or benchmark is written at once,
// and the CPU with it.
const (
	cpuStep   = 10
	cpuMinAge = 5 * time.Minute
)

func stateOf(s *Session) pubState {
	has, ms, failed := s.benchFields()
	state, reason := s.State()
	return pubState{gen: s.Gen, free: s.FreeSlots(), active: s.InFlight(), state: state, reason: reason,
		cpu: s.CPU(), has: has, ms: ms, failed: failed}
}

// differs reports whether st must be written over p at now.
func (p pubState) differs(st pubState, now time.Time) bool {
	return p.gen != st.gen || p.free != st.free || p.active != st.active || p.state != st.state || p.reason != st.reason ||
		p.has != st.has || p.ms != st.ms || p.failed != st.failed ||
		math.Abs(p.cpu-st.cpu) >= cpuStep && now.Sub(p.cpuAt) >= cpuMinAge
}

// compare returns what to keep as written for s, and whether to write it.
func (d *ClusterDirectory) compare(s *Session, force bool, now time.Time) (pubState, bool) {
	st := stateOf(s)
	if old, ok := d.published[s.NodeID]; ok && !force && !old.differs(st, now) {
		return old, false // unchanged (or only its CPU, too soon): what is written stays
	}
	st.cpuAt = now
	return st, true
}

func (d *ClusterDirectory) entryOf(s *Session, st pubState) ([]byte, error) {
	v := s.View(d.cfg.Instance)
	v.CPUPercent = st.cpu
	v.ActiveTasks, v.State, v.StateReason = st.active, st.state, st.reason
	v.Load = load(v.ActiveTasks, s.Info.MaxConcurrency)
	return json.Marshal(dirEntry{NodeView: v, Gen: st.gen, FreeSlots: st.free, HasBench: st.has, BenchMs: st.ms, BenchFailed: st.failed,
		Resume: s.Info.Resume})
}

var (
	// dirWrite applies a batch of changes to an instance's directory hash
	// and publishes them as one event, numbered by the hash's _seq, so the
	// numbering and the order of writes agree. A normal write requires the
	// hash's _seq to be the writer's last (else Redis lost or changed it:
	// -1, and the writer rewrites it whole). A reset deletes the hash first
	// and numbers on from the larger of the two.
	// KEYS hash; ARGV channel, writer's last seq, ttl ms, now ms, event body,
	// reset ("1" or "0"), then node id, entry ("" deletes) pairs.
	dirWrite = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], '_seq') or '0')
local last = tonumber(ARGV[2])
if ARGV[6] ~= '1' and cur ~= last then return -1 end
if ARGV[6] == '1' then
  if cur > last then last = cur end
  redis.call('DEL', KEYS[1])
end
local seq = last + 1
for i = 7, #ARGV, 2 do
  if ARGV[i+1] == '' then redis.call('HDEL', KEYS[1], ARGV[i]) else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
end
redis.call('HSET', KEYS[1], '_seq', seq, '_alive', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[1], seq .. ' ' .. ARGV[5])
return seq`)

	// dirKeepAlive refreshes an instance's hash once per heartbeat: 0 if
	// the hash is missing (Redis lost it, or a sweeper purged it).
	// KEYS hash; ARGV now ms, ttl ms.
	dirKeepAlive = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], '_alive', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)

	// dirGone deletes an instance's hash and tells every reader.
	// KEYS hash; ARGV channel, event body.
	dirGone = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], '0 ' .. ARGV[2])
return 1`)
)

// Announce writes and publishes one node's arrival, synchronously and
// within WriteTimeout: the hub calls it before it sends node_registered,
// so the node is routable from every instance once it is told it is
// registered (invariant 11). If Redis cannot be reached the node stays
// registered here (invariant 10) and the flush loop writes it later.
func (d *ClusterDirectory) Announce(ctx context.Context, s *Session) {
	if !d.Healthy() {
		d.changes.Mark(s.NodeID)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	defer cancel()
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.withdrawn || d.hub.Session(s.NodeID) != s {
		return
	}
	if d.needReset {
		if err := d.flushLocked(ctx, flushReset); err != nil {
			d.log.Warn("cannot publish a node's arrival", "node_id", s.NodeID, "err", err)
		}
		return
	}
	st := stateOf(s)
	st.cpuAt = time.Now()
	b, err := d.entryOf(s, st)
	if err == nil {
		err = d.writeLocked(ctx, []op{{NodeID: s.NodeID, Entry: b}}, false)
	}
	if err != nil {
		d.log.Warn("cannot publish a node's arrival; it is routable here only until the next flush", "node_id", s.NodeID, "err", err)
		d.changes.Mark(s.NodeID)
		return
	}
	d.published[s.NodeID] = st
}

// flushMode says what a flush looks at.
type flushMode int

const (
	flushChanged flushMode = iota // the nodes Changes holds: the normal case
	flushAll                      // every local node (the backstop scan, Touch)
	flushReset                    // every local node, the hash rewritten whole
)

// flush writes what changed among the local nodes since the last write;
// nothing when nothing did. reset rewrites the hash whole.
func (d *ClusterDirectory) flush(ctx context.Context, reset bool) error {
	mode := flushChanged
	if reset {
		mode = flushReset
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.flushLocked(ctx, mode)
}

func (d *ClusterDirectory) flushLocked(ctx context.Context, mode flushMode) error {
	if d.withdrawn {
		return nil
	}
	if d.needReset {
		mode = flushReset
	}
	ids, all := d.changes.take()
	if all && mode == flushChanged {
		mode = flushAll
	}
	if err := d.flushNodesLocked(ctx, mode, ids); err != nil {
		d.changes.restore(ids, all) // written next time
		return err
	}
	d.needReset = false
	return nil
}

// flushNodesLocked writes the nodes that differ from what was written, and
// deletes the entries of nodes no longer here. It looks at the nodes the hub
// marked (an idle fleet costs nothing here), or, for flushAll and
// flushReset, at every local node and every entry written before.
func (d *ClusterDirectory) flushNodesLocked(ctx context.Context, mode flushMode, ids map[string]struct{}) error {
	now := time.Now()
	reset := mode == flushReset
	if mode != flushChanged {
		ids = make(map[string]struct{}, len(d.published))
		for _, s := range d.hub.Sessions() {
			ids[s.NodeID] = struct{}{}
		}
		for id := range d.published {
			ids[id] = struct{}{}
		}
	}
	var ops []op
	next := make(map[string]pubState, len(ids)) // what is written once ops are
	for id := range ids {
		s := d.hub.Session(id)
		if s == nil {
			if _, ok := d.published[id]; ok && !reset { // a reset rewrites the hash without it
				ops = append(ops, op{NodeID: id})
			}
			continue
		}
		st, write := d.compare(s, reset, now)
		if write {
			b, err := d.entryOf(s, st)
			if err != nil {
				return err
			}
			ops = append(ops, op{NodeID: id, Entry: b})
		}
		next[id] = st
	}
	if len(ops) == 0 && !reset {
		return nil
	}
	if err := d.writeLocked(ctx, ops, reset); err != nil {
		return err
	}
	for id := range ids {
		if st, ok := next[id]; ok {
			d.published[id] = st
		} else {
			delete(d.published, id)
		}
	}
	return nil
}

// writeLocked runs dirWrite. If the hash is not what this instance last
// wrote (Redis restarted, a sweeper purged it, a write timed out after
// running), it rewrites the hash whole instead.
func (d *ClusterDirectory) writeLocked(ctx context.Context, ops []op, reset bool) error {
	now := time.Now().UnixMilli()
	ev := event{Instance: d.cfg.Instance, At: now, Ops: ops}
	if reset {
		// Readers re-read the hash: the event need not carry every node.
		ev = event{Instance: d.cfg.Instance, At: now, Kind: evReset}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	flag := "0"
	if reset {
		flag = "1"
	}
	args := make([]any, 0, 6+2*len(ops))
	args = append(args, d.EventsChannel(), d.seq, d.cfg.TTL.Milliseconds(), now, body, flag)
	for _, o := range ops {
		args = append(args, o.NodeID, []byte(o.Entry))
	}
	seq, err := dirWrite.Run(ctx, d.rdb, []string{d.Key(d.cfg.Instance)}, args...).Int64()
	if err != nil {
		return fmt.Errorf("directory: write: %w", err)
	}
	if seq < 0 {
		if reset {
			return fmt.Errorf("directory: reset refused")
		}
		d.needReset = true
		return d.flushNodesLocked(ctx, flushReset, nil)
	}
	d.seq = uint64(seq)
	return nil
}

// KeepAlive refreshes this instance's directory hash: one command per
// heartbeat, whatever the number of nodes (invariant 12). If the hash is
// gone (Redis lost it), it is rewritten whole.
func (d *ClusterDirectory) KeepAlive(ctx context.Context) error {
	d.wmu.Lock()
	withdrawn := d.withdrawn
	d.wmu.Unlock()
	if withdrawn {
		return nil
	}
	ok, err := dirKeepAlive.Run(ctx, d.rdb, []string{d.Key(d.cfg.Instance)},
		time.Now().UnixMilli(), d.cfg.TTL.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("directory: keep alive: %w", err)
	}
	if ok == 0 {
		d.log.Info("this instance's directory is missing from Redis; rewriting it")
		return d.flush(ctx, true)
	}
	return nil
}

// Withdraw removes this instance's nodes from the directory and stops
// writing them (the drain: other instances stop routing here at once).
func (d *ClusterDirectory) Withdraw(ctx context.Context) error {
	d.wmu.Lock()
	d.withdrawn = true
	d.wmu.Unlock()
	return d.publishGone(ctx, d.cfg.Instance)
}

// Purge deletes a dead instance's directory and tells every reader to drop
// its nodes (the sweeper calls it once the instance's alive key expired).
func (d *ClusterDirectory) Purge(ctx context.Context, instance string) error {
	d.drop(instance)
	return d.publishGone(ctx, instance)
}

func (d *ClusterDirectory) publishGone(ctx context.Context, instance string) error {
	body, err := json.Marshal(event{Instance: instance, At: time.Now().UnixMilli(), Kind: evGone})
	if err != nil {
		return err
	}
	if err := dirGone.Run(ctx, d.rdb, []string{d.Key(instance)}, d.EventsChannel(), body).Err(); err != nil {
		return fmt.Errorf("directory: remove %s: %w", instance, err)
	}
	return nil
}

// writeLoop writes local changes, coalesced: at most one write per
// FlushGap, each a batch of the nodes the hub marked in Changes since the
// last (an arrival, a departure, a slot taken or given back, a heartbeat's
// CPU, a benchmark). A scan every ScanInterval compares every local node
// as a backstop. It also runs the backstop read of the other instances.
func (d *ClusterDirectory) writeLoop(ctx context.Context) {
	// tick runs the cheap checks (a re-read owed, instances carried); scan
	// compares every local node, a backstop for a mark that went missing.
	tick := time.NewTicker(min(d.cfg.ScanInterval, time.Second))
	defer tick.Stop()
	scan := time.NewTicker(d.cfg.ScanInterval)
	defer scan.Stop()
	var backstop <-chan time.Time
	if d.cfg.BackstopInterval > 0 {
		t := time.NewTicker(d.cfg.BackstopInterval)
		defer t.Stop()
		backstop = t.C
	}
	gap := time.NewTimer(0)
	defer gap.Stop()
	gapArmed := true
	pending := false
	var last time.Time
	for {
		// While a flush waits for its gap, marks only add to the set the
		// flush will take: listening to them would wake this goroutine for
		// every slot taken or given back (twice a request under load) only
		// to find the gap still running.
		changed := d.changes.C()
		if pending && gapArmed {
			changed = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			pending = true
		case <-scan.C:
			d.changes.MarkAll()
			pending = true
		case <-tick.C:
			if d.rereadPending.Load() {
				rctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
				if d.readAll(rctx) == nil && d.rereadPending.CompareAndSwap(true, false) {
					d.subOK.Store(true)
				}
				cancel()
			}
			if d.carrying.Load() && time.Since(time.Unix(0, d.lastFull.Load())) >= carryFor {
				d.readAllLogged(ctx)
			}
		case <-backstop:
			d.readAllLogged(ctx)
		case <-d.checkOwn:
			if err := d.KeepAlive(ctx); err != nil && ctx.Err() == nil {
				d.log.Debug("directory keep-alive failed", "err", err)
			}
		case <-gap.C:
			gapArmed = false
		}
		if !pending {
			continue
		}
		if wait := d.cfg.FlushGap - time.Since(last); wait > 0 {
			if !gapArmed {
				gap.Reset(wait)
				gapArmed = true
			}
			continue
		}
		pending, last = false, time.Now()
		fctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		if err := d.flush(fctx, false); err != nil && ctx.Err() == nil {
			d.log.Debug("directory flush failed", "err", err)
			pending = true // tried again after the gap
		}
		cancel()
	}
}
