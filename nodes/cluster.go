package nodes

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/bus"
)

// ClusterConfig configures a ClusterDirectory. Zero values take the defaults shown.
type ClusterConfig struct {
	Namespace string // default bus.DefaultNamespace ("sy")
	Instance  string // this instance's id (required)
	// TTL is the lifetime of this instance's directory hash, refreshed once
	// per heartbeat by KeepAlive (default 15s, the liveness TTL).
	TTL time.Duration
	// FlushGap: changes of local nodes' free slots, CPU or benchmark are
	// written and published at most this often, batched (default 100ms).
	FlushGap time.Duration
	// ScanInterval: how often every local node is compared, in memory,
	// with what was last written: a backstop, since the hub marks each node
	// that changes in Changes and the flush looks at those alone. It costs
	// no Redis command when nothing changed (default 30s).
	ScanInterval time.Duration
	// BackstopInterval: a full re-read of every live instance's directory,
	// in case an event was lost without a gap to show it (default 30s;
	// negative: never).
	BackstopInterval time.Duration
	// RefreshGap: request-side re-reads (Refresh) happen at most this often;
	// callers within share one (default 100ms).
	RefreshGap time.Duration
	// WriteTimeout bounds the synchronous write of an arrival (default 1s).
	WriteTimeout time.Duration
	// PingInterval: an idle change-feed subscription is pinged this often,
	// so a dead connection is noticed (default 5s).
	PingInterval time.Duration
	// Changes is the hub's record of the local nodes that changed (the
	// same *Changes as the hub's Config.Changes); a flush writes those.
	// nil: the directory makes its own, marked only by Touch and Announce.
	Changes *Changes
	Logger  *slog.Logger
}

func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.Namespace == "" {
		c.Namespace = bus.DefaultNamespace
	}
	if c.TTL == 0 {
		c.TTL = 15 * time.Second
	}
	if c.FlushGap == 0 {
		c.FlushGap = 100 * time.Millisecond
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = 30 * time.Second
	}
	if c.BackstopInterval == 0 {
		c.BackstopInterval = 30 * time.Second
	}
	if c.RefreshGap == 0 {
		c.RefreshGap = 100 * time.Millisecond
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 5 * time.Second
	}
	if c.Changes == nil {
		c.Changes = NewChanges()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// LocalNodes is what the cluster directory reads of this instance's own
// nodes: the Hub.
type LocalNodes interface {
	Candidates(dst []Candidate, capability string) []Candidate
	List(capability string) []NodeView
	Len() int
	WaitSlot(capability string, p Place) *Waiter
	WakeSlots(f Freed, n int)
	// Session returns the session of a node connected here, or nil.
	Session(nodeID string) *Session
	// Sessions returns the sessions connected here, ordered by node id.
	Sessions() []*Session
}

var _ LocalNodes = (*Hub)(nil)

// ClusterDirectory is the Directory of a cluster: this instance's nodes,
// live from its Hub, plus every other live instance's, kept in memory from
// a change feed (docs/OPERATIONS.md lists its keys):
//
//	{ns}:dir:{<instance id>}  hash node id → entry JSON, written by that instance only,
//	                          when a node arrives, leaves or changes; fields _seq (the
//	                          number of its last event) and _alive (unix ms of its last
//	                          write or heartbeat); TTL refreshed once per heartbeat
//	{ns}:dir:events           pub/sub: "<seq> <event JSON>", each write's change
//
// Each write and its event come from one Lua script, so the hash's _seq
// and the event numbering agree. A receiver applies an instance's events
// in order; a gap, a reset event, a resubscription or the start makes it
// re-read that instance's hash. A full read every BackstopInterval is only
// a backstop. Idle, nothing is written or read per node (invariant 12).
//
// Other instances' free slots are as their owner last wrote them (changes
// are coalesced over FlushGap and scanned for every ScanInterval), less
// what this instance has assigned to them since; an owner refuses an
// assign beyond a node's max_concurrency anyway (invariant 7), and the
// requester then waits and retries.
type ClusterDirectory struct {
	hub  LocalNodes
	rdb  redis.UniversalClient
	cfg  ClusterConfig
	log  *slog.Logger
	live func(ctx context.Context) ([]string, error) // ids of the live instances

	// The local side (dirwrite.go): what this instance last wrote.
	wmu       sync.Mutex
	seq       uint64              // the number of this instance's last event
	published map[string]pubState // node id → what its entry says
	needReset bool                // the hash must be rewritten whole
	withdrawn bool                // draining: nothing is written any more
	changes   *Changes            // local nodes that changed, flush soon (ClusterConfig.Changes)
	checkOwn  chan struct{}       // cap 1: make sure this instance's hash exists
	ps        atomic.Pointer[redis.PubSub]

	// The remote side (dirfeed.go): every other instance's nodes.
	mu    sync.RWMutex
	insts map[string]*instView
	byID  map[string]*remoteNode            // node id → its newest entry
	byCap map[string]map[string]*remoteNode // capability → node id → entry (the newest only)

	subOK    atomic.Bool  // the feed is subscribed and the view was read after it
	lastFull atomic.Int64 // unix nanos of the last full read
	carrying atomic.Bool  // a full read missed an instance that is still carried
	// rereadPending: the feed was restored but the read after it failed.
	rereadPending atomic.Bool
	refreshMu     sync.Mutex
	refreshCur    *refreshCall // the read running now
	refreshNxt    *refreshCall // the read callers are waiting to start
	refreshAt     time.Time    // when the last read started

	goneMu sync.Mutex
	gone   atomic.Pointer[map[string]goneMark] // instances known gone; copied on write
}

// goneMark is an instance taken out of routing.
type goneMark struct {
	at, until time.Time
}

var _ Directory = (*ClusterDirectory)(nil)

// carryFor is how long an instance's nodes stay listed after a full read
// did not find its directory: after a Redis restart every instance is
// briefly absent until it writes its hash again, and its nodes are not gone.
const carryFor = 3 * time.Second

type remoteNode struct {
	entry dirEntry
	taken atomic.Int32 // assigned by this instance since the entry was read
}

// dirEntry is one node in an instance's directory hash.
type dirEntry struct {
	NodeView
	Gen         uint64  `json:"gen"`
	FreeSlots   int     `json:"free_slots"`
	HasBench    bool    `json:"has_benchmark,omitempty"`
	BenchMs     float64 `json:"benchmark_ms,omitempty"`
	BenchFailed bool    `json:"benchmark_failed,omitempty"`
	// Resume: the node declared wire.FeatureResume (absent when an older
	// version wrote the entry: such an owner cannot pass resume_text on).
	Resume bool `json:"resume,omitempty"`
}

// freed is the entry as the waiters for its slots see it: a node of
// another instance.
func (e *dirEntry) freed() Freed {
	return Freed{Capabilities: e.Capabilities, Trust: e.Trust, Labels: e.Labels}
}

// view is the entry as the listing shows it: its load from the free slots
// its owner wrote (which count the tasks of every requester), whatever an
// older writer put in active_tasks, load and online.
func (e *dirEntry) view() NodeView {
	v := e.NodeView
	if v.State == "" || v.State == StateServing {
		// A paused node writes no free slot, and its active_tasks is right.
		v.ActiveTasks = max(v.MaxConcurrency-e.FreeSlots, 0)
	}
	if v.State == "" {
		v.State = StateServing // written by a version without states
	}
	v.Load = load(v.ActiveTasks, v.MaxConcurrency)
	v.Online = true // listed only while its instance is live and not marked gone
	return v
}

// NewClusterDirectory returns a directory over hub and the Redis at rdb.
// live lists the live instance ids (the registry's). Start it, then Run it.
func NewClusterDirectory(hub LocalNodes, rdb redis.UniversalClient, live func(ctx context.Context) ([]string, error), cfg ClusterConfig) *ClusterDirectory {
	cfg = cfg.withDefaults()
	return &ClusterDirectory{
		hub: hub, rdb: rdb, cfg: cfg, live: live, log: cfg.Logger.With("component", "directory"),
		published: map[string]pubState{},
		changes:   cfg.Changes,
		checkOwn:  make(chan struct{}, 1),
		insts:     map[string]*instView{},
		byID:      map[string]*remoteNode{},
		byCap:     map[string]map[string]*remoteNode{},
	}
}

// Key is the directory hash of an instance.
func (d *ClusterDirectory) Key(instance string) string {
	return d.cfg.Namespace + ":dir:" + instance
}

// EventsChannel is the directory's change feed.
func (d *ClusterDirectory) EventsChannel() string { return d.cfg.Namespace + ":dir:events" }

// Healthy reports whether the directory has a current view of the
// cluster: its change feed is subscribed and was read after subscribing.
// With Redis unreachable, remote nodes are out of reach too.
func (d *ClusterDirectory) Healthy() bool { return d.subOK.Load() }

// Candidates implements Directory: local nodes first, then remote ones.
func (d *ClusterDirectory) Candidates(dst []Candidate, capability string) []Candidate {
	dst = d.hub.Candidates(dst, capability)
	if !d.Healthy() {
		return dst
	}
	gone := d.goneNow()
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, n := range d.byCap[capability] {
		// A node both here and in another's directory is moving here: the
		// local session is the one to use.
		if gone.has(n.entry.Instance) || d.hub.Session(n.entry.NodeID) != nil {
			continue
		}
		dst = append(dst, Candidate{
			NodeID: n.entry.NodeID, Owner: n.entry.Instance, Gen: n.entry.Gen, Trust: n.entry.Trust, Labels: n.entry.Labels,
			FreeSlots: n.entry.FreeSlots - int(n.taken.Load()), CPU: n.entry.CPUPercent, Resume: n.entry.Resume,
			HasBench: n.entry.HasBench, BenchMs: n.entry.BenchMs, BenchFailed: n.entry.BenchFailed,
		})
	}
	return dst
}

// Reserve takes one of a remote node's free slots in this instance's view
// before a task is sent to it, so that requests picking at the same moment
// do not all send to the one slot left (each publish is a round trip, and
// the owner refuses all but one: under load, a storm of refusals). It
// reports false, taking nothing, when this instance already counts the node
// full. The slot counts as taken until release is called (the attempt
// ended) or the owner writes the node again, which starts a new count. Both
// are needed: a task that ends within the owner's FlushGap leaves its free
// slots as they were written, so no write comes, and a count that only a
// write could reset would make the node look full for good after
// max_concurrency short tasks. A node this instance does not list (its
// entry went a moment ago) is left to its owner to judge.
func (d *ClusterDirectory) Reserve(nodeID string) (release func(), ok bool) {
	d.mu.RLock()
	n := d.byID[nodeID]
	var free int32
	if n != nil {
		free = int32(n.entry.FreeSlots)
	}
	d.mu.RUnlock()
	if n == nil {
		return noRelease, true
	}
	for {
		t := n.taken.Load()
		if t >= free {
			return noRelease, false
		}
		if n.taken.CompareAndSwap(t, t+1) {
			break
		}
	}
	// The entry this count belongs to: after a rewrite it is garbage, and
	// giving the slot back to it changes nothing.
	var once sync.Once
	return func() {
		once.Do(func() {
			for {
				t := n.taken.Load()
				if t <= 0 || n.taken.CompareAndSwap(t, t-1) {
					break
				}
			}
			d.hub.WakeSlots(n.entry.freed(), 1)
		})
	}, true
}

// MarkFull notes that a remote node refused a task for want of a slot: this
// instance treats it as full until its owner writes the node again.
func (d *ClusterDirectory) MarkFull(nodeID string) {
	d.mu.RLock()
	n := d.byID[nodeID]
	d.mu.RUnlock()
	if n != nil {
		n.taken.Store(int32(n.entry.FreeSlots))
	}
}

// goneFor is how long an instance found gone stays out of routing unless it
// shows it is alive again; by then the sweeper has usually purged it.
const goneFor = 10 * time.Second

// MarkGone takes every node of a remote instance out of routing: a publish
// to it reached nobody, it is draining, or the watcher found it gone. Its
// directory may live a few seconds more in Redis, and requests should not
// spend their attempts on its nodes. If it shows it is alive after this
// (an event from it, or a read of its hash whose _alive is newer: it was
// only reconnecting to Redis), the mark is lifted.
func (d *ClusterDirectory) MarkGone(instance string) {
	now := time.Now()
	d.updateGone(func(m map[string]goneMark) { m[instance] = goneMark{at: now, until: now.Add(goneFor)} })
	d.log.Info("instance gone or draining; its nodes are out of routing", "gone_instance", instance)
}

// revive lifts an instance's gone mark if it was alive after the mark.
func (d *ClusterDirectory) revive(instance string, alive time.Time) {
	cur := d.gone.Load()
	if cur == nil {
		return
	}
	if m, ok := (*cur)[instance]; !ok || !alive.After(m.at) {
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
	if len(gone.marks) == 0 || !d.Healthy() {
		return false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, n := range d.byCap[capability] {
		if gone.has(n.entry.Instance) {
			return true
		}
	}
	return false
}

// List implements Directory.
func (d *ClusterDirectory) List(capability string) []NodeView {
	out := d.hub.List(capability)
	if !d.Healthy() {
		return out
	}
	seen := make(map[string]bool, len(out))
	for _, v := range out {
		seen[v.NodeID] = true
	}
	gone := d.goneNow()
	d.mu.RLock()
	for _, n := range d.byID {
		if seen[n.entry.NodeID] || gone.has(n.entry.Instance) || (capability != "" && !contains(n.entry.Capabilities, capability)) {
			continue
		}
		out = append(out, n.entry.view())
	}
	d.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Online implements Directory.
func (d *ClusterDirectory) Online() int {
	n := d.hub.Len()
	if !d.Healthy() {
		return n
	}
	gone := d.goneNow()
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, r := range d.byID {
		if d.hub.Session(r.entry.NodeID) == nil && !gone.has(r.entry.Instance) {
			n++
		}
	}
	return n
}

// WaitSlot implements Directory: one queue for local and remote slots. A
// remote node's entry with free slots wakes it (reindexLocked), and so does
// the end of an attempt this instance sent to a remote node (Reserve's
// release); what neither shows (another instance's task on a remote node
// ended, and its owner has not written the node since) the first waiter
// finds on its timer.
func (d *ClusterDirectory) WaitSlot(capability string, p Place) *Waiter {
	return d.hub.WaitSlot(capability, p)
}

// Start subscribes to the change feed (confirmed by Redis), reads every
// live instance's directory, and writes this instance's whole; the
// instance is then routable from everywhere. It starts no goroutine: the
// feed's events wait on the subscription until Run applies them. Call it
// once, before Run; if it fails, it keeps no subscription.
func (d *ClusterDirectory) Start(ctx context.Context) error {
	ps := d.rdb.Subscribe(ctx, d.EventsChannel())
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return err
	}
	if err := d.readAll(ctx); err != nil {
		_ = ps.Close()
		return err
	}
	d.ps.Store(ps)
	d.subOK.Store(true)
	return d.flush(ctx, true)
}

// Run keeps the directory current until ctx ends: it applies the change
// feed, writes local changes, and runs the backstop read. It owns the
// subscription made by Start (or makes one, if Start failed or was not
// called) and closes it before returning nil, once everything it started
// has stopped.
func (d *ClusterDirectory) Run(ctx context.Context) error {
	ps := d.ps.Load()
	if ps == nil {
		if err := d.Start(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("directory start failed; retrying from the change feed", "err", err)
		}
		if ps = d.ps.Load(); ps == nil {
			ps = d.rdb.Subscribe(ctx, d.EventsChannel())
			d.ps.Store(ps)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.receive(ctx) }()
	d.writeLoop(ctx)
	if p := d.ps.Load(); p != nil {
		_ = p.Close()
	}
	wg.Wait()
	return nil
}

// event is one message on the change feed, after its "<seq> " prefix.
type event struct {
	Instance string `json:"i"`
	At       int64  `json:"t"`           // unix ms of the write
	Kind     string `json:"k,omitempty"` // "" (ops), evReset or evGone
	Ops      []op   `json:"ops,omitempty"`
}

// The kinds of event besides a list of changes.
const (
	evReset = "reset" // the instance rewrote its hash whole: re-read it
	evGone  = "gone"  // the instance drained or was purged: drop its nodes
)

// op is one node's change: its new entry, or none when it left.
type op struct {
	NodeID string          `json:"n"`
	Entry  json.RawMessage `json:"e,omitempty"`
}
