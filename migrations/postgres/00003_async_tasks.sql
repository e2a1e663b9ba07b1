-- Async tasks: the durable queue behind POST /api/v1/tasks.
--
-- A task is queued, then running under a lease (owner, gen, lease_until)
-- held by the instance whose node runs it, then final (completed, failed,
-- cancelled) until expires_at, when it is purged. gen grows with every
-- claim and fences every write of the lease holder. What the client sent
-- and the node answered is kept byte for byte (BYTEA: TEXT cannot hold NUL).

-- +goose Up
CREATE TABLE async_tasks (
    id                TEXT PRIMARY KEY,
    account_id        TEXT NOT NULL,
    task_type         TEXT NOT NULL,
    content           BYTEA NOT NULL,
    params            BYTEA,          -- a JSON object; NULL means {}
    stream            BOOLEAN NOT NULL DEFAULT false,
    trust             TEXT NOT NULL DEFAULT '',
    priority          SMALLINT NOT NULL CHECK (priority BETWEEN 0 AND 9),
    -- The account's place in the round: its n-th queued task waits behind
    -- every other account's (n-1)-th (fairness across accounts).
    turn              INTEGER NOT NULL DEFAULT 0,
    webhook_url       TEXT NOT NULL DEFAULT '',
    ttl_ms            BIGINT NOT NULL CHECK (ttl_ms > 0),
    status            TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    owner             TEXT NOT NULL DEFAULT '',
    gen               BIGINT NOT NULL DEFAULT 0,
    lease_until       TIMESTAMPTZ,
    streamed          BOOLEAN NOT NULL DEFAULT false,
    cancel_requested  BOOLEAN NOT NULL DEFAULT false,
    webhook_pending   BOOLEAN NOT NULL DEFAULT false,
    node_id           TEXT NOT NULL DEFAULT '',
    result            BYTEA NOT NULL DEFAULT ''::bytea,
    error_code        TEXT NOT NULL DEFAULT '',
    error_message     TEXT NOT NULL DEFAULT '',
    processing_ms     BIGINT NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT,         -- both NULL: no usage reported
    completion_tokens BIGINT,
    created_at        TIMESTAMPTZ NOT NULL,
    started_at        TIMESTAMPTZ,
    finished_at       TIMESTAMPTZ,
    expires_at        TIMESTAMPTZ
);
-- The claim's order, over queued tasks only.
CREATE INDEX async_tasks_queue ON async_tasks (task_type, priority DESC, turn, created_at) WHERE status = 'queued';
-- An account's queued tasks (its turn at submit).
CREATE INDEX async_tasks_account_queued ON async_tasks (account_id, task_type) WHERE status = 'queued';
-- Renewals by owner, releases by lapsed lease.
CREATE INDEX async_tasks_running_owner ON async_tasks (owner) WHERE status = 'running';
CREATE INDEX async_tasks_running_lease ON async_tasks (lease_until) WHERE status = 'running';
CREATE INDEX async_tasks_expires ON async_tasks (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX async_tasks_webhook_pending ON async_tasks (finished_at) WHERE webhook_pending;

-- +goose Down
DROP TABLE async_tasks;
