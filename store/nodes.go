package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Nodes: who they are, the counters reputation is computed from, their
// suspensions and benchmark profiles, in either dialect.

func (s *sqlStore) RecordNode(ctx context.Context, nodeID, accountID, name string) error {
	if nodeID == "" {
		return fmt.Errorf("store: record node: empty node id: %w", ErrInvalid)
	}
	_, err := s.db.exec(ctx, `INSERT INTO node_stats (node_id, account_id, name) VALUES ($1, $2, $3)
		ON CONFLICT (node_id) DO UPDATE SET account_id = excluded.account_id, name = excluded.name`,
		nodeID, accountID, cleanText(name))
	return wrapErr("record node", err)
}

func (s *sqlStore) SaveBenchmark(ctx context.Context, nodeID string, profile []byte, at time.Time) error {
	if nodeID == "" || !json.Valid(profile) {
		return fmt.Errorf("store: save benchmark: empty node id or invalid JSON: %w", ErrInvalid)
	}
	_, err := s.db.exec(ctx, `INSERT INTO benchmarks (node_id, profile, measured_at) VALUES ($1, $2, $3)
		ON CONFLICT (node_id) DO UPDATE SET profile = excluded.profile, measured_at = excluded.measured_at`,
		nodeID, string(profile), dbTime(at))
	return wrapErr("save benchmark", err)
}

func (s *sqlStore) Benchmark(ctx context.Context, nodeID string) ([]byte, time.Time, error) {
	var profile []byte
	var at time.Time
	err := s.db.queryRow(ctx, `SELECT CAST(profile AS TEXT), measured_at FROM benchmarks WHERE node_id = $1`, nodeID).
		Scan(&profile, (*timeCol)(&at))
	if err != nil {
		return nil, time.Time{}, notFound(err, "benchmark of %s", nodeID)
	}
	return profile, at, nil
}

func (s *sqlStore) ApplyOutcomes(ctx context.Context, outs []Outcome) error {
	if len(outs) == 0 {
		return nil
	}
	if err := checkOutcomes(outs); err != nil {
		return err
	}
	ds := aggregateOutcomes(outs)
	args := make([][]any, len(ds))
	for i, d := range ds {
		args[i] = []any{d.NodeID, d.Tasks, d.Successful, d.Ms, optTime(dbTime(d.LastAt))}
	}
	// last_task_at only moves forward, and a batch without times (NULL)
	// leaves it alone; written as a CASE because the two dialects' max of
	// two values (GREATEST, max) treat NULL differently.
	err := s.db.execAll(ctx, `INSERT INTO node_stats (node_id, total_tasks, successful_tasks, total_ms, last_task_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (node_id) DO UPDATE SET
			total_tasks = node_stats.total_tasks + excluded.total_tasks,
			successful_tasks = node_stats.successful_tasks + excluded.successful_tasks,
			total_ms = node_stats.total_ms + excluded.total_ms,
			last_task_at = CASE WHEN excluded.last_task_at IS NULL OR node_stats.last_task_at > excluded.last_task_at
				THEN node_stats.last_task_at ELSE excluded.last_task_at END`, args)
	return wrapErr("apply outcomes", err)
}

const nodeCols = `node_id, account_id, name, total_tasks, successful_tasks, total_ms,
	last_task_at, rating_sum, rating_count, suspended_until`

func scanNode(r row, n *NodeStats) error {
	return r.Scan(&n.NodeID, &n.AccountID, &n.Name, &n.TotalTasks, &n.SuccessfulTasks, &n.TotalMs,
		optTimeCol{&n.LastTaskAt}, &n.RatingSum, &n.RatingCount, optTimeCol{&n.SuspendedUntil})
}

func (s *sqlStore) NodeStats(ctx context.Context, nodeIDs []string) (map[string]NodeStats, error) {
	out := make(map[string]NodeStats, len(nodeIDs))
	ids := sortedUnique(nodeIDs)
	for len(ids) > 0 {
		chunk := ids
		if s.d.maxIn > 0 {
			chunk = ids[:min(len(ids), s.d.maxIn)]
		}
		ids = ids[len(chunk):]
		in, args := s.d.in("node_id", 1, chunk)
		ns, err := collect(ctx, s.db, scanNode, `SELECT `+nodeCols+` FROM node_stats WHERE `+in, args...)
		if err != nil {
			return nil, wrapErr("node stats", err)
		}
		for _, n := range ns {
			out[n.NodeID] = n
		}
	}
	return out, nil
}

func (s *sqlStore) AllNodeStats(ctx context.Context) ([]NodeStats, error) {
	// Nodes of deleted accounts leave the leaderboard with their account.
	out, err := collect(ctx, s.db, scanNode, `SELECT `+nodeCols+` FROM node_stats n
		WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = n.account_id AND a.deleted_at IS NOT NULL)
		ORDER BY node_id`)
	if err != nil {
		return nil, wrapErr("all node stats", err)
	}
	if out == nil {
		out = []NodeStats{}
	}
	return out, nil
}

func (s *sqlStore) Suspend(ctx context.Context, nodeID string, until time.Time) error {
	if nodeID == "" {
		return fmt.Errorf("store: suspend: empty node id: %w", ErrInvalid)
	}
	_, err := s.db.exec(ctx, `INSERT INTO node_stats (node_id, suspended_until) VALUES ($1, $2)
		ON CONFLICT (node_id) DO UPDATE SET suspended_until = excluded.suspended_until`, nodeID, dbTime(until))
	return wrapErr("suspend node", err)
}
