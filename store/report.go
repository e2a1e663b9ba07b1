package store

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Report is a node's reputation as GET /api/v1/reputation/{node_id} shows it
// (GemmaNet's fields).
type Report struct {
	NodeID        string  `json:"node_id"`
	Score         float64 `json:"score"`
	TotalTasks    int64   `json:"total_tasks"`
	SuccessRate   float64 `json:"success_rate"`    // 0-1, 3 decimals
	AvgResponseMs float64 `json:"avg_response_ms"` // 1 decimal
	AvgRating     float64 `json:"avg_rating"`      // 2 decimals, 0 when unrated
	TotalRatings  int64   `json:"total_ratings"`
}

// LeaderboardEntry is a Report with the node's name.
type LeaderboardEntry struct {
	Report
	Name string `json:"name"`
}

func makeReport(s NodeStats, now time.Time) Report {
	rep := Report{NodeID: s.NodeID, Score: Score(s, now), TotalTasks: s.TotalTasks, TotalRatings: s.RatingCount}
	if s.TotalTasks > 0 {
		rep.SuccessRate = round(float64(s.SuccessfulTasks)/float64(s.TotalTasks), 3)
		rep.AvgResponseMs = round(float64(s.TotalMs)/float64(s.TotalTasks), 1)
	}
	if s.RatingCount > 0 {
		rep.AvgRating = round(float64(s.RatingSum)/float64(s.RatingCount), 2)
	}
	return rep
}

// Report returns a node's reputation: from memory when the node is known
// here (it includes outcomes not yet written), else from the store. An
// unknown node reports zeros and the new-node score. Looking a node up does
// not make it known, so arbitrary ids cannot grow the cache.
func (r *Reputation) Report(ctx context.Context, nodeID string) (Report, error) {
	s, ok := r.cached(nodeID)
	if !ok {
		m, err := r.st.NodeStats(ctx, []string{nodeID})
		if err != nil {
			return Report{}, err
		}
		s, ok = m[nodeID]
		if !ok {
			s = NodeStats{NodeID: nodeID}
		}
	}
	return makeReport(s, r.cfg.Now()), nil
}

func (r *Reputation) cached(nodeID string) (NodeStats, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n := r.nodes[nodeID]; n != nil {
		return n.stats, true
	}
	return NodeStats{}, false
}

// leaderboardCache holds the last full ranking for LeaderboardTTL, and
// makes concurrent callers share one read of the node table.
type leaderboardCache struct {
	mu      sync.Mutex
	at      time.Time
	ranked  []LeaderboardEntry // nil until the first successful read
	pending *leaderboardFlight
}

type leaderboardFlight struct {
	done   chan struct{}
	ranked []LeaderboardEntry
	err    error
}

// Leaderboard ranks the nodes the store knows by score, highest first (ties:
// more tasks first, then node id), with this instance's fresher counters
// where it has them. limit <= 0 means all. The ranking is computed at most
// once per LeaderboardTTL: the endpoint is public, and each computation
// reads the whole node table.
func (r *Reputation) Leaderboard(ctx context.Context, limit int) ([]LeaderboardEntry, error) {
	c := &r.lb
	c.mu.Lock()
	if c.ranked != nil && r.cfg.Now().Sub(c.at) < r.cfg.LeaderboardTTL {
		ranked := c.ranked
		c.mu.Unlock()
		return top(ranked, limit), nil
	}
	f := c.pending
	if f == nil {
		f = &leaderboardFlight{done: make(chan struct{})}
		c.pending = f
		c.mu.Unlock()
		// The first caller reads for everyone, so it finishes the read even
		// if its own client leaves; the store's deadline (Guard) bounds it.
		r.rankFor(context.WithoutCancel(ctx), f)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	return top(f.ranked, limit), nil
}

// rankFor computes the ranking for a flight and caches it.
func (r *Reputation) rankFor(ctx context.Context, f *leaderboardFlight) {
	f.ranked, f.err = r.rank(ctx)
	c := &r.lb
	c.mu.Lock()
	if f.err == nil {
		c.ranked, c.at = f.ranked, r.cfg.Now()
	}
	c.pending = nil
	c.mu.Unlock()
	close(f.done)
}

// top returns the first limit entries (all for limit <= 0) in a slice of its
// own, as the cached ranking is shared.
func top(ranked []LeaderboardEntry, limit int) []LeaderboardEntry {
	if limit > 0 && len(ranked) > limit {
		ranked = ranked[:limit]
	}
	return slices.Clone(ranked)
}

func (r *Reputation) rank(ctx context.Context) ([]LeaderboardEntry, error) {
	all, err := r.st.AllNodeStats(ctx)
	if err != nil {
		return nil, err
	}
	now := r.cfg.Now()
	out := make([]LeaderboardEntry, 0, len(all))
	for _, s := range all {
		if c, ok := r.cached(s.NodeID); ok {
			c.Name = s.Name // the store's name is authoritative (RecordNode)
			s = c
		}
		out = append(out, LeaderboardEntry{Report: makeReport(s, now), Name: s.Name})
	}
	slices.SortFunc(out, func(a, b LeaderboardEntry) int {
		switch {
		case a.Score != b.Score:
			if a.Score > b.Score {
				return -1
			}
			return 1
		case a.TotalTasks != b.TotalTasks:
			if a.TotalTasks > b.TotalTasks {
				return -1
			}
			return 1
		}
		return strings.Compare(a.NodeID, b.NodeID)
	})
	return out, nil
}

// NodeReport is a node's Report with its suspension, for operators.
type NodeReport struct {
	Report
	SuspendedUntil *time.Time `json:"suspended_until,omitempty"` // set while the node is suspended
}

// Reports returns many nodes' reputations at once: from memory for the
// nodes known here, and one store read for the rest. On a store error the
// ones from memory come back with it.
func (r *Reputation) Reports(ctx context.Context, nodeIDs []string) (map[string]NodeReport, error) {
	now := r.cfg.Now()
	out := make(map[string]NodeReport, len(nodeIDs))
	var missing []string
	for _, id := range nodeIDs {
		if s, ok := r.cached(id); ok {
			out[id] = nodeReport(s, now)
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	m, err := r.st.NodeStats(ctx, missing)
	if err != nil {
		return out, err
	}
	for _, id := range missing {
		s, ok := m[id]
		if !ok {
			s = NodeStats{NodeID: id}
		}
		out[id] = nodeReport(s, now)
	}
	return out, nil
}

func nodeReport(s NodeStats, now time.Time) NodeReport {
	rep := NodeReport{Report: makeReport(s, now)}
	if suspended(s, now) {
		rep.SuspendedUntil = s.SuspendedUntil
	}
	return rep
}
