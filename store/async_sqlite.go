package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The async queue on SQLite: one process, and every writing transaction
// takes the file's write lock at BEGIN (_txlock=immediate), so a claim's
// read and update are never interleaved with another's. Times are the
// process's clock.

type rowScanner interface{ Scan(dest ...any) error }

func scanSQLiteAsync(row rowScanner) (AsyncTask, error) {
	var t AsyncTask
	var content, params, result []byte
	var ttlMs, created int64
	var lease, started, finished, expires, prompt, completion sql.NullInt64
	err := row.Scan(&t.ID, &t.AccountID, &t.TaskType, &content, &params, &t.Stream, &t.Trust, &t.Priority,
		&t.WebhookURL, &ttlMs, &t.Status, &t.Attempts, &t.Owner, &t.Gen, &lease, &t.Streamed,
		&t.CancelRequested, &t.WebhookPending, &t.NodeID, &result, &t.ErrorCode, &t.ErrorMessage,
		&t.ProcessingMs, &prompt, &completion, &created, &started, &finished, &expires)
	if err != nil {
		return AsyncTask{}, err
	}
	t.Content, t.Result, t.TTL = string(content), string(result), time.Duration(ttlMs)*time.Millisecond
	if params != nil {
		t.Params = params
	}
	t.CreatedAt = fromMicro(created)
	if lease.Valid {
		t.LeaseUntil = fromMicro(lease.Int64)
	}
	t.StartedAt, t.FinishedAt, t.ExpiresAt = microPtr(started), microPtr(finished), microPtr(expires)
	if prompt.Valid || completion.Valid {
		t.Usage = &Usage{PromptTokens: prompt.Int64, CompletionTokens: completion.Int64}
	}
	return t, nil
}

func microPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicro(v.Int64)
	return &t
}

func collectSQLiteAsync(rows *sql.Rows, err error) ([]AsyncTask, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AsyncTask
	for rows.Next() {
		t, err := scanSQLiteAsync(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func (s *sqliteStore) SubmitAsync(ctx context.Context, t AsyncTask) error {
	if err := checkSubmit(t); err != nil {
		return err
	}
	var params []byte
	if len(t.Params) > 0 {
		params = t.Params
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO async_tasks (id, account_id, task_type, content, params, stream, trust,
		priority, turn, webhook_url, ttl_ms, status, created_at)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,
			(SELECT count(*) FROM async_tasks WHERE account_id = ?2 AND task_type = ?3 AND status = 'queued'),
			?9, ?10, 'queued', ?11)`,
		t.ID, t.AccountID, t.TaskType, []byte(t.Content), params, t.Stream, t.Trust, t.Priority,
		t.WebhookURL, t.TTL.Milliseconds(), micro(time.Now()))
	if isSQLiteUnique(err) {
		return fmt.Errorf("store: async task %s exists: %w", t.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("store: submit async task: %w", err)
	}
	return nil
}

func (s *sqliteStore) AsyncTask(ctx context.Context, id string) (AsyncTask, error) {
	t, err := scanSQLiteAsync(s.db.QueryRowContext(ctx, `SELECT `+asyncColumns+` FROM async_tasks
		WHERE id = ? AND (expires_at IS NULL OR expires_at > ?)`, id, micro(time.Now())))
	return t, notFound(err, "async task %s", id)
}

func (s *sqliteStore) ClaimAsync(ctx context.Context, owner string, taskTypes []string, official bool, lease time.Duration) (AsyncTask, error) {
	if len(taskTypes) == 0 {
		return AsyncTask{}, fmt.Errorf("store: no queued async task for no task type: %w", ErrNotFound)
	}
	now := micro(time.Now())
	args := []any{owner, now, now + lease.Microseconds(), official}
	marks := make([]string, len(taskTypes))
	for i, tt := range taskTypes {
		marks[i] = fmt.Sprintf("?%d", len(args)+1)
		args = append(args, tt)
	}
	t, err := scanSQLiteAsync(s.db.QueryRowContext(ctx, `UPDATE async_tasks SET status = 'running', owner = ?1,
			gen = gen + 1, attempts = attempts + 1, lease_until = ?3, started_at = ?2
		WHERE id = (SELECT id FROM async_tasks
			WHERE status = 'queued' AND task_type IN (`+strings.Join(marks, ", ")+`) AND (?4 OR trust <> 'official')
			ORDER BY priority DESC, turn, created_at LIMIT 1)
		RETURNING `+asyncColumns, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return AsyncTask{}, fmt.Errorf("store: no queued async task for %v: %w", taskTypes, ErrNotFound)
	}
	if err != nil {
		return AsyncTask{}, fmt.Errorf("store: claim an async task: %w", err)
	}
	return t, nil
}

func (s *sqliteStore) RenewAsync(ctx context.Context, owner string, lease time.Duration) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `UPDATE async_tasks SET lease_until = ?2
		WHERE owner = ?1 AND status = 'running' RETURNING id, cancel_requested`,
		owner, micro(time.Now())+lease.Microseconds())
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

func (s *sqliteStore) MarkStreamed(ctx context.Context, id string, gen int64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE async_tasks SET streamed = 1
		WHERE id = ? AND gen = ? AND status = 'running'`, id, gen)
	if err != nil {
		return fmt.Errorf("store: mark async task streamed: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fencedOut(id, gen)
	}
	return nil
}

func (s *sqliteStore) EndAsync(ctx context.Context, id string, gen int64, end AsyncEnd) (AsyncTask, error) {
	if err := checkEnd(end); err != nil {
		return AsyncTask{}, err
	}
	var prompt, completion any
	if end.Usage != nil {
		prompt, completion = end.Usage.PromptTokens, end.Usage.CompletionTokens
	}
	now := micro(time.Now())
	t, err := scanSQLiteAsync(s.db.QueryRowContext(ctx, `UPDATE async_tasks SET status = ?3, node_id = ?4, result = ?5,
			error_code = ?6, error_message = ?7, processing_ms = ?8, prompt_tokens = ?9, completion_tokens = ?10,
			finished_at = ?11, expires_at = ?11 + ttl_ms * 1000, lease_until = NULL,
			webhook_pending = (webhook_url <> '')
		WHERE id = ?1 AND gen = ?2 AND status = 'running'
		RETURNING `+asyncColumns, id, gen, end.Status, end.NodeID, []byte(end.Result), end.ErrorCode,
		end.ErrorMessage, end.ProcessingMs, prompt, completion, now))
	if errors.Is(err, sql.ErrNoRows) {
		return AsyncTask{}, fencedOut(id, gen)
	}
	if err != nil {
		return AsyncTask{}, fmt.Errorf("store: end async task: %w", err)
	}
	return t, nil
}

func (s *sqliteStore) CancelAsync(ctx context.Context, id, accountID string) (AsyncTask, error) {
	// SET expressions read the row as it was, as in PostgreSQL.
	now := micro(time.Now())
	t, err := scanSQLiteAsync(s.db.QueryRowContext(ctx, `UPDATE async_tasks SET
			status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
			cancel_requested = cancel_requested OR status = 'running',
			finished_at = CASE WHEN status = 'queued' THEN ?3 ELSE finished_at END,
			expires_at = CASE WHEN status = 'queued' THEN ?3 + ttl_ms * 1000 ELSE expires_at END,
			error_code = CASE WHEN status = 'queued' THEN 'cancelled' ELSE error_code END,
			webhook_pending = CASE WHEN status = 'queued' THEN webhook_url <> '' ELSE webhook_pending END
		WHERE id = ?1 AND account_id = ?2 AND (expires_at IS NULL OR expires_at > ?3)
		RETURNING `+asyncColumns, id, accountID, now))
	return t, notFound(err, "async task %s", id)
}

func (s *sqliteStore) ReleaseAsync(ctx context.Context, lost []string, maxAttempts int) ([]AsyncTask, error) {
	now := micro(time.Now())
	args := []any{now, maxAttempts}
	owners := "''" // matches no running task: owners are never empty
	if len(lost) > 0 {
		marks := make([]string, len(lost))
		for i, o := range lost {
			marks[i] = fmt.Sprintf("?%d", len(args)+1)
			args = append(args, o)
		}
		owners = strings.Join(marks, ", ")
	}
	const retry = `(attempts < ?2 AND NOT streamed)`
	const ends = `(cancel_requested OR NOT ` + retry + `)`
	rows, err := s.db.QueryContext(ctx, `UPDATE async_tasks SET
			status = CASE WHEN cancel_requested THEN 'cancelled' WHEN `+retry+` THEN 'queued' ELSE 'failed' END,
			error_code = CASE WHEN cancel_requested THEN 'cancelled' WHEN `+retry+` THEN error_code ELSE 'instance_lost' END,
			error_message = CASE WHEN NOT cancel_requested AND NOT `+retry+`
				THEN 'the instance running the task was lost' ELSE error_message END,
			finished_at = CASE WHEN `+ends+` THEN ?1 END,
			expires_at = CASE WHEN `+ends+` THEN ?1 + ttl_ms * 1000 END,
			webhook_pending = `+ends+` AND webhook_url <> '',
			owner = '', lease_until = NULL
		WHERE status = 'running' AND (lease_until < ?1 OR owner IN (`+owners+`))
		RETURNING `+asyncColumns, args...)
	all, err := collectSQLiteAsync(rows, err)
	if err != nil {
		return nil, fmt.Errorf("store: release async tasks: %w", err)
	}
	var out []AsyncTask
	for _, t := range all {
		if t.Status != AsyncQueued {
			out = append(out, t)
		}
	}
	return out, nil
}

func (s *sqliteStore) PendingWebhooks(ctx context.Context, endedBefore time.Time, limit int) ([]AsyncTask, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+asyncColumns+` FROM async_tasks
		WHERE webhook_pending = 1 AND finished_at < ? ORDER BY finished_at LIMIT ?`, micro(endedBefore), limit)
	out, err := collectSQLiteAsync(rows, err)
	if err != nil {
		return nil, fmt.Errorf("store: pending webhooks: %w", err)
	}
	return out, nil
}

func (s *sqliteStore) ClearWebhook(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE async_tasks SET webhook_pending = 0 WHERE id = ?`, id); err != nil {
		return fmt.Errorf("store: clear webhook: %w", err)
	}
	return nil
}

func (s *sqliteStore) PurgeAsync(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM async_tasks WHERE expires_at < ?`, micro(now))
	if err != nil {
		return 0, fmt.Errorf("store: purge async tasks: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
