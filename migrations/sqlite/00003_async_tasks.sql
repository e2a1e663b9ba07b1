-- Async tasks: the durable queue behind POST /api/v1/tasks,
-- SQLite dialect (times INTEGER unix microseconds UTC, booleans 0/1).
--
-- A task is queued, then running under a lease (owner, gen, lease_until)
-- held by the instance whose node runs it, then final (completed, failed,
-- cancelled) until expires_at, when it is purged. gen grows with every
-- claim and fences every write of the lease holder.

-- +goose Up
CREATE TABLE async_tasks (
    id                TEXT PRIMARY KEY,
    account_id        TEXT NOT NULL,
    task_type         TEXT NOT NULL,
    content           BLOB NOT NULL,
    params            BLOB,           -- a JSON object; NULL means {}
    stream            INTEGER NOT NULL DEFAULT 0,
    trust             TEXT NOT NULL DEFAULT '',
    priority          INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 9),
    -- The account's place in the round: its n-th queued task waits behind
    -- every other account's (n-1)-th (fairness across accounts).
    turn              INTEGER NOT NULL DEFAULT 0,
    webhook_url       TEXT NOT NULL DEFAULT '',
    ttl_ms            INTEGER NOT NULL CHECK (ttl_ms > 0),
    status            TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    owner             TEXT NOT NULL DEFAULT '',
    gen               INTEGER NOT NULL DEFAULT 0,
    lease_until       INTEGER,
    streamed          INTEGER NOT NULL DEFAULT 0,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    webhook_pending   INTEGER NOT NULL DEFAULT 0,
    node_id           TEXT NOT NULL DEFAULT '',
    result            BLOB NOT NULL DEFAULT x'',
    error_code        TEXT NOT NULL DEFAULT '',
    error_message     TEXT NOT NULL DEFAULT '',
    processing_ms     INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER,        -- both NULL: no usage reported
    completion_tokens INTEGER,
    created_at        INTEGER NOT NULL,
    started_at        INTEGER,
    finished_at       INTEGER,
    expires_at        INTEGER
);
CREATE INDEX async_tasks_queue ON async_tasks (task_type, priority DESC, turn, created_at) WHERE status = 'queued';
CREATE INDEX async_tasks_account_queued ON async_tasks (account_id, task_type) WHERE status = 'queued';
CREATE INDEX async_tasks_running_owner ON async_tasks (owner) WHERE status = 'running';
CREATE INDEX async_tasks_running_lease ON async_tasks (lease_until) WHERE status = 'running';
CREATE INDEX async_tasks_expires ON async_tasks (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX async_tasks_webhook_pending ON async_tasks (finished_at) WHERE webhook_pending = 1;

-- +goose Down
DROP TABLE async_tasks;
