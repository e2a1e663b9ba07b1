-- switchyard's first schema, PostgreSQL dialect. Tables are created in the
-- first schema of the connection's search_path, so one database can hold
-- several switchyard deployments (and the tests give each test its own).

-- +goose Up
CREATE TABLE accounts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    email      TEXT NOT NULL DEFAULT '',
    trust      TEXT NOT NULL CHECK (trust IN ('community', 'official')),
    created_at TIMESTAMPTZ NOT NULL,
    -- Deleting an account keeps its row, because tasks and ratings still
    -- name it; every read treats a deleted account as absent.
    deleted_at TIMESTAMPTZ
);
-- Names are unique among live accounts only, so a deleted name can be reused.
CREATE UNIQUE INDEX accounts_live_name ON accounts (name) WHERE deleted_at IS NULL;

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    hash       TEXT NOT NULL UNIQUE, -- hex SHA-256 of the key; the key itself is never stored
    prefix     TEXT NOT NULL,        -- "gn_" + 8 hex, to recognise a key in listings
    created_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ
);
CREATE INDEX api_keys_account ON api_keys (account_id);
CREATE INDEX api_keys_prefix ON api_keys (prefix);

CREATE TABLE tasks (
    id                 TEXT PRIMARY KEY,
    account_id         TEXT NOT NULL,
    task_type          TEXT NOT NULL,
    stream             BOOLEAN NOT NULL DEFAULT FALSE,
    status             TEXT NOT NULL,
    error_code         TEXT NOT NULL DEFAULT '',
    node_ids           TEXT[] NOT NULL DEFAULT '{}',
    requester_instance TEXT NOT NULL DEFAULT '',
    owner_instance     TEXT NOT NULL DEFAULT '',
    attempts           INTEGER NOT NULL DEFAULT 0,
    created_at         TIMESTAMPTZ NOT NULL,
    assigned_at        TIMESTAMPTZ, -- NULL when never handed to a node
    finished_at        TIMESTAMPTZ NOT NULL,
    processing_ms      BIGINT NOT NULL DEFAULT 0,
    content_bytes      BIGINT NOT NULL DEFAULT 0,
    result_bytes       BIGINT NOT NULL DEFAULT 0,
    prompt_tokens      BIGINT NOT NULL DEFAULT 0,
    completion_tokens  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX tasks_finished_at ON tasks (finished_at);
-- Serves both status filters and "completed since t" (the status endpoint).
CREATE INDEX tasks_status_finished_at ON tasks (status, finished_at);

CREATE TABLE ratings (
    task_id    TEXT NOT NULL,
    node_id    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    rating     SMALLINT NOT NULL CHECK (rating BETWEEN 1 AND 5),
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (task_id, node_id)
);

CREATE TABLE node_stats (
    node_id          TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL DEFAULT '',
    name             TEXT NOT NULL DEFAULT '',
    total_tasks      BIGINT NOT NULL DEFAULT 0,
    successful_tasks BIGINT NOT NULL DEFAULT 0,
    total_ms         BIGINT NOT NULL DEFAULT 0,
    last_task_at     TIMESTAMPTZ,
    rating_sum       BIGINT NOT NULL DEFAULT 0,
    rating_count     BIGINT NOT NULL DEFAULT 0,
    suspended_until  TIMESTAMPTZ
);
CREATE INDEX node_stats_account ON node_stats (account_id);

-- +goose Down
DROP TABLE node_stats;
DROP TABLE ratings;
DROP TABLE tasks;
DROP TABLE api_keys;
DROP TABLE accounts;
