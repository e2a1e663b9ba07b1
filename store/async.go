package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The statuses of an async task (POST /api/v1/tasks). queued and running
// are live; the other three are final and never change again.
const (
	AsyncQueued    = "queued"
	AsyncRunning   = "running"
	AsyncCompleted = "completed"
	AsyncFailed    = "failed"
	AsyncCancelled = "cancelled"
)

// AsyncTask is one async task as the queue keeps it.
type AsyncTask struct {
	ID        string
	AccountID string
	KeyID     string // the API key that submitted it (usage is metered under it)
	TaskType  string
	Content   string
	Params    json.RawMessage // a JSON object; nil means {}
	Stream    bool
	Trust     string // "official" restricts routing to official nodes
	Priority  int    // 0–9, higher first
	// WebhookURL is where the task's end is announced ("" for none).
	WebhookURL string
	// TTL is how long the task is kept after it ends.
	TTL time.Duration

	Status string
	// Attempts counts the times the task was handed to a node (claimed).
	Attempts int
	// Owner is the instance holding the lease of a running task, Gen the
	// lease's fencing generation (it grows with every claim), LeaseUntil
	// when the lease lapses unless renewed.
	Owner      string
	Gen        int64
	LeaseUntil time.Time
	// Streamed is set once a chunk of a running task reached a reader: such
	// a task is never retried.
	Streamed bool
	// CancelRequested is set by Cancel on a running task; the owner sends
	// the node task_cancel and ends it.
	CancelRequested bool
	// WebhookPending is set when a task with a WebhookURL ends, and cleared
	// by ClearWebhook once the delivery is queued (an outbox: an instance
	// lost between the two leaves it set for another to find).
	WebhookPending bool

	NodeID       string
	Result       string
	ErrorCode    string
	ErrorMessage string
	ProcessingMs int64
	Usage        *Usage

	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	ExpiresAt  *time.Time // FinishedAt + TTL once final
}

// AsyncEnd is how a running task ended, written by its lease holder.
type AsyncEnd struct {
	Status       string // AsyncCompleted, AsyncFailed or AsyncCancelled
	NodeID       string
	Result       string
	ErrorCode    string
	ErrorMessage string
	ProcessingMs int64
	Usage        *Usage
}

// AsyncQueue is the durable queue of async tasks, shared by every instance
// of a cluster (PostgreSQL) or kept by the one instance (SQLite). Each task
// is handed out by exactly one Claim at a time: a claim is a lease held by
// one instance and fenced by a generation, so a holder that lost its lease
// (it stalled, the lease lapsed and the task went to another) can no longer
// end, renew or mark the task.
type AsyncQueue interface {
	// SubmitAsync stores a new queued task (ID, AccountID, TaskType,
	// Priority and TTL set by the caller; CreatedAt by the queue). It is
	// ErrConflict if the ID exists.
	SubmitAsync(ctx context.Context, t AsyncTask) error
	// AsyncTask returns a task by ID, whoever owns it (the caller checks
	// the account); ErrNotFound if unknown or expired.
	AsyncTask(ctx context.Context, id string) (AsyncTask, error)
	// ClaimAsync leases the next queued task of one of taskTypes to owner
	// until now+lease: status running, Gen+1, Attempts+1, StartedAt set.
	// The next is the highest priority first; within one priority the
	// accounts take turns (an account's n-th queued task waits behind every
	// other account's (n-1)-th), oldest first within an account. Tasks
	// whose Trust is "official" are claimed only when official is true.
	// Concurrent claims never return the same lease. ErrNotFound when
	// nothing is queued for those types.
	ClaimAsync(ctx context.Context, owner string, taskTypes []string, official bool, lease time.Duration) (AsyncTask, error)
	// UnclaimAsync gives back a task its owner claimed and did not start
	// (the owner began draining meanwhile): queued again, its attempt
	// undone, its Gen kept (a stale holder stays fenced out). ErrConflict
	// if (id, gen) no longer holds a running lease.
	UnclaimAsync(ctx context.Context, id string, gen int64) error
	// RenewAsync extends every lease owner holds to now+lease in one
	// statement, and returns the IDs of its running tasks whose
	// cancellation was asked for.
	RenewAsync(ctx context.Context, owner string, lease time.Duration) (cancel []string, err error)
	// MarkStreamed records that a chunk of the task reached a reader; it is
	// ErrConflict if (id, gen) no longer holds the lease.
	MarkStreamed(ctx context.Context, id string, gen int64) error
	// EndAsync writes a running task's end if (id, gen) still holds its
	// lease, setting FinishedAt and ExpiresAt; ErrConflict otherwise (the
	// lease moved on, or the task ended already: nothing is written).
	EndAsync(ctx context.Context, id string, gen int64, end AsyncEnd) (AsyncTask, error)
	// CancelAsync cancels an account's task: a queued one ends cancelled at
	// once (returned with its final status); a running one gets
	// CancelRequested (returned still running). A final one is returned as
	// it is. ErrNotFound if unknown, expired or another account's.
	CancelAsync(ctx context.Context, id, accountID string) (AsyncTask, error)
	// ReleaseAsync handles the running tasks whose lease lapsed before now
	// or whose owner is one of lost: each goes back to queued (the lease
	// cleared) if it was claimed fewer than maxAttempts times and never
	// streamed, else it ends failed with code "instance_lost". It returns
	// the tasks it ended.
	ReleaseAsync(ctx context.Context, lost []string, maxAttempts int) (ended []AsyncTask, err error)
	// PendingWebhooks returns up to limit final tasks whose WebhookPending
	// is set and which ended before the given time, oldest first.
	PendingWebhooks(ctx context.Context, endedBefore time.Time, limit int) ([]AsyncTask, error)
	// ClearWebhook clears a task's WebhookPending.
	ClearWebhook(ctx context.Context, id string) error
	// PurgeAsync deletes final tasks whose ExpiresAt is before now and
	// returns how many.
	PurgeAsync(ctx context.Context, now time.Time) (int64, error)
}

// asyncColumns are the columns every read of a task returns, in the order
// the dialects' scanners expect.
const asyncColumns = `id, account_id, task_type, content, params, stream, trust, priority, webhook_url, ttl_ms,
	status, attempts, owner, gen, lease_until, streamed, cancel_requested, webhook_pending,
	node_id, result, error_code, error_message, processing_ms, prompt_tokens, completion_tokens,
	created_at, started_at, finished_at, expires_at, key_id`

// checkSubmit is SubmitAsync's validation, the same in both dialects.
func checkSubmit(t AsyncTask) error {
	switch {
	case t.ID == "", t.AccountID == "", t.TaskType == "":
		return fmt.Errorf("store: an async task needs an id, an account and a task type: %w", ErrInvalid)
	case t.Priority < 0 || t.Priority > 9:
		return fmt.Errorf("store: priority %d is not 0-9: %w", t.Priority, ErrInvalid)
	case t.TTL < time.Millisecond:
		return fmt.Errorf("store: ttl %s is under a millisecond: %w", t.TTL, ErrInvalid)
	}
	return nil
}

// checkEnd is EndAsync's validation.
func checkEnd(end AsyncEnd) error {
	switch end.Status {
	case AsyncCompleted, AsyncFailed, AsyncCancelled:
		return nil
	}
	return fmt.Errorf("store: %q is not a final status: %w", end.Status, ErrInvalid)
}

func fencedOut(id string, gen int64) error {
	return fmt.Errorf("store: async task %s: lease generation %d no longer holds it: %w", id, gen, ErrConflict)
}

// The queue in either dialect. On PostgreSQL every time is the database's
// (dialect.now), so the leases of instances whose clocks differ compare
// alike, and a claim takes the next row with FOR UPDATE SKIP LOCKED, so
// concurrent claimers never wait on, or get, the same task. On SQLite (one
// process) times are the process's, and every writing statement holds the
// file's write lock, so a claim's read and update are never interleaved
// with another's.

func scanAsync(r row, t *AsyncTask) error {
	var content, params, result []byte
	var ttlMs int64
	var prompt, completion *int64
	err := r.Scan(&t.ID, &t.AccountID, &t.TaskType, &content, &params, &t.Stream, &t.Trust, &t.Priority,
		&t.WebhookURL, &ttlMs, &t.Status, &t.Attempts, &t.Owner, &t.Gen, (*timeCol)(&t.LeaseUntil), &t.Streamed,
		&t.CancelRequested, &t.WebhookPending, &t.NodeID, &result, &t.ErrorCode, &t.ErrorMessage,
		&t.ProcessingMs, &prompt, &completion, (*timeCol)(&t.CreatedAt),
		optTimeCol{&t.StartedAt}, optTimeCol{&t.FinishedAt}, optTimeCol{&t.ExpiresAt}, &t.KeyID)
	if err != nil {
		return err
	}
	t.Content, t.Result, t.TTL = string(content), string(result), time.Duration(ttlMs)*time.Millisecond
	if params != nil {
		t.Params = params
	}
	if prompt != nil || completion != nil {
		t.Usage = &Usage{}
		if prompt != nil {
			t.Usage.PromptTokens = *prompt
		}
		if completion != nil {
			t.Usage.CompletionTokens = *completion
		}
	}
	return nil
}

func (s *sqlStore) SubmitAsync(ctx context.Context, t AsyncTask) error {
	if err := checkSubmit(t); err != nil {
		return err
	}
	var params []byte
	if len(t.Params) > 0 {
		params = t.Params
	}
	_, err := s.db.exec(ctx, `INSERT INTO async_tasks (id, account_id, task_type, content, params, stream, trust,
		priority, turn, webhook_url, ttl_ms, status, created_at, key_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
			(SELECT count(*) FROM async_tasks WHERE account_id = $2 AND task_type = $3 AND status = 'queued'),
			$9, $10, 'queued', `+s.d.now+`, $11)`,
		s.d.withNow([]any{t.ID, t.AccountID, cleanText(t.TaskType), []byte(t.Content), params, t.Stream, t.Trust, t.Priority,
			cleanText(t.WebhookURL), t.TTL.Milliseconds(), cleanText(t.KeyID)})...)
	if s.d.isUnique(err) {
		return fmt.Errorf("store: async task %s exists: %w", t.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("store: submit async task: %w", err)
	}
	return nil
}

func (s *sqlStore) AsyncTask(ctx context.Context, id string) (AsyncTask, error) {
	t, err := queryOne(ctx, s.db, scanAsync, `SELECT `+asyncColumns+` FROM async_tasks
		WHERE id = $1 AND (expires_at IS NULL OR expires_at > `+s.d.now+`)`, s.d.withNow([]any{id})...)
	return t, notFound(err, "async task %s", id)
}

func (s *sqlStore) ClaimAsync(ctx context.Context, owner string, taskTypes []string, official bool, lease time.Duration) (AsyncTask, error) {
	if len(taskTypes) == 0 {
		return AsyncTask{}, fmt.Errorf("store: no queued async task for no task type: %w", ErrNotFound)
	}
	ofTypes, types := s.d.in("task_type", 4, taskTypes)
	t, err := queryOne(ctx, s.db, scanAsync, `UPDATE async_tasks SET status = 'running', owner = $1, gen = gen + 1,
			attempts = attempts + 1, lease_until = `+s.d.addMicros(s.d.now, "$2")+`, started_at = `+s.d.now+`
		WHERE id = (SELECT id FROM async_tasks
			WHERE status = 'queued' AND `+ofTypes+` AND ($3 OR trust <> 'official')
			ORDER BY priority DESC, turn, created_at
			LIMIT 1`+s.d.skipLocked+`)
		RETURNING `+asyncColumns, s.d.withNow(append([]any{owner, lease.Microseconds(), official}, types...))...)
	if errors.Is(err, sql.ErrNoRows) {
		return AsyncTask{}, fmt.Errorf("store: no queued async task for %v: %w", taskTypes, ErrNotFound)
	}
	if err != nil {
		return AsyncTask{}, fmt.Errorf("store: claim an async task: %w", err)
	}
	return t, nil
}

func (s *sqlStore) UnclaimAsync(ctx context.Context, id string, gen int64) error {
	n, err := s.db.exec(ctx, `UPDATE async_tasks SET status = 'queued', owner = '', lease_until = NULL,
			started_at = NULL, attempts = attempts - 1
		WHERE id = $1 AND gen = $2 AND status = 'running'`, id, gen)
	if err != nil {
		return fmt.Errorf("store: unclaim async task: %w", err)
	}
	if n == 0 {
		return fencedOut(id, gen)
	}
	return nil
}

func (s *sqlStore) RenewAsync(ctx context.Context, owner string, lease time.Duration) ([]string, error) {
	type renewed struct {
		id     string
		cancel bool
	}
	scan := func(r row, v *renewed) error { return r.Scan(&v.id, &v.cancel) }
	rs, err := collect(ctx, s.db, scan, `UPDATE async_tasks SET lease_until = `+s.d.addMicros(s.d.now, "$2")+`
		WHERE owner = $1 AND status = 'running' RETURNING id, cancel_requested`,
		s.d.withNow([]any{owner, lease.Microseconds()})...)
	if err != nil {
		return nil, fmt.Errorf("store: renew async leases: %w", err)
	}
	var cancel []string
	for _, r := range rs {
		if r.cancel {
			cancel = append(cancel, r.id)
		}
	}
	return cancel, nil
}

func (s *sqlStore) MarkStreamed(ctx context.Context, id string, gen int64) error {
	n, err := s.db.exec(ctx, `UPDATE async_tasks SET streamed = true
		WHERE id = $1 AND gen = $2 AND status = 'running'`, id, gen)
	if err != nil {
		return fmt.Errorf("store: mark async task streamed: %w", err)
	}
	if n == 0 {
		return fencedOut(id, gen)
	}
	return nil
}

func (s *sqlStore) EndAsync(ctx context.Context, id string, gen int64, end AsyncEnd) (AsyncTask, error) {
	if err := checkEnd(end); err != nil {
		return AsyncTask{}, err
	}
	var prompt, completion *int64
	if end.Usage != nil {
		prompt, completion = &end.Usage.PromptTokens, &end.Usage.CompletionTokens
	}
	t, err := queryOne(ctx, s.db, scanAsync, `UPDATE async_tasks SET status = $3, node_id = $4, result = $5,
			error_code = $6, error_message = $7, processing_ms = $8, prompt_tokens = $9, completion_tokens = $10,
			finished_at = `+s.d.now+`, expires_at = `+s.d.addMicros(s.d.now, "ttl_ms * 1000")+`, lease_until = NULL,
			webhook_pending = (webhook_url <> '')
		WHERE id = $1 AND gen = $2 AND status = 'running'
		RETURNING `+asyncColumns, s.d.withNow([]any{id, gen, end.Status, end.NodeID, []byte(end.Result), cleanText(end.ErrorCode),
		cleanText(end.ErrorMessage), end.ProcessingMs, prompt, completion})...)
	if errors.Is(err, sql.ErrNoRows) {
		return AsyncTask{}, fencedOut(id, gen)
	}
	if err != nil {
		return AsyncTask{}, fmt.Errorf("store: end async task: %w", err)
	}
	return t, nil
}

func (s *sqlStore) CancelAsync(ctx context.Context, id, accountID string) (AsyncTask, error) {
	// One statement: a queued task ends, a running one is asked to, a
	// final one is left alone. SET expressions read the row as it was, and
	// RETURNING shows it as it now is.
	now := s.d.now
	t, err := queryOne(ctx, s.db, scanAsync, `UPDATE async_tasks SET
			status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
			cancel_requested = cancel_requested OR status = 'running',
			finished_at = CASE WHEN status = 'queued' THEN `+now+` ELSE finished_at END,
			expires_at = CASE WHEN status = 'queued' THEN `+s.d.addMicros(now, "ttl_ms * 1000")+` ELSE expires_at END,
			error_code = CASE WHEN status = 'queued' THEN 'cancelled' ELSE error_code END,
			webhook_pending = CASE WHEN status = 'queued' THEN webhook_url <> '' ELSE webhook_pending END
		WHERE id = $1 AND account_id = $2 AND (expires_at IS NULL OR expires_at > `+now+`)
		RETURNING `+asyncColumns, s.d.withNow([]any{id, accountID})...)
	return t, notFound(err, "async task %s", id)
}

func (s *sqlStore) ReleaseAsync(ctx context.Context, lost []string, maxAttempts int) ([]AsyncTask, error) {
	// A task whose cancellation was asked for ends cancelled; one that may
	// run again is queued; the rest fail. Only the ended ones come back.
	const retry = `(attempts < $1 AND NOT streamed)`
	const ends = `(cancel_requested OR NOT ` + retry + `)`
	now := s.d.now
	ofLost, owners := s.d.in("owner", 2, lost)
	all, err := collect(ctx, s.db, scanAsync, `UPDATE async_tasks SET
			status = CASE WHEN cancel_requested THEN 'cancelled' WHEN `+retry+` THEN 'queued' ELSE 'failed' END,
			error_code = CASE WHEN cancel_requested THEN 'cancelled' WHEN `+retry+` THEN error_code ELSE 'instance_lost' END,
			error_message = CASE WHEN NOT cancel_requested AND NOT `+retry+`
				THEN 'the instance running the task was lost' ELSE error_message END,
			finished_at = CASE WHEN `+ends+` THEN `+now+` END,
			expires_at = CASE WHEN `+ends+` THEN `+s.d.addMicros(now, "ttl_ms * 1000")+` END,
			webhook_pending = `+ends+` AND webhook_url <> '',
			owner = '', lease_until = NULL
		WHERE status = 'running' AND (lease_until < `+now+` OR `+ofLost+`)
		RETURNING `+asyncColumns, s.d.withNow(append([]any{maxAttempts}, owners...))...)
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

func (s *sqlStore) PendingWebhooks(ctx context.Context, endedBefore time.Time, limit int) ([]AsyncTask, error) {
	out, err := collect(ctx, s.db, scanAsync, `SELECT `+asyncColumns+` FROM async_tasks
		WHERE webhook_pending = `+s.d.trueLit+` AND finished_at < $1 ORDER BY finished_at LIMIT $2`, dbTime(endedBefore), limit)
	if err != nil {
		return nil, fmt.Errorf("store: pending webhooks: %w", err)
	}
	return out, nil
}

func (s *sqlStore) ClearWebhook(ctx context.Context, id string) error {
	if _, err := s.db.exec(ctx, `UPDATE async_tasks SET webhook_pending = false WHERE id = $1`, id); err != nil {
		return fmt.Errorf("store: clear webhook: %w", err)
	}
	return nil
}

func (s *sqlStore) PurgeAsync(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.db.exec(ctx, `DELETE FROM async_tasks WHERE expires_at < $1`, dbTime(now))
	if err != nil {
		return 0, fmt.Errorf("store: purge async tasks: %w", err)
	}
	return n, nil
}
