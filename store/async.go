package store

import (
	"context"
	"encoding/json"
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
	created_at, started_at, finished_at, expires_at`

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
