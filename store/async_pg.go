package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The async queue on PostgreSQL. Every time is the database's (now()), so
// the leases of instances whose clocks differ compare alike; claims take
// the next row with FOR UPDATE SKIP LOCKED, so concurrent claimers never
// wait on, or get, the same task.

func scanPGAsync(row pgx.Row) (AsyncTask, error) {
	var t AsyncTask
	var content, params, result []byte
	var ttlMs int64
	var lease *time.Time
	var prompt, completion *int64
	err := row.Scan(&t.ID, &t.AccountID, &t.TaskType, &content, &params, &t.Stream, &t.Trust, &t.Priority,
		&t.WebhookURL, &ttlMs, &t.Status, &t.Attempts, &t.Owner, &t.Gen, &lease, &t.Streamed,
		&t.CancelRequested, &t.WebhookPending, &t.NodeID, &result, &t.ErrorCode, &t.ErrorMessage,
		&t.ProcessingMs, &prompt, &completion, &t.CreatedAt, &t.StartedAt, &t.FinishedAt, &t.ExpiresAt)
	if err != nil {
		return AsyncTask{}, err
	}
	t.Content, t.Result, t.TTL = string(content), string(result), time.Duration(ttlMs)*time.Millisecond
	if params != nil {
		t.Params = params
	}
	if lease != nil {
		t.LeaseUntil = lease.UTC()
	}
	if prompt != nil || completion != nil {
		t.Usage = &Usage{PromptTokens: deref(prompt), CompletionTokens: deref(completion)}
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.StartedAt, t.FinishedAt, t.ExpiresAt = utcPtr(t.StartedAt), utcPtr(t.FinishedAt), utcPtr(t.ExpiresAt)
	return t, nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func collectPGAsync(rows pgx.Rows, err error) ([]AsyncTask, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AsyncTask
	for rows.Next() {
		t, err := scanPGAsync(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func (s *pgStore) SubmitAsync(ctx context.Context, t AsyncTask) error {
	if err := checkSubmit(t); err != nil {
		return err
	}
	var params []byte
	if len(t.Params) > 0 {
		params = t.Params
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO async_tasks (id, account_id, task_type, content, params, stream, trust,
		priority, turn, webhook_url, ttl_ms, status, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
			(SELECT count(*) FROM async_tasks WHERE account_id = $2 AND task_type = $3 AND status = 'queued'),
			$9, $10, 'queued', now())`,
		t.ID, t.AccountID, cleanText(t.TaskType), []byte(t.Content), params, t.Stream, t.Trust, t.Priority,
		cleanText(t.WebhookURL), t.TTL.Milliseconds())
	if isPGUnique(err) {
		return fmt.Errorf("store: async task %s exists: %w", t.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("store: submit async task: %w", err)
	}
	return nil
}

func (s *pgStore) AsyncTask(ctx context.Context, id string) (AsyncTask, error) {
	t, err := scanPGAsync(s.pool.QueryRow(ctx, `SELECT `+asyncColumns+` FROM async_tasks
		WHERE id = $1 AND (expires_at IS NULL OR expires_at > now())`, id))
	return t, notFound(err, "async task %s", id)
}

func (s *pgStore) ClaimAsync(ctx context.Context, owner string, taskTypes []string, official bool, lease time.Duration) (AsyncTask, error) {
	t, err := scanPGAsync(s.pool.QueryRow(ctx, `UPDATE async_tasks SET status = 'running', owner = $1, gen = gen + 1,
			attempts = attempts + 1, lease_until = now() + $4 * interval '1 millisecond', started_at = now()
		WHERE id = (SELECT id FROM async_tasks
			WHERE status = 'queued' AND task_type = ANY($2) AND ($3 OR trust <> 'official')
			ORDER BY priority DESC, turn, created_at
			LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING `+asyncColumns, owner, taskTypes, official, lease.Milliseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return AsyncTask{}, fmt.Errorf("store: no queued async task for %v: %w", taskTypes, ErrNotFound)
	}
	if err != nil {
		return AsyncTask{}, fmt.Errorf("store: claim an async task: %w", err)
	}
	return t, nil
}

func (s *pgStore) RenewAsync(ctx context.Context, owner string, lease time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `UPDATE async_tasks SET lease_until = now() + $2 * interval '1 millisecond'
		WHERE owner = $1 AND status = 'running' RETURNING id, cancel_requested`, owner, lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("store: renew async leases: %w", err)
	}
	defer rows.Close()
	var cancel []string
	for rows.Next() {
		var id string
		var c bool
		if err := rows.Scan(&id, &c); err != nil {
			return nil, err
		}
		if c {
			cancel = append(cancel, id)
		}
	}
	return cancel, rows.Err()
}

func (s *pgStore) MarkStreamed(ctx context.Context, id string, gen int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE async_tasks SET streamed = true
		WHERE id = $1 AND gen = $2 AND status = 'running'`, id, gen)
	if err != nil {
		return fmt.Errorf("store: mark async task streamed: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fencedOut(id, gen)
	}
	return nil
}

func (s *pgStore) EndAsync(ctx context.Context, id string, gen int64, end AsyncEnd) (AsyncTask, error) {
	if err := checkEnd(end); err != nil {
		return AsyncTask{}, err
	}
	var prompt, completion *int64
	if end.Usage != nil {
		prompt, completion = &end.Usage.PromptTokens, &end.Usage.CompletionTokens
	}
	t, err := scanPGAsync(s.pool.QueryRow(ctx, `UPDATE async_tasks SET status = $3, node_id = $4, result = $5,
			error_code = $6, error_message = $7, processing_ms = $8, prompt_tokens = $9, completion_tokens = $10,
			finished_at = now(), expires_at = now() + ttl_ms * interval '1 millisecond', lease_until = NULL,
			webhook_pending = (webhook_url <> '')
		WHERE id = $1 AND gen = $2 AND status = 'running'
		RETURNING `+asyncColumns, id, gen, end.Status, end.NodeID, []byte(end.Result), cleanText(end.ErrorCode),
		cleanText(end.ErrorMessage), end.ProcessingMs, prompt, completion))
	if errors.Is(err, pgx.ErrNoRows) {
		return AsyncTask{}, fencedOut(id, gen)
	}
	if err != nil {
		return AsyncTask{}, fmt.Errorf("store: end async task: %w", err)
	}
	return t, nil
}

func (s *pgStore) CancelAsync(ctx context.Context, id, accountID string) (AsyncTask, error) {
	// One statement: a queued task ends, a running one is asked to, a
	// final one is left alone; RETURNING shows the row as it now is.
	t, err := scanPGAsync(s.pool.QueryRow(ctx, `UPDATE async_tasks SET
			status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
			cancel_requested = cancel_requested OR status = 'running',
			finished_at = CASE WHEN status = 'queued' THEN now() ELSE finished_at END,
			expires_at = CASE WHEN status = 'queued' THEN now() + ttl_ms * interval '1 millisecond' ELSE expires_at END,
			error_code = CASE WHEN status = 'queued' THEN 'cancelled' ELSE error_code END,
			webhook_pending = CASE WHEN status = 'queued' THEN webhook_url <> '' ELSE webhook_pending END
		WHERE id = $1 AND account_id = $2 AND (expires_at IS NULL OR expires_at > now())
		RETURNING `+asyncColumns, id, accountID))
	return t, notFound(err, "async task %s", id)
}

func (s *pgStore) ReleaseAsync(ctx context.Context, lost []string, maxAttempts int) ([]AsyncTask, error) {
	if lost == nil {
		lost = []string{}
	}
	// A task whose cancellation was asked for ends cancelled; one that may
	// run again is queued; the rest fail. Only the ended ones come back.
	rows, err := s.pool.Query(ctx, `WITH released AS (
		UPDATE async_tasks SET
			status = CASE WHEN cancel_requested THEN 'cancelled'
				WHEN attempts < $2 AND NOT streamed THEN 'queued' ELSE 'failed' END,
			error_code = CASE WHEN cancel_requested THEN 'cancelled'
				WHEN attempts < $2 AND NOT streamed THEN error_code ELSE 'instance_lost' END,
			error_message = CASE WHEN NOT cancel_requested AND NOT (attempts < $2 AND NOT streamed)
				THEN 'the instance running the task was lost' ELSE error_message END,
			finished_at = CASE WHEN cancel_requested OR NOT (attempts < $2 AND NOT streamed) THEN now() END,
			expires_at = CASE WHEN cancel_requested OR NOT (attempts < $2 AND NOT streamed)
				THEN now() + ttl_ms * interval '1 millisecond' END,
			webhook_pending = (cancel_requested OR NOT (attempts < $2 AND NOT streamed)) AND webhook_url <> '',
			owner = '', lease_until = NULL
		WHERE status = 'running' AND (lease_until < now() OR owner = ANY($1))
		RETURNING `+asyncColumns+`)
		SELECT * FROM released WHERE status <> 'queued'`, lost, maxAttempts)
	out, err := collectPGAsync(rows, err)
	if err != nil {
		return nil, fmt.Errorf("store: release async tasks: %w", err)
	}
	return out, nil
}

func (s *pgStore) PendingWebhooks(ctx context.Context, endedBefore time.Time, limit int) ([]AsyncTask, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+asyncColumns+` FROM async_tasks
		WHERE webhook_pending AND finished_at < $1 ORDER BY finished_at LIMIT $2`, dbTime(endedBefore), limit)
	out, err := collectPGAsync(rows, err)
	if err != nil {
		return nil, fmt.Errorf("store: pending webhooks: %w", err)
	}
	return out, nil
}

func (s *pgStore) ClearWebhook(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE async_tasks SET webhook_pending = false WHERE id = $1`, id); err != nil {
		return fmt.Errorf("store: clear webhook: %w", err)
	}
	return nil
}

func (s *pgStore) PurgeAsync(ctx context.Context, now time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM async_tasks WHERE expires_at < $1`, dbTime(now))
	if err != nil {
		return 0, fmt.Errorf("store: purge async tasks: %w", err)
	}
	return tag.RowsAffected(), nil
}
