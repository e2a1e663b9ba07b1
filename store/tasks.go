package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Records of finished tasks and their ratings, in either dialect.

func (s *sqlStore) WriteTasks(ctx context.Context, recs []TaskRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if err := checkTasks(recs); err != nil {
		return err
	}
	return wrapErr("write tasks", s.db.writeTasks(ctx, recs))
}

func (s *sqlStore) Task(ctx context.Context, id string) (TaskRecord, error) {
	var r TaskRecord
	var nodes, retries string
	err := s.db.queryRow(ctx, `SELECT id, account_id, key_id, task_type, stream, status, error_code, `+s.d.nodeIDs+`,
		requester_instance, owner_instance, attempts, created_at, assigned_at, finished_at,
		processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens, retries
		FROM tasks WHERE id = $1`, id).Scan(&r.ID, &r.AccountID, &r.KeyID, &r.TaskType, &r.Stream, &r.Status, &r.ErrorCode, &nodes,
		&r.Requester, &r.Owner, &r.Attempts, (*timeCol)(&r.CreatedAt), (*timeCol)(&r.AssignedAt), (*timeCol)(&r.FinishedAt),
		&r.ProcessingMs, &r.ContentBytes, &r.ResultBytes, &r.Usage.PromptTokens, &r.Usage.CompletionTokens, &retries)
	if err != nil {
		return TaskRecord{}, notFound(err, "task %s", id)
	}
	if r.NodeIDs, err = decodeNodeIDs(nodes); err != nil {
		return TaskRecord{}, fmt.Errorf("store: task %s: node_ids: %w", id, err)
	}
	if r.Retries, err = decodeRetries(retries); err != nil {
		return TaskRecord{}, fmt.Errorf("store: task %s: retries: %w", id, err)
	}
	return r, nil
}

// decodeNodeIDs reads what dialect.nodeIDs selects; never nil.
func decodeNodeIDs(s string) ([]string, error) {
	var ids []string
	if err := json.Unmarshal([]byte(s), &ids); err != nil {
		return nil, err
	}
	return nonNil(ids), nil
}

func (s *sqlStore) CountCompletedSince(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := s.db.queryRow(ctx, `SELECT count(*) FROM tasks WHERE status = $1 AND finished_at >= $2`,
		StatusCompleted, dbTime(t)).Scan(&n)
	return n, wrapErr("count tasks", err)
}

func (s *sqlStore) Rate(ctx context.Context, taskID, accountID string, rating int, now time.Time) ([]string, error) {
	if err := checkRating(rating); err != nil {
		return nil, err
	}
	var nodes []string
	err := s.db.inTx(ctx, func(tx querier) error {
		// The lock queues concurrent ratings of one task behind each
		// other, so the second sees the first's rows and gets ErrConflict.
		var t rateTarget
		var ids string
		err := tx.queryRow(ctx, `SELECT account_id, finished_at, `+s.d.nodeIDs+` FROM tasks WHERE id = $1`+s.d.forUpdate, taskID).
			Scan(&t.AccountID, (*timeCol)(&t.FinishedAt), &ids)
		if err := notFound(err, "task %s", taskID); err != nil {
			return err
		}
		if t.NodeIDs, err = decodeNodeIDs(ids); err != nil {
			return fmt.Errorf("task %s: node_ids: %w", taskID, err)
		}
		nodes = sortedUnique(t.NodeIDs)
		t.NodeIDs = nodes
		if err := checkRate(taskID, t, accountID, now); err != nil {
			return err
		}
		for _, n := range nodes {
			added, err := tx.exec(ctx, `INSERT INTO ratings (task_id, node_id, account_id, rating, created_at)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, taskID, n, accountID, rating, dbTime(now))
			if err != nil {
				return err
			}
			if added == 0 {
				return fmt.Errorf("store: task %s is rated already: %w", taskID, ErrConflict)
			}
			if _, err := tx.exec(ctx, `INSERT INTO node_stats (node_id, rating_sum, rating_count) VALUES ($1, $2, 1)
				ON CONFLICT (node_id) DO UPDATE SET rating_sum = node_stats.rating_sum + excluded.rating_sum,
					rating_count = node_stats.rating_count + 1`, n, rating); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrapErr("rate", err)
	}
	return nodes, nil
}
