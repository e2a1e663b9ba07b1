package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterConfig configures a ClusterDirectory. Zero values take the defaults shown.
type ClusterConfig struct {
	Namespace       string        // default "sy"
	Instance        string        // this instance's id (required)
	PublishInterval time.Duration // default 1s: how often this instance's nodes are written
	PollInterval    time.Duration // default 250ms: how often the other instances' nodes are read
	// Changed, when it fires, asks for an early publish (the hub's OnChange
	// notifies it: a local node arrived or left). nil: the directory makes
	// its own, fired only by Touch.
	Changed Signal
	Logger  *slog.Logger
}

// LocalNodes is what the cluster directory reads of this instance's own
// nodes: the Hub.
type LocalNodes interface {
	Candidates(dst []Candidate, capability string) []Candidate
	List(capability string) []NodeView
	Len() int
	Changed() (<-chan struct{}, func())
	// Session returns the session of a node connected here, or nil.
	Session(nodeID string) *Session
	// Sessions returns the sessions connected here, ordered by node id.
	Sessions() []*Session
}

var _ LocalNodes = (*Hub)(nil)

// ClusterDirectory is the Directory of a cluster: this instance's nodes,
// live from its Hub, plus every other live instance's, read from Redis:
//
//	{ns}:dir:{<instance id>}  hash node id → entry JSON, written by that instance only;
//	                          TTL a few publish intervals, deleted when it drains
//
// Other instances' free slots are as their owner last wrote them (at most a
// second old), less what this instance has assigned to them since; an
// owner refuses an assign beyond a node's max_concurrency anyway
// (invariant 7), and the requester then waits and retries.
type ClusterDirectory struct {
	hub  LocalNodes
	rdb  redis.UniversalClient
	cfg  ClusterConfig
	log  *slog.Logger
	live func(ctx context.Context) ([]string, error) // ids of the live instances

	snap      atomic.Pointer[remoteSnapshot]
	touched   Signal // local nodes changed, publish soon
	withdrawn atomic.Bool

	goneMu sync.Mutex
	gone   atomic.Pointer[map[string]goneMark] // instances known gone; copied on write
}

// goneMark is an instance taken out of routing.
type goneMark struct {
	at, until time.Time
}

var _ Directory = (*ClusterDirectory)(nil)

// remoteSnapshot is what the last poll read.
type remoteSnapshot struct {
	at    time.Time
	byCap map[string][]*remoteNode
	byID  map[string]*remoteNode
	all   []*remoteNode
	seen  map[string]time.Time // instance → when its directory was last read
}

// publishedAtField is the directory hash field holding when its instance
// last wrote it (unix ms); it is not a node.
const publishedAtField = "_published_at"

// carryFor is how long an instance's nodes stay listed after its directory
// went missing from a read.
const carryFor = 3 * time.Second

type remoteNode struct {
	entry dirEntry
	taken atomic.Int32 // assigned by this instance since the snapshot was read
}

// dirEntry is one node in an instance's directory hash.
type dirEntry struct {
	NodeView
	Gen         uint64  `json:"gen"`
	FreeSlots   int     `json:"free_slots"`
	HasBench    bool    `json:"has_benchmark,omitempty"`
	BenchMs     float64 `json:"benchmark_ms,omitempty"`
	BenchFailed bool    `json:"benchmark_failed,omitempty"`
}

// NewClusterDirectory returns a directory over this instance's nodes (hub)
// and the Redis at rdb. live lists the live instance ids (the registry's).
func NewClusterDirectory(hub LocalNodes, rdb redis.UniversalClient, live func(ctx context.Context) ([]string, error), cfg ClusterConfig) *ClusterDirectory {
	if cfg.Namespace == "" {
		cfg.Namespace = "sy"
	}
	if cfg.PublishInterval == 0 {
		cfg.PublishInterval = time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	if cfg.Changed == nil {
		cfg.Changed = NewSignal()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &ClusterDirectory{hub: hub, rdb: rdb, cfg: cfg, live: live, log: cfg.Logger.With("component", "directory"),
		touched: cfg.Changed}
	d.snap.Store(&remoteSnapshot{byCap: map[string][]*remoteNode{}, byID: map[string]*remoteNode{}, seen: map[string]time.Time{}})
	return d
}

// Key is the directory hash of an instance.
func (d *ClusterDirectory) Key(instance string) string {
	return d.cfg.Namespace + ":dir:" + instance
}

// Touch asks for an early publish (a local node arrived or left, or Redis
// came back); it never blocks. It fires the same Signal as ClusterConfig.Changed.
func (d *ClusterDirectory) Touch() { d.touched.Notify() }

// Run publishes and polls until ctx ends.
func (d *ClusterDirectory) Run(ctx context.Context) {
	pub := time.NewTicker(d.cfg.PublishInterval)
	poll := time.NewTicker(d.cfg.PollInterval)
	defer pub.Stop()
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.touched:
			d.publishLogged(ctx)
		case <-pub.C:
			d.publishLogged(ctx)
		case <-poll.C:
			if err := d.Poll(ctx); err != nil && ctx.Err() == nil {
				d.log.Debug("directory poll failed", "err", err)
			}
		}
	}
}

func (d *ClusterDirectory) publishLogged(ctx context.Context) {
	if err := d.Publish(ctx); err != nil && ctx.Err() == nil {
		d.log.Debug("directory publish failed", "err", err)
	}
}

// Publish writes this instance's nodes, replacing what it wrote before.
func (d *ClusterDirectory) Publish(ctx context.Context) error {
	if d.withdrawn.Load() {
		return nil
	}
	key := d.Key(d.cfg.Instance)
	sessions := d.hub.Sessions()
	fields := make([]any, 0, 2*len(sessions))
	for _, s := range sessions {
		has, ms, failed := s.benchFields()
		b, err := json.Marshal(dirEntry{NodeView: s.View(d.cfg.Instance), Gen: s.Gen, FreeSlots: s.FreeSlots(),
			HasBench: has, BenchMs: ms, BenchFailed: failed})
		if err != nil {
			return err
		}
		fields = append(fields, s.NodeID, b)
	}
	// When it was written: readers learn from it that this instance is alive
	// (see MarkGone), even when it has no node.
	fields = append(fields, publishedAtField, strconv.FormatInt(time.Now().UnixMilli(), 10))
	// One key, so MULTI is fine on a cluster too.
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		p.HSet(ctx, key, fields...)
		p.PExpire(ctx, key, 5*d.cfg.PublishInterval)
		return nil
	})
	if err != nil {
		return fmt.Errorf("directory: publish: %w", err)
	}
	return nil
}

// Withdraw removes this instance's nodes from the directory and stops
// publishing them (the drain: other instances stop routing here).
func (d *ClusterDirectory) Withdraw(ctx context.Context) error {
	d.withdrawn.Store(true)
	return d.rdb.Del(ctx, d.Key(d.cfg.Instance)).Err()
}

// Purge deletes a dead instance's directory (the sweeper calls it).
func (d *ClusterDirectory) Purge(ctx context.Context, instance string) error {
	return d.rdb.Del(ctx, d.Key(instance)).Err()
}

// Poll reads the other live instances' nodes.
func (d *ClusterDirectory) Poll(ctx context.Context) error {
	ids, err := d.live(ctx)
	if err != nil {
		return err
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
			return fmt.Errorf("directory: poll: %w", err)
		}
	}
	now := time.Now()
	prev := d.snap.Load()
	seen := make(map[string]time.Time, len(cmds))
	// The newest generation of a node wins: during a move, two instances may
	// list it for a moment.
	newest := map[string]*remoteNode{}
	add := func(e dirEntry) {
		if cur, ok := newest[e.NodeID]; !ok || e.Gen > cur.entry.Gen {
			newest[e.NodeID] = &remoteNode{entry: e}
		}
	}
	for id, cmd := range cmds {
		fields := cmd.Val()
		if len(fields) == 0 {
			continue
		}
		seen[id] = now
		if ms, err := strconv.ParseInt(fields[publishedAtField], 10, 64); err == nil {
			d.revive(id, time.UnixMilli(ms))
		}
		for f, raw := range fields {
			var e dirEntry
			if f == publishedAtField || json.Unmarshal([]byte(raw), &e) != nil || e.NodeID == "" {
				continue
			}
			add(e)
		}
	}
	// An instance missing from this read but seen a moment ago keeps its
	// nodes for carryFor: after a Redis restart every instance is briefly
	// absent until it re-registers, and its nodes are not gone. One that
	// really is gone is taken out of routing by MarkGone.
	for id, last := range prev.seen {
		if _, ok := seen[id]; !ok && now.Sub(last) < carryFor {
			seen[id] = last
			for _, n := range prev.all {
				if n.entry.Instance == id {
					add(n.entry)
				}
			}
		}
	}
	snap := &remoteSnapshot{at: now, byCap: map[string][]*remoteNode{}, byID: newest, seen: seen}
	for _, n := range newest {
		snap.all = append(snap.all, n)
		for _, c := range n.entry.Capabilities {
			snap.byCap[c] = append(snap.byCap[c], n)
		}
	}
	d.snap.Store(snap)
	return nil
}

// fresh returns the last snapshot if it is recent enough to route by:
// with Redis unreachable, remote nodes are out of reach too.
func (d *ClusterDirectory) fresh() *remoteSnapshot {
	s := d.snap.Load()
	if time.Since(s.at) > 4*d.cfg.PollInterval+time.Second {
		return nil
	}
	return s
}

// Healthy reports whether the directory has a recent view of the cluster.
func (d *ClusterDirectory) Healthy() bool { return d.fresh() != nil }

// Candidates implements Directory: local nodes first, then remote ones.
func (d *ClusterDirectory) Candidates(dst []Candidate, capability string) []Candidate {
	dst = d.hub.Candidates(dst, capability)
	s := d.fresh()
	if s == nil {
		return dst
	}
	gone := d.goneNow()
	for _, n := range s.byCap[capability] {
		// A node both here and in another's directory is moving here: the
		// local session is the one to use.
		if gone.has(n.entry.Instance) || d.hub.Session(n.entry.NodeID) != nil {
			continue
		}
		dst = append(dst, Candidate{
			NodeID: n.entry.NodeID, Owner: n.entry.Instance, Gen: n.entry.Gen, Trust: n.entry.Trust,
			FreeSlots: n.entry.FreeSlots - int(n.taken.Load()), CPU: n.entry.CPUPercent,
			HasBench: n.entry.HasBench, BenchMs: n.entry.BenchMs, BenchFailed: n.entry.BenchFailed,
		})
	}
	return dst
}

// Assigned notes that this instance gave a remote node a task, so it does
// not count that slot as free until the owner's next publish.
func (d *ClusterDirectory) Assigned(nodeID string) {
	if n := d.snap.Load().byID[nodeID]; n != nil {
		n.taken.Add(1)
	}
}

// MarkFull notes that a remote node refused a task for want of a slot: this
// instance treats it as full until its owner next publishes.
func (d *ClusterDirectory) MarkFull(nodeID string) {
	if n := d.snap.Load().byID[nodeID]; n != nil {
		n.taken.Store(int32(n.entry.FreeSlots))
	}
}

// goneFor is how long an instance found gone stays out of routing unless it
// publishes its directory again; by then its keys have expired anyway.
const goneFor = 10 * time.Second

// MarkGone takes every node of a remote instance out of routing: a publish
// to it reached nobody, it is draining, or the watcher found it gone. Its
// directory may live a few seconds more in Redis, and requests should not
// spend their attempts on its nodes. If it writes its directory again
// after this (it was only reconnecting to Redis), the mark is lifted.
func (d *ClusterDirectory) MarkGone(instance string) {
	now := time.Now()
	d.updateGone(func(m map[string]goneMark) { m[instance] = goneMark{at: now, until: now.Add(goneFor)} })
	d.log.Info("instance gone or draining; its nodes are out of routing", "gone_instance", instance)
}

// revive lifts an instance's gone mark if it published after the mark.
func (d *ClusterDirectory) revive(instance string, published time.Time) {
	cur := d.gone.Load()
	if cur == nil {
		return
	}
	if m, ok := (*cur)[instance]; !ok || !published.After(m.at) {
		return
	}
	d.updateGone(func(m map[string]goneMark) { delete(m, instance) })
	d.log.Info("instance is back; its nodes are in routing again", "instance_back", instance)
}

// updateGone replaces the gone map with a changed copy, dropping expired marks.
func (d *ClusterDirectory) updateGone(change func(map[string]goneMark)) {
	d.goneMu.Lock()
	defer d.goneMu.Unlock()
	now := time.Now()
	next := map[string]goneMark{}
	if cur := d.gone.Load(); cur != nil {
		for id, m := range *cur {
			if m.until.After(now) {
				next[id] = m
			}
		}
	}
	change(next)
	d.gone.Store(&next)
}

// goneSet is the gone marks at one moment, read without copying.
type goneSet struct {
	marks map[string]goneMark
	now   time.Time
}

// goneNow returns the current gone marks; has answers for one instance.
func (d *ClusterDirectory) goneNow() goneSet {
	g := goneSet{now: time.Now()}
	if cur := d.gone.Load(); cur != nil {
		g.marks = *cur
	}
	return g
}

func (g goneSet) has(instance string) bool {
	m, ok := g.marks[instance]
	return ok && m.until.After(g.now)
}

// Hidden reports whether nodes with capability are out of routing only
// because their instance is marked gone: the task's nodes exist but cannot
// be reached right now (503, not 404).
func (d *ClusterDirectory) Hidden(capability string) bool {
	gone := d.goneNow()
	if len(gone.marks) == 0 {
		return false
	}
	if s := d.fresh(); s != nil {
		for _, n := range s.byCap[capability] {
			if gone.has(n.entry.Instance) {
				return true
			}
		}
	}
	return false
}

// List implements Directory.
func (d *ClusterDirectory) List(capability string) []NodeView {
	out := d.hub.List(capability)
	s := d.fresh()
	if s == nil {
		return out
	}
	seen := make(map[string]bool, len(out))
	for _, v := range out {
		seen[v.NodeID] = true
	}
	gone := d.goneNow()
	for _, n := range s.all {
		if seen[n.entry.NodeID] || gone.has(n.entry.Instance) || (capability != "" && !contains(n.entry.Capabilities, capability)) {
			continue
		}
		out = append(out, n.entry.NodeView)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Online implements Directory.
func (d *ClusterDirectory) Online() int {
	n := d.hub.Len()
	if s := d.fresh(); s != nil {
		gone := d.goneNow()
		for _, r := range s.all {
			if d.hub.Session(r.entry.NodeID) == nil && !gone.has(r.entry.Instance) {
				n++
			}
		}
	}
	return n
}

// Changed implements Directory: local capacity signals; remote changes are
// seen by the caller's periodic recheck.
func (d *ClusterDirectory) Changed() (<-chan struct{}, func()) { return d.hub.Changed() }
