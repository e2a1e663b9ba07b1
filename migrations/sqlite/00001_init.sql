-- switchyard's first schema, SQLite dialect.
--
-- Times are INTEGER unix microseconds (UTC), the precision PostgreSQL keeps,
-- so that both dialects return the same values and compare them as numbers.
-- Booleans are INTEGER 0/1.

-- +goose Up
CREATE TABLE accounts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    email      TEXT NOT NULL DEFAULT '',
    trust      TEXT NOT NULL CHECK (trust IN ('community', 'official')),
    created_at INTEGER NOT NULL,
    -- Deleting an account keeps its row, because tasks and ratings still
    -- name it; every read treats a deleted account as absent.
    deleted_at INTEGER
);
-- Names are unique among live accounts only, so a deleted name can be reused.
CREATE UNIQUE INDEX accounts_live_name ON accounts (name) WHERE deleted_at IS NULL;

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    hash       TEXT NOT NULL UNIQUE, -- hex SHA-256 of the key; the key itself is never stored
    prefix     TEXT NOT NULL,        -- "gn_" + 8 hex, to recognise a key in listings
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX api_keys_account ON api_keys (account_id);
CREATE INDEX api_keys_prefix ON api_keys (prefix);

CREATE TABLE tasks (
    id                 TEXT PRIMARY KEY,
    account_id         TEXT NOT NULL,
    task_type          TEXT NOT NULL,
    stream             INTEGER NOT NULL DEFAULT 0,
    status             TEXT NOT NULL,
    error_code         TEXT NOT NULL DEFAULT '',
    node_ids           TEXT NOT NULL DEFAULT '[]', -- JSON array of strings
    requester_instance TEXT NOT NULL DEFAULT '',
    owner_instance     TEXT NOT NULL DEFAULT '',
    attempts           INTEGER NOT NULL DEFAULT 0,
    created_at         INTEGER NOT NULL,
    assigned_at        INTEGER, -- NULL when never handed to a node
    finished_at        INTEGER NOT NULL,
    processing_ms      INTEGER NOT NULL DEFAULT 0,
    content_bytes      INTEGER NOT NULL DEFAULT 0,
    result_bytes       INTEGER NOT NULL DEFAULT 0,
    prompt_tokens      INTEGER NOT NULL DEFAULT 0,
    completion_tokens  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX tasks_finished_at ON tasks (finished_at);
-- Serves both status filters and "completed since t" (the status endpoint).
CREATE INDEX tasks_status_finished_at ON tasks (status, finished_at);

CREATE TABLE ratings (
    task_id    TEXT NOT NULL,
    node_id    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    rating     INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 5),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, node_id)
);

CREATE TABLE node_stats (
    node_id          TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL DEFAULT '',
    name             TEXT NOT NULL DEFAULT '',
    total_tasks      INTEGER NOT NULL DEFAULT 0,
    successful_tasks INTEGER NOT NULL DEFAULT 0,
    total_ms         INTEGER NOT NULL DEFAULT 0,
    last_task_at     INTEGER,
    rating_sum       INTEGER NOT NULL DEFAULT 0,
    rating_count     INTEGER NOT NULL DEFAULT 0,
    suspended_until  INTEGER
);
CREATE INDEX node_stats_account ON node_stats (account_id);

-- +goose Down
DROP TABLE node_stats;
DROP TABLE ratings;
DROP TABLE tasks;
DROP TABLE api_keys;
DROP TABLE accounts;
