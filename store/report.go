package store

import (
	"context"
	"slices"
	"strings"
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
	if p := r.nodes[nodeID]; p != nil {
		return *p, true
	}
	return NodeStats{}, false
}

// Leaderboard ranks the nodes the store knows by score, highest first (ties:
// more tasks first, then node id), with this instance's fresher counters
// where it has them. limit <= 0 means all.
func (r *Reputation) Leaderboard(ctx context.Context, limit int) ([]LeaderboardEntry, error) {
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
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
