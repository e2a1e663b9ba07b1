package store

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// NewNodeScore is the reputation of a node with no finished task (GemmaNet).
const NewNodeScore = 50.0

// Score is GemmaNet's reputation formula, 0-100 rounded to one decimal:
//
//	40·completion rate + 20·(1 − min(avg_ms/10000, 1))
//	+ 20·max(0, 1 − hours since last task/24) + 20·(avg rating/5, or 0.5 unrated)
//
// A node with no task scores NewNodeScore. A last task "in the future"
// (another instance's clock running ahead) counts as now.
func Score(s NodeStats, now time.Time) float64 {
	if s.TotalTasks <= 0 {
		return NewNodeScore
	}
	total := float64(s.TotalTasks)
	completion := float64(s.SuccessfulTasks) / total
	avgMs := max(float64(s.TotalMs)/total, 0)
	speed := 1 - math.Min(avgMs/10000, 1)
	recency := 0.0
	if s.LastTaskAt != nil {
		hours := max(now.Sub(*s.LastTaskAt).Hours(), 0)
		recency = math.Max(0, 1-hours/24)
	}
	rating := 0.5
	if s.RatingCount > 0 {
		rating = float64(s.RatingSum) / float64(s.RatingCount) / 5
	}
	score := 40*completion + 20*speed + 20*recency + 20*rating
	return round(min(max(score, 0), 100), 1)
}

func round(x float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(x*p) / p
}

// ReputationConfig configures Reputation. Zero values mean the defaults noted.
type ReputationConfig struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// SuspendBelow is the score under which a node is suspended. Default 35.
	SuspendBelow float64
	// SuspendAfterTasks: a node is suspended only with more tasks than this.
	// Default 10.
	SuspendAfterTasks int64
	// SuspendFor is how long a suspension lasts. Default 24h.
	SuspendFor time.Duration
	// SuspendMinAccounts is how many distinct requesting accounts must have
	// seen the node fail within FailureWindow before it can be suspended:
	// failures caused by one account (say, requests built so that the node
	// cannot run them) lower the node's score but can never take it out of
	// routing (invariant 15). Default 3.
	SuspendMinAccounts int
	// FailureWindow is how long a failure keeps counting toward
	// SuspendMinAccounts. Default 1h.
	FailureWindow time.Duration
	// LeaderboardTTL is how long a computed leaderboard is served before the
	// node table is read again, so that a public endpoint does not cost a
	// full table read per call. Default 5s.
	LeaderboardTTL time.Duration
	// RefreshInterval is how often Run folds in what other instances wrote
	// (Refresh). Default 30s.
	RefreshInterval time.Duration
	// Now is the clock; default time.Now. Tests set it.
	Now func() time.Time
}

func (c ReputationConfig) withDefaults() ReputationConfig {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("component", "reputation")
	if c.SuspendBelow == 0 {
		c.SuspendBelow = 35
	}
	if c.SuspendAfterTasks == 0 {
		c.SuspendAfterTasks = 10
	}
	if c.SuspendFor <= 0 {
		c.SuspendFor = 24 * time.Hour
	}
	if c.SuspendMinAccounts <= 0 {
		c.SuspendMinAccounts = 3
	}
	if c.FailureWindow <= 0 {
		c.FailureWindow = time.Hour
	}
	if c.LeaderboardTTL <= 0 {
		c.LeaderboardTTL = 5 * time.Second
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// View is what routing needs of a node's reputation.
type View struct {
	Score     float64
	AvgMs     float64 // 0 when the node has no task yet: unknown, not fast
	Suspended bool
}

// Reputation keeps every known node's counters in memory so that routing
// reads scores without I/O. Outcomes observed here count at once and reach
// the database through the Writer; Refresh (every RefreshInterval while
// Run runs) folds in what other instances wrote. Suspensions are persisted
// by the Writer.
//
// Each node's counters are the database's as of the last Load or Refresh,
// plus the outcomes observed since that the database has not committed yet.
// Refresh keeps that true without counting an outcome twice or losing one:
// see reload.
type Reputation struct {
	st  Store
	w   *Writer
	cfg ReputationConfig
	log *slog.Logger

	// mu guards nodes and failers. Lock order: Writer.applyMu, then mu,
	// then Writer.mu.
	mu    sync.RWMutex
	nodes map[string]*nodeState
	// failers holds, per node, the accounts whose requests it failed
	// recently and when each last did (at most maxFailers per node).
	failers map[string]map[string]time.Time

	lb leaderboardCache
}

// NewReputation returns an empty cache over st, sending outcomes and
// suspensions through w (which must not be nil).
func NewReputation(st Store, w *Writer, cfg ReputationConfig) *Reputation {
	cfg = cfg.withDefaults()
	return &Reputation{st: st, w: w, cfg: cfg, log: cfg.Logger, nodes: make(map[string]*nodeState),
		failers: make(map[string]map[string]time.Time)}
}

// nodeState is what Reputation holds of one node: its counters, and the View
// routing last read of them.
type nodeState struct {
	stats NodeStats
	// view is the View computed from stats, valid before its until; nil
	// once stats change, until it is computed again. Observe, the change
	// every task makes, computes it into own under mu's write lock (no
	// reader is reading own then, and nothing is allocated); a reader under
	// the read lock stores a View of its own when it finds none or an old
	// one (two readers may both do so: they store the same thing).
	view atomic.Pointer[timedView]
	own  timedView
}

type timedView struct {
	View
	until time.Time
}

// viewTTL bounds how long a node's computed View is reused while its
// counters do not change. Only the score's recency term moves with time
// (20 points over 24 hours: 0.0002 in a second), and a suspension's end is
// honoured exactly (a View never outlives it).
const viewTTL = time.Second

// Get returns a node's current view: fast, no I/O. An unknown node has the
// new-node score, no average and no suspension.
func (r *Reputation) Get(nodeID string) View { return r.ViewAt(nodeID, r.cfg.Now()) }

// ViewAt is Get judged at now, for a caller that reads the clock once for
// many nodes (routing asks of every capable node for every request). The
// View is computed once per change of the node's counters, and at most
// every viewTTL between.
func (r *Reputation) ViewAt(nodeID string, now time.Time) View {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := r.nodes[nodeID]
	if n == nil {
		return View{Score: NewNodeScore}
	}
	if tv := n.view.Load(); tv != nil && now.Before(tv.until) {
		return tv.View
	}
	tv := new(timedView)
	n.viewInto(tv, now)
	n.view.Store(tv)
	return tv.View
}

// viewInto computes n's View at now into tv.
func (n *nodeState) viewInto(tv *timedView, now time.Time) {
	s := &n.stats
	*tv = timedView{View: View{Score: Score(*s, now), Suspended: suspended(*s, now)}, until: now.Add(viewTTL)}
	if s.TotalTasks > 0 {
		tv.AvgMs = float64(s.TotalMs) / float64(s.TotalTasks)
	}
	if tv.Suspended && s.SuspendedUntil.Before(tv.until) {
		tv.until = *s.SuspendedUntil
	}
}

func suspended(s NodeStats, now time.Time) bool {
	return s.SuspendedUntil != nil && now.Before(*s.SuspendedUntil)
}

// Observe counts a node's outcome at once, hands it to the Writer, and
// suspends the node when its score falls below SuspendBelow after more than
// SuspendAfterTasks tasks, and failures from at least SuspendMinAccounts
// distinct requesting accounts within FailureWindow (see failedForLocked).
// A zero At is taken as now.
func (r *Reputation) Observe(o Outcome) {
	if o.NodeID == "" {
		return
	}
	now := r.cfg.Now()
	if o.At.IsZero() {
		o.At = now
	}
	var until time.Time
	var score float64
	r.mu.Lock()
	n := r.nodeLocked(o.NodeID)
	s := &n.stats
	applyOutcome(s, o)
	// Queued under mu so that reload sees the outcome either in memory and
	// in the queue, or in neither (it will arrive after reload).
	r.w.AddOutcome(o)
	accounts := 0
	if !o.Success {
		accounts = r.failedForLocked(o.NodeID, o.Account, now)
	}
	if accounts >= r.cfg.SuspendMinAccounts && s.TotalTasks > r.cfg.SuspendAfterTasks && !suspended(*s, now) {
		if score = Score(*s, now); score < r.cfg.SuspendBelow {
			until = now.Add(r.cfg.SuspendFor)
			s.SuspendedUntil = timePtr(dbTime(until))
		}
	}
	total := s.TotalTasks
	n.viewInto(&n.own, now) // for routing's next pick: computed once, here
	n.view.Store(&n.own)
	r.mu.Unlock()
	if !until.IsZero() {
		r.w.addSuspension(o.NodeID, until)
		r.log.Warn("node suspended for a low reputation", "node_id", o.NodeID, "score", score,
			"total_tasks", total, "failing_accounts", accounts, "until", until)
	}
}

// maxFailers bounds the accounts remembered per node; more than
// SuspendMinAccounts are never needed, a few spare ones keep an old entry
// from pushing out a recent one.
const maxFailers = 16

// failedForLocked records that account saw node fail at now and returns how
// many distinct accounts saw it fail within FailureWindow. The record is
// in memory only, per instance: a suspension needs the distinct accounts on
// one instance, which only makes it rarer.
func (r *Reputation) failedForLocked(node, account string, now time.Time) int {
	m := r.failers[node]
	if m == nil {
		m = make(map[string]time.Time)
		r.failers[node] = m
	}
	m[account] = now
	n := 0
	var oldest string
	var oldestAt time.Time
	for acct, at := range m {
		if now.Sub(at) > r.cfg.FailureWindow {
			delete(m, acct)
			continue
		}
		n++
		if n == 1 || at.Before(oldestAt) {
			oldest, oldestAt = acct, at
		}
	}
	if len(m) > max(maxFailers, r.cfg.SuspendMinAccounts) && oldest != account {
		delete(m, oldest)
		n--
	}
	return n
}

// nodeLocked returns a node for the caller to change its counters, with mu
// held for writing: its View is dropped.
func (r *Reputation) nodeLocked(id string) *nodeState {
	n := r.nodes[id]
	if n == nil {
		n = &nodeState{stats: NodeStats{NodeID: id}}
		r.nodes[id] = n
	}
	n.view.Store(nil)
	return n
}

func (r *Reputation) ratedLocked(nodeIDs []string, rating int) {
	for _, id := range nodeIDs {
		s := &r.nodeLocked(id).stats
		s.RatingSum += int64(rating)
		s.RatingCount++
	}
}

// Rate rates a task (Writer.Rate: a task still buffered is written first)
// and counts the rating in memory, as one step with respect to Refresh.
func (r *Reputation) Rate(ctx context.Context, taskID, accountID string, rating int, now time.Time) ([]string, error) {
	r.w.applyMu.Lock()
	defer r.w.applyMu.Unlock()
	nodes, err := r.w.Rate(ctx, taskID, accountID, rating, now)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.ratedLocked(nodes, rating)
	r.mu.Unlock()
	return nodes, nil
}

// Load reads the nodes' counters from the store (a node registering) and
// keeps them known from then on.
func (r *Reputation) Load(ctx context.Context, nodeIDs []string) error {
	return r.reload(ctx, nodeIDs)
}

// Refresh reloads every known node from the store, so that instances
// sharing a database converge on the same scores.
func (r *Reputation) Refresh(ctx context.Context) error {
	r.mu.RLock()
	ids := make([]string, 0, len(r.nodes))
	for id := range r.nodes {
		ids = append(ids, id)
	}
	r.mu.RUnlock()
	return r.reload(ctx, ids)
}

// Run refreshes every RefreshInterval until ctx ends, then returns nil;
// errors are logged, not fatal (the cached scores stay usable). Everything
// else works without it: only what other instances wrote waits for it.
func (r *Reputation) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("reputation refresh failed; keeping cached scores", "err", err)
			}
		}
	}
}

// reload replaces the nodes' counters with the database's plus the outcomes
// the Writer has not committed yet.
//
// Why this counts every outcome exactly once: the Writer commits outcomes
// and removes them from its queue together under applyMu, and reload holds
// applyMu from before the read until after it has copied the queue. So while
// it runs, an outcome is either committed (in what was read, gone from the
// queue) or queued (not in what was read) — never both, never neither. An
// outcome observed during the read is queued and not committed, so it is
// counted from the queue; Observe and the install below both hold mu, so an
// outcome cannot slip between copying the queue and replacing the counters.
// Outcomes the Writer dropped are in neither, and vanish from memory as they
// are missing from the database. Suspensions are merged by keeping the later
// time, since one decided here may not be written yet.
func (r *Reputation) reload(ctx context.Context, nodeIDs []string) error {
	ids := sortedUnique(nodeIDs)
	if len(ids) == 0 {
		return nil
	}
	r.w.applyMu.Lock()
	defer r.w.applyMu.Unlock()
	stats, err := r.st.NodeStats(ctx, ids)
	if err != nil {
		return err
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fresh := make(map[string]*NodeStats, len(ids))
	for _, id := range ids {
		s, ok := stats[id]
		if !ok {
			s = NodeStats{NodeID: id}
		}
		fresh[id] = &s
	}
	for _, o := range r.w.pendingOutcomes(want) {
		applyOutcome(fresh[o.NodeID], o)
	}
	for id, s := range fresh {
		if n := r.nodes[id]; n != nil {
			old := &n.stats
			s.SuspendedUntil = later(s.SuspendedUntil, old.SuspendedUntil)
			if s.Name == "" && s.AccountID == "" {
				s.Name, s.AccountID = old.Name, old.AccountID
			}
		}
		r.nodeLocked(id).stats = *s
	}
	return nil
}

func later(a, b *time.Time) *time.Time {
	switch {
	case a == nil:
		return b
	case b == nil || a.After(*b):
		return a
	}
	return b
}
